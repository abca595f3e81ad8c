import Glibc
import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// Posts that need no wake-up make none: the loop's own thread never writes its eventfd, and
/// other threads skip the write while the loop is awake (see `EventLoop+Execute.swift`).
@Suite struct WakeSuppressionTests {
  /// Closures posted from the loop thread (from inside a handler, and a chain of posts that
  /// each post the next) all run, and the eventfd is never written for them.
  @Test func postsFromTheLoopThreadNeverWriteTheEventfd() {
    withLoopThread { loop in
      let done = Latch()
      let ran = LoopConfined(0)
      let writesBefore = Atomic<UInt64>(0)
      let writesAfter = Atomic<UInt64>(0)
      let chain = 1_000
      @Sendable func step(_ remaining: Int) {
        ran.value += 1
        if remaining == 0 {
          writesAfter.store(loop.wakeupCount, ordering: .sequentiallyConsistent)
          done.open()
          return
        }
        // Posted from the loop thread: runs on a later turn, with no eventfd write.
        loop.execute { step(remaining - 1) }
      }
      loop.execute {
        writesBefore.store(loop.wakeupCount, ordering: .sequentiallyConsistent)
        for _ in 0..<100 { loop.execute { ran.value += 1 } }
        step(chain)
      }
      #expect(done.wait())
      let before = writesBefore.load(ordering: .sequentiallyConsistent)
      let after = writesAfter.load(ordering: .sequentiallyConsistent)
      #expect(
        after == before, "posts from the loop thread wrote the eventfd \(after - before) times")
      let total = Shared(0)
      let counted = Latch()
      loop.execute {
        total.value = ran.value
        counted.open()
      }
      #expect(counted.wait())
      #expect(total.value == 100 + chain + 1)
    }
  }

  /// A post from another thread while the loop is busy in a handler (awake) needs no write:
  /// the loop finds it before it sleeps.
  @Test func aPostWhileTheLoopIsBusyDoesNotWriteTheEventfd() {
    withLoopThread { loop in
      let inHandler = Latch()
      let release = Atomic<Bool>(false)
      let writesBefore = Atomic<UInt64>(0)
      let ranLate = Latch()
      loop.execute {
        writesBefore.store(loop.wakeupCount, ordering: .sequentiallyConsistent)
        inHandler.open()
        // Busy (awake) until the other thread has posted.
        while !release.load(ordering: .sequentiallyConsistent) { sched_yield() }
      }
      #expect(inHandler.wait())
      for _ in 0..<10 { loop.execute {} }
      loop.execute { ranLate.open() }
      release.store(true, ordering: .sequentiallyConsistent)
      #expect(ranLate.wait())
      let writes = loop.wakeupCount - writesBefore.load(ordering: .sequentiallyConsistent)
      #expect(writes == 0, "posts to an awake loop wrote the eventfd \(writes) times")
    }
  }
}
