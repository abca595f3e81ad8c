import Glibc
import LoopDispatch
import Synchronization

/// For exit tests that need the pool's only worker busy while they queue work behind it: the
/// child runs with one worker (`LOOPDISPATCH_CPUS=1`, `LOOPDISPATCH_MAX_THREADS=1`), and a
/// global-queue job spins on it (a spin, not a block, so the supervisor adds no thread)
/// until `release`. The work queued meanwhile then runs back to back on that worker.
final class OnlyWorkerHold: Sendable {
  private let holding = Atomic<Bool>(false)
  private let released = Atomic<Bool>(false)

  private init() {}

  /// Limits the pool to one worker (call it in the child before anything starts the pool),
  /// and returns once the holding job runs on that worker.
  static func start() -> OnlyWorkerHold {
    setenv("LOOPDISPATCH_CPUS", "1", 1)
    setenv("LOOPDISPATCH_MAX_THREADS", "1", 1)
    let hold = OnlyWorkerHold()
    Queue.global().async {
      hold.holding.store(true, ordering: .releasing)
      while !hold.released.load(ordering: .acquiring) { sched_yield() }
    }
    while !hold.holding.load(ordering: .acquiring) { sched_yield() }
    return hold
  }

  /// Lets the holding job end.
  func release() { released.store(true, ordering: .releasing) }
}
