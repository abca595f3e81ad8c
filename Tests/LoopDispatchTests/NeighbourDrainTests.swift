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
        #expect(slotsReturn(), "an earlier test's drains still hold slots")
        let extra = 2
        let count = pool.divertedDrainLimit + extra
        let queues = (0..<count).map { queue("neighbours.capped.\($0)", marked: true) }
        let kinds = Locked<[String]>([])
        let gate = Gate(arriving: count, finishing: count)
        for queue in queues {
          queue.async {
            kinds.withLock { $0.append(Self.currentThreadKind()) }
            gate.arrive()
            gate.finish()
          }
        }
        #expect(gate.allArrived())
        #expect(pool.divertedDrains.load(ordering: .relaxed) == pool.divertedDrainLimit)
        #expect(gate.openAndWaitForTheFinish())
        let ran = kinds.value
        #expect(ran.filter { $0 == "ld.oc." }.count == pool.divertedDrainLimit, "\(ran)")
        #expect(ran.filter { $0 == "ld.worker." }.count == extra, "\(ran)")
        #expect(slotsReturn())
      }

      /// A diverted drain that uses up its budget passes its slot to the queue's next drain:
      /// with the cap full of busy queues, each keeps its overcommit thread through its
      /// yields, and every slot comes back at the end (counted twice, each yield would be
      /// refused and sent to the plain workers).
      @Test func aYieldingDivertedDrainKeepsItsSlot() {
        defer { SpinGovernor.neighboursOverride.store(0, ordering: .relaxed) }
        SpinGovernor.neighboursOverride.store(1, ordering: .relaxed)
        let pool = WorkerPool.shared
        #expect(slotsReturn(), "an earlier test's drains still hold slots")
        let count = pool.divertedDrainLimit
        // Each queue's first drain holds the blocker and one budget's worth after it: the
        // rest run after its yields.
        let items = 3 * SerialDrainHooks.budget
        let queues = (0..<count).map { queue("neighbours.yielding.\($0)", marked: true) }
        let kinds = Locked<[String: Int]>([:])
        let gate = Gate(arriving: count, finishing: count * (items - 1))
        for queue in queues {
          queue.async { gate.arrive() }
          for _ in 1..<items {
            queue.async {
              let kind = Self.currentThreadKind()
              kinds.withLock { $0[kind, default: 0] += 1 }
              gate.finish()
            }
          }
        }
        #expect(gate.allArrived())
        #expect(gate.openAndWaitForTheFinish())
        #expect(kinds.value == ["ld.oc.": count * (items - 1)])
        #expect(slotsReturn())
      }

      /// Items that wait at a gate until `arriving` of them have arrived (so that all their
      /// drains are in flight at once), and a count of the `finishing` items that end.
      private final class Gate: Sendable {
        private let arriving: Int
        private let finishing: Int
        private let arrived = Counter()
        private let allArrivedLatch = Latch()
        private let gate = Latch()
        private let finished = Counter()
        private let allFinished = Latch()

        init(arriving: Int, finishing: Int) {
          self.arriving = arriving
          self.finishing = finishing
        }

        /// In an item: counts it in, and waits for the gate.
        func arrive() {
          if arrived.increment() == arriving { allArrivedLatch.open() }
          _ = gate.wait()
        }

        /// In an item: counts it out.
        func finish() {
          if finished.increment() == finishing { allFinished.open() }
        }

        /// Whether all arrived within 30 s.
        func allArrived() -> Bool { allArrivedLatch.wait() }

        /// Opens the gate; whether all finished within 30 s.
        func openAndWaitForTheFinish() -> Bool {
          gate.open()
          return allFinished.wait()
        }
      }

      /// Whether every diverted drain's slot is back within 10 s (a condition polled, with a
      /// deadline: a drain gives its slot back just after its last item, which a test cannot
      /// observe otherwise).
      private func slotsReturn() -> Bool {
        let deadline = Deadline.now.uptimeNanoseconds + 10_000_000_000
        while WorkerPool.shared.divertedDrains.load(ordering: .relaxed) != 0 {
          if Deadline.now.uptimeNanoseconds > deadline { return false }
          sched_yield()
        }
        return true
      }

      /// "ld.oc." or "ld.worker.": the kind of pool thread running the caller.
      private static func currentThreadKind() -> String {
        let comm = TestSupport.readSmallFile("/proc/thread-self/comm")
        return ["ld.oc.", "ld.worker."].first { comm.hasPrefix($0) } ?? comm
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
