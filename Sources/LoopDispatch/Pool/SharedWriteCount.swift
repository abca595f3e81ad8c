import Synchronization

/// The paths of the pool that write shared cache lines: process-wide words (an injection
/// queue, the idle set, `searching`, the supervisor's word, the shared node stack) or another
/// worker's lines (a victim's queue head, a sleeper's park word, a rescued slot). A write to
/// the writer's own lines (its local queue, its slot, its figures) is not counted: no other
/// core writes them per job, so they stay in the writer's cache.
///
/// Each counted site adds the stores and read-modify-writes it makes, failed
/// compare-and-swaps included (a failed one takes the line all the same). Debug builds only
/// (`countSharedWrite` is nothing in a release build); `PoolWriteCountTests` reads the
/// counts, and <doc:ThreadingModel> ("What each path writes") is written from them.
package enum SharedWritePath: Int, CaseIterable, Sendable {
  /// A job from a thread that is not a worker: the injection queue's `pushed` count, its
  /// tail exchange, and the link in the previous tail node (3).
  case submitOutside
  /// A worker's job that goes to the injection queue anyway (a yielding serial drain, a job
  /// of a higher lane than the running one, a full local queue): as `submitOutside` (3).
  case submitRequeue
  /// A chain of timer jobs (`submitBatch`): 3 per chain.
  case submitBatch
  /// A worker's job into its own local queue. No site: the push writes only the owner's
  /// lane (its wake-up, if any, is `wake`). Listed so a test can name the zero.
  case submitLocal
  /// The run-next slot's fill and take (a serial queue or actor made runnable by a pool
  /// job). No site: the slot is the owner's line. Listed so a test can name the zero.
  case runNextHandoff
  /// A take from an injection queue: the consumer flag (each try, and its release), the
  /// dummy head (once per job moved) and the taken count.
  case takeInjection
  /// A steal: compare-and-swaps on the victim's head (each try), claim and end.
  case steal
  /// A spin: `searching` incremented and decremented (2).
  case spin
  /// A park: the worker's idle bit set and withdrawn (2; its own park word is not counted).
  case park
  /// A wake: the idle-set claim (each try) and the store to the sleeper's park word.
  case wake
  /// A submitter waking the sleeping supervisor (`noteWorkWaiting`'s exchange).
  case supervisorWake
  /// The supervisor's stores of its own word as it goes to sleep (or changes its mind).
  case supervisorSleep
  /// The supervisor's rescues and `flushBeforeBlocking`'s overflow: a slot exchanged out,
  /// a local queue evacuated, the injection pushes that follow.
  case rescue
  /// The shared free-node stack (`NodeCache`): a chain handed over or taken whole.
  case nodeCache
  /// The spin governor (`SpinGovernor`): a sample's claim, its next instant, its count and
  /// release (4, at most one sample per 10 ms), a sign's `pressuredUntil` and count (2).
  case spinGovernor
  /// A serial-queue drain diverted to an overcommit lane beside neighbours: the count of
  /// diverted drains raised, and lowered when it ends (2; none when the drain's slot passes
  /// to the queue's next drain, or the cap refuses it; 2 for a race lost at the cap).
  case divertedDrain
  /// A worker asleep inside a job counts itself in `WakeDeferral.blockedInJobs` and out again
  /// (2 per sleep; `WorkerPool+DeferredWake.swift`, rule 4); a tick that woke a worker for
  /// waiting jobs suspends the deferrals, and their end resumes them (1 each).
  case wakeDeferral
}

/// Events that the counts are judged against (not writes).
package enum PoolEvent: Int, CaseIterable, Sendable {
  /// A worker found nothing in its slot, its local queues and the injection queues, and
  /// looks further (a steal, then a spin or a park): the turn every run-dry write follows.
  case dryTurn
  /// A worker started a spin (counted in `searching`).
  case spin
  /// A worker announced itself idle.
  case park
  /// A waker claimed a parked worker's bit and woke it.
  case wake
  /// A steal took jobs.
  case steal
  /// A consumer claimed an injection queue (its flag's compare-and-swap succeeded).
  case injectionClaim
  /// A job moved out of an injection queue (counted once per job).
  case injectionJob
  /// The supervisor went to sleep without a timeout.
  case supervisorSleep
  /// A supervisor tick (it rescues and checks growth once per tick).
  case supervisorTick
  /// A worker thread began (before its first park).
  case workerStart
  /// An extra worker left the pool (after its last park's withdrawal).
  case workerRetire
  /// A submitter outside the pool left the parked workers asleep: every CPU was taken
  /// (`WorkerPool+DeferredWake.swift`, rule 1).
  case wakeDeferred
}

/// Adds `count` writes to `path` (debug builds; nothing in a release build).
@inline(__always)
func countSharedWrite(_ path: @autoclosure () -> SharedWritePath, _ count: Int = 1) {
  #if DEBUG
    SharedWriteCount.add(path().rawValue, count)
  #endif
}

/// Adds `count` `event`s (debug builds; nothing in a release build).
@inline(__always)
func countPoolEvent(_ event: PoolEvent, _ count: Int = 1) {
  #if DEBUG
    SharedWriteCount.add(SharedWritePath.allCases.count + event.rawValue, count)
  #endif
}

#if DEBUG
  /// The counts since the process started (debug builds only).
  ///
  /// One relaxed counter per path and event. The counters are themselves process-wide words
  /// written at every counted site: a debug build pays one more shared write per counted
  /// write, which is why there are none in a release build.
  package enum SharedWriteCount {
    private static let slots = SharedWritePath.allCases.count + PoolEvent.allCases.count
    /// Allocated once, never freed; every entry is atomic.
    /// nonisolated(unsafe): the pointer is immutable and every entry it reaches is atomic.
    nonisolated(unsafe) private static let counts: UnsafeMutablePointer<Atomic<UInt64>> = {
      let counts = UnsafeMutablePointer<Atomic<UInt64>>.allocate(capacity: slots)
      for index in 0..<slots { (counts + index).initialize(to: Atomic(0)) }
      return counts
    }()

    @inline(__always)
    static func add(_ index: Int, _ count: Int) {
      counts[index].wrappingAdd(UInt64(count), ordering: .relaxed)
    }

    /// The counts now (each read on its own: a snapshot of a quiet pool is exact).
    package static func snapshot() -> Snapshot {
      Snapshot(values: (0..<slots).map { counts[$0].load(ordering: .relaxed) })
    }

    /// Counts at one instant, or the difference of two.
    package struct Snapshot: Sendable {
      var values: [UInt64]

      package subscript(path: SharedWritePath) -> UInt64 { values[path.rawValue] }
      package subscript(event: PoolEvent) -> UInt64 {
        values[SharedWritePath.allCases.count + event.rawValue]
      }

      /// Every path's writes together.
      package var totalWrites: UInt64 {
        values[0..<SharedWritePath.allCases.count].reduce(0, &+)
      }

      package static func - (later: Snapshot, earlier: Snapshot) -> Snapshot {
        Snapshot(values: zip(later.values, earlier.values).map { $0 &- $1 })
      }
    }
  }
#endif
