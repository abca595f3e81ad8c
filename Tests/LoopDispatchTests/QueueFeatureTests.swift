import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct QueueFeatureTests {
  @Test func finalizerRunsOnceAfterEveryItemSubmittedBeforeRelease() {
    let log = Locked([String]())
    let finalized = Latch()
    do {
      let queue = Queue(label: "finalized")
      queue.context = "the context"
      queue.setFinalizer { context in
        log.withLock { $0.append("finalizer(\(context as? String ?? "nil"))") }
        finalized.open()
      }
      let gate = Latch()
      queue.async { _ = gate.wait() }
      for index in 0..<3 { queue.async { log.withLock { $0.append("item \(index)") } } }
      gate.open()
    }  // Last reference dropped here, with items still queued.
    #expect(finalized.wait())
    #expect(log.value == ["item 0", "item 1", "item 2", "finalizer(the context)"])
  }

  @Test func specificsAreFoundThroughTheTargetChain() {
    let key = SpecificKey<String>()
    let other = SpecificKey<Int>()
    let parent = Queue(label: "parent")
    let child = Queue(label: "child", target: parent)
    parent.setSpecific(key: key, value: "from parent")
    #expect(child.getSpecific(key: key) == "from parent")
    #expect(child.getSpecific(key: other) == nil)
    #expect(Queue.getSpecific(key: key) == nil)  // Not on a queue here.
    #expect(child.sync { Queue.getSpecific(key: key) } == "from parent")
    let found = Shared<String?>(nil)
    let done = Latch()
    child.async {
      found.value = Queue.getSpecific(key: key)
      done.open()
    }
    _ = done.wait()
    #expect(found.value == "from parent")
    child.setSpecific(key: key, value: "own")
    #expect(child.sync { Queue.getSpecific(key: key) } == "own")
    child.setSpecific(key: key, value: nil)
    #expect(child.getSpecific(key: key) == "from parent")
  }

  @Test func currentNamesTheQueueRunningTheWork() {
    #expect(Queue.current == nil)
    let queue = Queue(label: "named")
    #expect(queue.sync { Queue.current?.label } == "named")
    #expect(Queue.global(.low).sync { Queue.current === Queue.global(.low) })
    let label = Shared<String?>(nil)
    let done = Latch()
    queue.async {
      label.value = Queue.current?.label
      done.open()
    }
    _ = done.wait()
    #expect(label.value == "named")
    #expect(queue.sync { queue.isCurrent })
    #expect(!queue.isCurrent)
  }

  @Test func prioritiesFlowFromTheRoot() {
    let high = Queue(label: "h", target: .global(.high))
    let child = Queue(label: "c", target: high)
    #expect(child.priority == .high)
    #expect(Queue(label: "d").priority == .default)
    #expect(Queue.global(.background).priority == .background)
  }

  @Test func applyRunsEveryIterationOnceAndSpreadsOverThePool() {
    let iterations = scaled(100_000)
    let threads = Locked(Set<UInt>())
    let seen = UnsafeMutablePointer<Atomic<Int>>.allocate(capacity: iterations)
    for index in 0..<iterations { (seen + index).initialize(to: Atomic(0)) }
    defer { seen.deallocate() }
    // Safe: `seen` outlives `concurrentPerform`, which returns after every iteration.
    let base = UInt(bitPattern: seen)
    // Iteration 0 does not return until iterations have run on two threads: if only one
    // thread ran them all (the caller), it would wait out the latch's deadline and fail.
    let twoThreads = Latch()
    let spread = Atomic<Bool>(false)
    Queue.concurrentPerform(iterations: iterations) { index in
      let pointer = UnsafeMutablePointer<Atomic<Int>>(bitPattern: base)! + index
      pointer.pointee.wrappingAdd(1, ordering: .relaxed)
      if index == 0 || index % 1_000 == 0 {
        let count = threads.withLock { set -> Int in
          set.insert(pthread_self())
          return set.count
        }
        if count >= 2 { twoThreads.open() }
      }
      if index == 0 { spread.store(twoThreads.wait(seconds: 30), ordering: .relaxed) }
    }
    var wrong = 0
    for index in 0..<iterations where seen[index].load(ordering: .relaxed) != 1 { wrong += 1 }
    #expect(wrong == 0)
    let spreadOverThreads = spread.load(ordering: .relaxed)
    #expect(spreadOverThreads, "every iteration ran on one thread")
    #expect(threads.value.count >= 2)
  }

  @Test func nestedApplyNeverDeadlocks() {
    let total = Counter()
    Queue.concurrentPerform(iterations: 16) { _ in
      Queue.concurrentPerform(iterations: 16) { _ in
        Queue.concurrentPerform(iterations: 4) { _ in total.increment() }
      }
    }
    #expect(total.current == 16 * 16 * 4)
  }

  @Test func applyOnASerialQueueRunsSerially() {
    let queue = Queue(label: "serial-apply")
    let inside = Atomic<Int>(0)
    let overlaps = Counter()
    let order = Shared([Int]())  // Only touched on `queue`.
    queue.apply(iterations: 1_000) { index in
      if inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue != 1 {
        overlaps.increment()
      }
      order.value.append(index)
      inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
    }
    #expect(overlaps.current == 0)
    #expect(order.value == Array(0..<1_000))
  }

  @Test func applyWithZeroIterationsReturnsAtOnce() {
    Queue.global().apply(iterations: 0) { _ in Issue.record("ran") }
  }
}
