import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// The steps of the pool's wake-up protocol where a debug build can stop or perturb a thread
/// (`WorkerPool+Parking.swift` names the protocol; the model in
/// Tests/PoolModelTests/PoolProtocolModel.swift has one step per atomic operation of it).
package enum PoolStep: Int, Sendable {
  /// A submitter is about to publish a job (`WorkerPool.enqueue`, `submitBatch`).
  case submit
  /// An injection push has counted its job and not yet linked it: workers see the job and
  /// cannot take it (`InjectionQueue.push`).
  case link
  /// A job is published; `notifyWork` is about to look for a searcher or a parked worker.
  case notify
  /// A spinning worker (counted in `searching`) is about to look at the queues once more.
  case spin
  /// A worker has announced itself idle and is about to re-check the queues.
  case park
  /// A waker has seen a set idle bit and is about to claim it.
  case claim
  /// A worker is about to steal from another's local queue.
  case steal
  /// A worker is about to take from its run-next slot, local queue or an injection queue.
  case take
}

/// Marks `step` of the protocol on the calling thread. Nothing at all in a release build; in
/// a debug build, the chaos mode's perturbation and a test's hook (`PoolProbe`).
@inline(__always)
func poolProbe(_ step: PoolStep) {
  #if DEBUG || LOOPDISPATCH_CHAOS
    PoolProbe.reach(step)
  #endif
}

#if DEBUG || LOOPDISPATCH_CHAOS
  /// Debug builds only: chaos mode and a test hook at each protocol step.
  ///
  /// Chaos mode (`LOOPDISPATCH_POOL_CHAOS=1` in the environment when the pool starts, or
  /// `enableChaos()`): at each step the thread yields its core about one time in four and
  /// sleeps 1–64 µs about one time in 32, so the real code meets interleavings that a quiet
  /// machine almost never produces (a submitter preempted between its push and its notify, a
  /// parker between its announcement and its re-check, a waker between its load and its
  /// claim). The sleeps perturb; nothing waits on them.
  package enum PoolProbe {
    /// Whether chaos mode is on. Atomic (relaxed: a switch, read at each step).
    private static let chaos = Atomic<Bool>(environmentSaysChaos())
    /// The steps `hook` is set for, one bit each (checked first, so another step takes no
    /// lock and a test's hook does not slow the threads it watches).
    private static let armed = Atomic<UInt32>(0)
    /// Protected by: its lock. Called at every step while armed, on the stepping thread.
    private static let hook = LockedValue<(@Sendable (PoolStep) -> Void)?>(nil)
    /// Perturbations made (yields and sleeps), for a test to see chaos mode at work.
    package static let perturbations = Atomic<UInt64>(0)
    /// The generator's counter (golden-ratio steps).
    private static let counter = Atomic<UInt64>(0)

    /// Turns chaos mode on for the rest of the process.
    package static func enableChaos() { chaos.store(true, ordering: .relaxed) }

    /// Installs (or, with nil, removes) the hook that `steps` call while it is set.
    package static func setHook(
      for steps: [PoolStep] = [], _ newHook: (@Sendable (PoolStep) -> Void)?
    ) {
      hook.withLock { $0 = newHook }
      let mask = steps.reduce(UInt32(0)) { $0 | 1 << UInt32($1.rawValue) }
      armed.store(newHook == nil ? 0 : mask, ordering: .sequentiallyConsistent)
    }

    @inline(__always)
    static func reach(_ step: PoolStep) {
      if chaos.load(ordering: .relaxed) { perturb() }
      guard armed.load(ordering: .relaxed) & 1 << UInt32(step.rawValue) != 0,
        let hook = hook.load()
      else { return }
      hook(step)
    }

    /// One draw: yield, sleep or carry on. The draw is splitmix64 of a shared counter (one
    /// shared write per step: chaos mode is there to disturb, and needs no thread slot).
    private static func perturb() {
      var state = counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
      state = (state ^ (state >> 30)) &* 0xBF58_476D_1CE4_E5B9
      state = (state ^ (state >> 27)) &* 0x94D0_49BB_1331_11EB
      state ^= state >> 31
      switch state % 32 {
      case 0:
        perturbations.wrappingAdd(1, ordering: .relaxed)
        var pause = timespec(tv_sec: 0, tv_nsec: Int((state >> 8) % 64 + 1) * 1_000)
        _ = nanosleep(&pause, nil)
      case 1..<9:
        perturbations.wrappingAdd(1, ordering: .relaxed)
        sched_yield()
      default:
        break
      }
    }

    private static func environmentSaysChaos() -> Bool {
      guard let raw = getenv("LOOPDISPATCH_POOL_CHAOS") else { return false }
      return String(cString: raw) == "1"
    }
  }
#endif
