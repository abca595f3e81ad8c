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

      /// Beside neighbours, at most `divertedDrainLimit` drains run on overcommit threads at
      /// once; the rest take the plain workers. Each queue's one item blocks until all have
      /// started, so every drain is in flight when the next is scheduled.
      @Test func divertedDrainsAreCappedAndTheRestTakeThePlainWorkers() {
        defer { SpinGovernor.neighboursOverride.store(0, ordering: .relaxed) }
        SpinGovernor.neighboursOverride.store(1, ordering: .relaxed)
        let pool = WorkerPool.shared
        let extra = 2
        let count = pool.divertedDrainLimit + extra
        let queues = (0..<count).map { queue("neighbours.capped.\($0)", marked: true) }
        let kinds = Locked<[String]>([])
        let started = Counter()
        let allStarted = Latch()
        let gate = Latch()
        let finished = Counter()
        let allFinished = Latch()
        for queue in queues {
          queue.async {
            let comm = TestSupport.readSmallFile("/proc/thread-self/comm")
            kinds.withLock {
              $0.append(["ld.oc.", "ld.worker."].first { comm.hasPrefix($0) } ?? comm)
            }
            if started.increment() == count { allStarted.open() }
            _ = gate.wait()
            if finished.increment() == count { allFinished.open() }
          }
        }
        #expect(allStarted.wait())
        #expect(pool.divertedDrains.load(ordering: .relaxed) == pool.divertedDrainLimit)
        gate.open()
        #expect(allFinished.wait())
        let ran = kinds.value
        #expect(ran.filter { $0 == "ld.oc." }.count == pool.divertedDrainLimit, "\(ran)")
        #expect(ran.filter { $0 == "ld.worker." }.count == extra, "\(ran)")
        // Each diverted drain gives its count back when its run returns, just after its item
        // (a condition polled, with a deadline: the drains' last steps are not observable).
        let deadline = Deadline.now.uptimeNanoseconds + 10_000_000_000
        while pool.divertedDrains.load(ordering: .relaxed) != 0,
          Deadline.now.uptimeNanoseconds < deadline
        {
          sched_yield()
        }
        #expect(pool.divertedDrains.load(ordering: .relaxed) == 0)
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
