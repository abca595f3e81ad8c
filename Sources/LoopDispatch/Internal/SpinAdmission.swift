import MainLoop
import Synchronization

/// Who may spin before sleeping in a one-shot wait (`OneShotWord.wait`: a `sync` waiting for
/// its turn, a `sync` onto the main queue).
///
/// A spin pays when the signaller runs on another core and signals within the spin: the
/// waiter then skips a futex sleep, and the signaller its wake-up system call. It costs when
/// waiting threads outnumber the cores: each spinner holds a core that the signaller, or the
/// thread the signaller waits for, needs. 128 threads queued behind one barrier
/// (`sync_readers` in the C benchmarks, 2 cores) spent 38% of their samples in the spin and
/// took 1.36x libdispatch's time; with no spin, 0.86x.
///
/// So a wait spins only while fewer than `limit` waits spin (one core per spinner, the
/// signaller keeping one: `CPUBudget` less one) and the machine is not loaded
/// (`SpinGovernor`: CPU pressure, the runnable count, quota throttling). A quiet machine
/// with one waiter spins as before.
///
/// `spinners` is one process-wide word: a wait that spins writes it twice (in and out), one
/// turned away by a race once more (its increment undone), one turned away by the count or
/// the governor not at all. A wait that gets this far is a slow path: it writes the queue's
/// lock and its own word, and may make two system calls.
final class SpinAdmission: Sendable {
  /// Waits in their spin now. Relaxed: a limit on how many spin, ordering nothing (the futex
  /// word's protocol orders the wait itself).
  private let spinners = Atomic<Int>(0)
  /// The most spins at once.
  let limit: Int
  /// Whether the machine is loaded now (then no spin).
  private let isPressured: @Sendable () -> Bool

  init(limit: Int, isPressured: @escaping @Sendable () -> Bool) {
    self.limit = limit
    self.isPressured = isPressured
  }

  /// The one-shot waits' admission: a core per spinner but the signaller's, and the
  /// process's governor (which does not start the pool).
  static let waits = SpinAdmission(limit: Swift.max(0, CPUBudget.current.cpus - 1)) {
    SpinGovernor.process.isPressured(now: Deadline.now.uptimeNanoseconds)
  }

  /// Whether the caller may spin; if true, it calls `leave` when its spin ends.
  @inline(__always)
  func enter() -> Bool {
    if spinners.load(ordering: .relaxed) >= limit || isPressured() { return false }
    if spinners.wrappingAdd(1, ordering: .relaxed).newValue <= limit { return true }
    spinners.wrappingSubtract(1, ordering: .relaxed)
    return false
  }

  /// Ends a spin that `enter` admitted.
  @inline(__always)
  func leave() { spinners.wrappingSubtract(1, ordering: .relaxed) }

  /// Waits spinning now (tests).
  var spinning: Int { spinners.load(ordering: .relaxed) }
}
