import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// Each misuse traps with one line naming the queue; the child process's stderr is checked.
@Suite struct MisuseTests {
  @Test func syncOntoTheCurrentSerialQueue() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let queue = Queue(label: "mine")
      queue.sync { queue.sync {} }
    }
    expectMessage(result, "sync onto queue \"mine\" already owned by this thread")
  }

  @Test func syncOntoTheCurrentQueueFromAnAsyncItem() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let queue = Queue(label: "worker")
      queue.async { queue.sync {} }
      while true { Queue.global().sync {} }
    }
    expectMessage(result, "sync onto queue \"worker\" already owned by this thread")
  }

  @Test func syncOntoAQueueWhoseTargetIsOwned() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let parent = Queue(label: "parent")
      let child = Queue(label: "child", target: parent)
      parent.sync { child.sync {} }
    }
    expectMessage(
      result, "sync onto queue \"child\" whose target queue \"parent\" is already owned")
  }

  @Test func barrierSyncFromInsideAConcurrentQueue() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let queue = Queue(label: "readers", attributes: .concurrent)
      queue.sync { queue.sync(flags: .barrier) {} }
    }
    expectMessage(result, "sync onto queue \"readers\" already owned by this thread")
  }

  @Test func overResume() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let queue = Queue(label: "balanced")
      queue.suspend()
      queue.resume()
      queue.resume()
    }
    expectMessage(result, "resume() on queue \"balanced\" that is not suspended (over-resume)")
  }

  @Test func overResumeOfAConcurrentQueue() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Queue(label: "wide", attributes: .concurrent).resume()
    }
    expectMessage(result, "resume() on queue \"wide\" that is not suspended (over-resume)")
  }

  @Test func negativeWidth() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Queue(label: "narrow", attributes: .concurrent, width: -3)
    }
    expectMessage(result, "concurrent queue width must be at least 1, got -3 (queue \"narrow\")")
  }

  @Test func widthOnASerialQueue() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Queue(label: "s", width: 4)
    }
    expectMessage(result, "width 4 given for serial queue \"s\"")
  }

  @Test func targetCycle() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let a = Queue(label: "a", attributes: .initiallyInactive)
      let b = Queue(label: "b", target: a)
      a.setTarget(b)
    }
    expectMessage(result, "setTarget(\"b\") on queue \"a\" would create a target cycle")
  }

  /// `a.setTarget(b)` and `b.setTarget(a)` at the same moment on two threads: one of them
  /// must trap with the cycle message (the check and the publication are one step). Before,
  /// both could pass their check and form a cycle silently; the child then finds the cycle,
  /// exits 0 and fails this test. (Whether a given run hits that window is up to the
  /// scheduler: the rounds make it likely, not certain.)
  @Test func concurrentOppositeSetTargetsTrapRatherThanFormACycle() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      for _ in 0..<10_000 {
        let a = Queue(label: "a", attributes: .initiallyInactive)
        let b = Queue(label: "b", attributes: .initiallyInactive)
        let arrived = Atomic<Int>(0)
        let threads = [(a, b), (b, a)].map { queue, target in
          startThread {
            arrived.wrappingAdd(1, ordering: .sequentiallyConsistent)
            while arrived.load(ordering: .sequentiallyConsistent) < 2 {}
            queue.setTarget(target)
          }
        }
        for thread in threads { pthread_join(thread, nil) }
        // Both calls returned: a cycle now exists unless one of them trapped.
        if a.target === b && b.target === a { exit(0) }
      }
    }
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(text.contains("would create a target cycle"), "stderr: \(text)")
  }

  @Test func targetOnAGlobalQueue() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Queue.global().setTarget(Queue(label: "x"))
    }
    expectMessage(result, "setTarget on global queue")
  }

  @Test func releasingASuspendedQueueWithWork() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      do {
        let queue = Queue(label: "dropped")
        queue.suspend()
        queue.async {}
      }
    }
    expectMessage(
      result,
      "queue \"dropped\" was released while suspended or inactive with work still queued")
  }
}

/// Checks that the trapped child printed `expected` after the standard prefix.
func expectMessage(
  _ result: ExitTest.Result?, _ expected: String,
  sourceLocation: SourceLocation = #_sourceLocation
) {
  let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
  #expect(
    text.contains("BUG IN CLIENT OF LOOPDISPATCH: " + expected), "stderr: \(text)",
    sourceLocation: sourceLocation)
}
