import Glibc
import TestSupport
import Testing

@testable import MainLoop

@Suite struct RunTests {
  @Test func stopFromAnotherThreadEndsRun() {
    let loop = EventLoop(name: "stop")
    let started = Latch()
    let stopper = NativeThread.spawn(name: "stopper") {
      _ = started.wait()
      loop.stop()
    }!
    loop.execute { started.open() }
    loop.run()  // Returns only because of stop().
    stopper.join()
    #expect(!loop.isRunning)
  }

  @Test func stopBeforeRunIsSticky() {
    let loop = EventLoop(name: "sticky")
    loop.stop()
    let before = loop.turnCount
    loop.run()
    #expect(loop.turnCount == before)
  }

  @Test func boundedRunReturnsAtItsDeadlineNeverEarlier() {
    let loop = EventLoop(name: "deadline")
    for milliseconds in [1, 5, 20] {
      let deadline = Deadline.now + .milliseconds(milliseconds)
      #expect(loop.run(until: deadline))
      #expect(Deadline.now >= deadline)
    }
    #expect(expectClean(loop))
  }

  @Test func conditionRunReturnsWhenConditionHolds() {
    let loop = EventLoop(name: "condition")
    let flag = LoopConfined(false)
    loop.schedule(after: .milliseconds(2)) { flag.value = true }
    #expect(loop.run(until: { flag.value }, deadline: .now + .seconds(10)))
    // A condition that never holds returns false at the deadline.
    #expect(!loop.run(until: { false }, deadline: .now + .milliseconds(5)))
  }

  @Test func loopCanBeRunAgainAfterStop() {
    let loop = EventLoop(name: "again")
    for _ in 0..<3 {
      let ran = LoopConfined(false)
      loop.execute {
        ran.value = true
        loop.stop()
      }
      loop.run()
      #expect(ran.value)
    }
  }

  @Test func reenteringRunTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = EventLoop(name: "reentrant")
      loop.execute { loop.run() }
      loop.run()
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains("BUG IN CLIENT OF LOOPDISPATCH: EventLoop \"reentrant\" run() re-entered"))
  }

  @Test func runningOnASecondThreadTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let loop = EventLoop(name: "bound")
      loop.stop()
      loop.run()  // Binds to this thread.
      let other = NativeThread.spawn(name: "intruder") { loop.run() }!
      other.join()
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains("BUG IN CLIENT OF LOOPDISPATCH: EventLoop \"bound\" is bound to another thread")
    )
  }

  @Test func mainLoopOffTheMainThreadTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let other = NativeThread.spawn(name: "not-main") { EventLoop.main.run() }!
      other.join()
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(
      text.contains(
        "BUG IN CLIENT OF LOOPDISPATCH: EventLoop.main must run on the process main thread, not on thread \"not-main\""
      ))
  }

  @Test func nonPositiveBatchLimitTraps() async {
    await #expect(processExitsWith: .failure) {
      _ = EventLoop(name: "bad", batchLimit: 0)
    }
  }
}
