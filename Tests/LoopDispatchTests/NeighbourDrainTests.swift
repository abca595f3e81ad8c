import Glibc
import TestSupport
import Testing

@testable import LoopDispatch

#if DEBUG
  // Debug builds only: the governor's verdict is forced with `SpinGovernor.neighboursOverride`.
  /// Where a serial queue marked `drainsOnOvercommitBesideNeighbours` (what the C API's
  /// `dispatch_queue_create` marks) drains: on an overcommit thread while neighbours take the
  /// CPUs and its target is a plain global queue; on the plain workers otherwise. Nested in
  /// the serialized `SpinGovernorTests`: the override is one process-wide switch, which
  /// would answer for the governors that suite's tests build.
  extension SpinGovernorTests {
    @Suite struct NeighbourDrainTests {
      @Test func aMarkedQueueDrainsOnItsOwnThreadOnlyBesideNeighboursAndOnlyOffAGlobalQueue() {
        defer { SpinGovernor.neighboursOverride.store(0, ordering: .relaxed) }
        SpinGovernor.neighboursOverride.store(1, ordering: .relaxed)
        #expect(threadRunningAnItem(of: queue("neighbours.marked", marked: true)) == "ld.oc.")
        // Not marked (the Swift API's queues): the plain workers, neighbours or not.
        #expect(threadRunningAnItem(of: queue("neighbours.plain", marked: false)) == "ld.worker.")
        // Marked, but its target is a custom queue: it follows its target.
        let target = queue("neighbours.target", marked: false)
        let child = queue("neighbours.child", marked: true, target: target)
        #expect(threadRunningAnItem(of: child) == "ld.worker.")
        // No neighbours: the plain workers.
        SpinGovernor.neighboursOverride.store(2, ordering: .relaxed)
        #expect(threadRunningAnItem(of: queue("neighbours.quiet", marked: true)) == "ld.worker.")
      }

      private func queue(_ label: String, marked: Bool, target: Queue? = nil) -> Queue {
        let queue = Queue(label: label, target: target)
        // The workers keep their own names, which tell the two kinds apart.
        queue.namesThreads = false
        queue.drainsOnOvercommitBesideNeighbours = marked
        return queue
      }

      /// The kind of thread ("ld.oc." or "ld.worker.") that ran one item of `queue`.
      private func threadRunningAnItem(of queue: Queue) -> String {
        let name = Locked("")
        let ran = Latch()
        queue.async {
          let comm = TestSupport.readSmallFile("/proc/thread-self/comm")
          name.withLock { $0 = comm }
          ran.open()
        }
        #expect(ran.wait())
        let comm = name.value
        return ["ld.oc.", "ld.worker."].first { comm.hasPrefix($0) } ?? comm
      }
    }
  }
#endif
