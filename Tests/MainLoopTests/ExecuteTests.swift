import CLibevent
import Glibc
import Synchronization
import TestSupport
import Testing

@testable import MainLoop

@Suite struct ExecuteTests {
  @Test func postedClosuresRunOnTheLoopThread() {
    withLoopThread { loop in
      let done = Latch()
      let onLoop = Atomic<Bool>(false)
      loop.execute {
        onLoop.store(loop.isInLoopThread, ordering: .sequentiallyConsistent)
        done.open()
      }
      #expect(done.wait())
      let ranOnLoop = onLoop.load(ordering: .sequentiallyConsistent)
      #expect(ranOnLoop)
      #expect(!loop.isInLoopThread)
    }
  }

  @Test func fifoPerProducerWithFourProducers() {
    let producers = 4
    let perProducer = scaled(100_000)
    let lastSeen = LoopConfined([Int](repeating: -1, count: producers))
    let outOfOrder = LoopConfined(0)
    let ran = LoopConfined(0)
    let loop = EventLoop(name: "fifo")
    let finished = Latch()
    let threads = (0..<producers).map { producer in
      NativeThread.spawn(name: "producer-\(producer)") {
        for index in 0..<perProducer {
          loop.execute {
            if lastSeen.value[producer] != index - 1 { outOfOrder.value += 1 }
            lastSeen.value[producer] = index
            ran.value += 1
            if ran.value == producers * perProducer { finished.open() }
          }
        }
      }!
    }
    let total = producers * perProducer
    #expect(loop.run(until: { ran.value == total }, deadline: .now + .seconds(60)))
    for thread in threads { thread.join() }
    #expect(outOfOrder.value == 0)
    #expect(ran.value == total)
    #expect(lastSeen.value == [Int](repeating: perProducer - 1, count: producers))
  }

  @Test func wakeUpsCoalesceWhileOnePending() {
    let loop = EventLoop(name: "coalesce")
    let ran = LoopConfined(0)
    let thread = NativeThread.spawn(name: "poster") {
      for _ in 0..<10_000 { loop.execute { ran.value += 1 } }
    }!
    thread.join()
    // The loop has not run: every post after the first found a wake-up pending.
    #expect(loop.wakeupCount == 1)
    #expect(loop.run(until: { ran.value == 10_000 }, deadline: .now + .seconds(30)))
    // Ten bounded batches (limit 1024) each re-signal at most once.
    #expect(loop.wakeupCount <= 1 + 10)
  }

  @Test func aFloodOfPostsDoesNotStarveDescriptors() throws {
    let loop = EventLoop(name: "flood", batchLimit: 256)
    let pipe = Pipe()
    pipe.write()
    let postsRun = LoopConfined(0)
    let postsRunAtFirstRead = LoopConfined(-1)
    let watch = try loop.watch(fd: pipe.readEnd, for: .read) {
      if postsRunAtFirstRead.value < 0 { postsRunAtFirstRead.value = postsRun.value }
      pipe.drain()
    }
    for _ in 0..<100_000 { loop.execute { postsRun.value += 1 } }
    #expect(loop.run(until: { postsRun.value == 100_000 }, deadline: .now + .seconds(30)))
    // The fd was ready from the start; it must be served within the first two batches.
    #expect(postsRunAtFirstRead.value >= 0)
    #expect(postsRunAtFirstRead.value <= 2 * 256)
    watch.cancel()
    #expect(expectClean(loop))
  }

  @Test func executeFromTheLoopThreadRunsOnALaterTurn() {
    let loop = EventLoop(name: "later")
    let order = LoopConfined([String]())
    loop.execute {
      loop.execute { order.value.append("inner") }
      order.value.append("outer-end")
    }
    #expect(loop.run(until: { order.value.count == 2 }, deadline: .now + .seconds(10)))
    #expect(order.value == ["outer-end", "inner"])
  }

  @Test func rawBaseAcceptsUsersOwnEvents() {
    let loop = EventLoop(name: "raw")
    let pipe = Pipe()
    let fired = Counter()
    let rawEvent = LoopConfined<OpaquePointer?>(nil)
    loop.execute {
      // Safe: `fired` outlives the event, which is freed below before the test returns.
      let context = Unmanaged.passUnretained(fired).toOpaque()
      rawEvent.value = event_new(
        loop.rawBase, pipe.readEnd, cl_ev_read,
        { _, _, context in
          Unmanaged<Counter>.fromOpaque(context!).takeUnretainedValue().increment()
        }, context)
      event_add(rawEvent.value, nil)
      pipe.write()
    }
    #expect(loop.run(until: { fired.current == 1 }, deadline: .now + .seconds(10)))
    event_free(rawEvent.value)
    #expect(expectClean(loop))
  }
}
