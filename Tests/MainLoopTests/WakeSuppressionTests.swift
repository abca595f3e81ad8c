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

  /// Waits (bounded) until the loop sleeps with its timer descriptor armed for `deadline`.
  private func waitUntilAsleep(_ loop: EventLoop, armedFor deadline: UInt64) -> Bool {
    let giveUp = Deadline.now + .seconds(20)
    while Deadline.now < giveUp {
      if !loop.wakePending.load(ordering: .sequentiallyConsistent)
        && loop.armedDeadlineForSchedulers.load(ordering: .sequentiallyConsistent) == deadline
      {
        return true
      }
      sched_yield()
    }
    return false
  }

  /// Timers scheduled from another thread for the instant the sleeping loop's descriptor is
  /// armed for, or later, do not wake it: it inserts them when it wakes for that instant, and
  /// each still fires no earlier than its deadline, in deadline order. One due earlier does
  /// wake it, and fires long before the armed instant.
  @Test func timersDueAfterTheArmedInstantDoNotWakeASleepingLoop() {
    withLoopThread { loop in
      let fired = Locked([Int]())
      let early = Counter()
      let armedFired = Latch()
      let lastFired = Latch()
      let armed = Deadline.now + .milliseconds(50)
      loop.schedule(at: armed) { armedFired.open() }
      #expect(waitUntilAsleep(loop, armedFor: armed.uptimeNanoseconds))
      let writesBefore = loop.wakeupCount
      let count = 100
      for index in (0..<count).reversed() {
        let deadline = armed + .microseconds(index)
        loop.schedule(at: deadline) {
          if Deadline.now < deadline { early.increment() }
          fired.withLock { $0.append(index) }
          if index == count - 1 { lastFired.open() }
        }
      }
      // Not woken: no eventfd write (the loop was asleep, so any wake would have been one).
      #expect(loop.wakeupCount == writesBefore)
      #expect(armedFired.wait())
      #expect(lastFired.wait())
      #expect(fired.value == Array(0..<count))
      #expect(early.current == 0)

      // Now armed ten seconds ahead: a timer due in a millisecond must wake the loop.
      let far = loop.schedule(at: .now + .seconds(10)) {}
      #expect(waitUntilAsleep(loop, armedFor: far.deadline))
      let writesBeforeEarly = loop.wakeupCount
      let soon = Latch()
      loop.schedule(at: .now + .milliseconds(1)) { soon.open() }
      #expect(loop.wakeupCount == writesBeforeEarly + 1)
      #expect(soon.wait(seconds: 5))
      far.cancel()
    }
  }

  /// Threads scheduling timers around the armed instant while the loop sleeps and wakes:
  /// none is stranded (each fires, no earlier than its deadline).
  @Test func timersScheduledAroundTheArmedInstantAreNeverStranded() {
    withLoopThread { loop in
      let threads = 4
      let perThread = scaled(2_000)
      let total = threads * perThread
      let firedCount = Counter()
      let early = Counter()
      let done = Latch()
      let handles = (0..<threads).map { thread in
        startThread {
          var state = UInt64(thread + 1) &* 0x9E37_79B9_7F4A_7C15
          for _ in 0..<perThread {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            // 0–2 ms ahead: often just before or just after what the loop is armed for.
            let deadline = Deadline.now + .microseconds(Int64((state >> 33) % 2_000))
            loop.schedule(at: deadline) {
              if Deadline.now < deadline { early.increment() }
              if firedCount.increment() == total { done.open() }
            }
            if state >> 60 == 0 { sched_yield() }
          }
        }
      }
      for handle in handles { pthread_join(handle, nil) }
      #expect(done.wait(seconds: 60))
      #expect(firedCount.current == total)
      #expect(early.current == 0)
    }
  }
}
