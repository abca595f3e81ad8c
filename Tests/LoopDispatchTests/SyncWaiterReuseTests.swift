import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// A thread's contended `sync`s onto a concurrent queue reuse one waiter
/// (`SyncWaiter.reusable`): no allocation per wait once the thread has its spare.
struct SyncWaiterReuseTests {
  @Test func contendedSyncsOfOneThreadReuseItsWaiter() {
    let queue = Queue(label: "waiter-reuse", attributes: .concurrent)
    let armed = Semaphore(value: 0)
    let returned = Semaphore(value: 0)
    // The thread's spare waiter after each of its two syncs (0: none).
    let spares = Mutex<[UInt]>([])
    let ran = Atomic<Int>(0)
    let helper = startThread {
      for _ in 0..<2 {
        armed.wait()
        queue.sync { _ = ran.wrappingAdd(1, ordering: .relaxed) }
        let spare = ThreadSlots.syncWaiter().map { UInt(bitPattern: $0) } ?? 0
        spares.withLock { $0.append(spare) }
        returned.signal()
      }
    }
    for round in 1...2 {
      // A barrier holds the queue until the helper's sync waits behind it.
      let gate = Semaphore(value: 0)
      queue.async(flags: .barrier) { gate.wait() }
      armed.signal()
      while queue.concurrentState!.withLock({ $0.pending.count }) < 1 { sched_yield() }
      gate.signal()
      returned.wait()
      #expect(ran.load(ordering: .relaxed) == round)
    }
    pthread_join(helper, nil)
    let seen = spares.withLock { $0 }
    #expect(seen.count == 2)
    #expect(seen.first != 0)
    #expect(seen.first == seen.last)
  }

  /// A `sync` inside a contended `sync`'s closure, itself contended, takes the spare the
  /// outer one put back, and both return.
  @Test func aNestedContendedSyncReusesTheOuterWaiter() {
    let outer = Queue(label: "waiter-reuse.outer", attributes: .concurrent)
    let inner = Queue(label: "waiter-reuse.inner", attributes: .concurrent)
    let outerGate = Semaphore(value: 0)
    let innerGate = Semaphore(value: 0)
    let order = Mutex<[String]>([])
    outer.async(flags: .barrier) { outerGate.wait() }
    inner.async(flags: .barrier) { innerGate.wait() }
    let helper = startThread {
      outer.sync {
        order.withLock { $0.append("outer") }
        inner.sync { order.withLock { $0.append("inner") } }
      }
    }
    while outer.concurrentState!.withLock({ $0.pending.count }) < 1 { sched_yield() }
    outerGate.signal()
    while inner.concurrentState!.withLock({ $0.pending.count }) < 1 { sched_yield() }
    innerGate.signal()
    pthread_join(helper, nil)
    #expect(order.withLock { $0 } == ["outer", "inner"])
  }
}
