import MainLoop
import Synchronization

/// A counting semaphore, GCD-style: `wait()` takes one unit (sleeping while none is left),
/// `signal()` returns one and wakes a waiter.
///
/// Walk-through:
/// 1. `value` counts units; negative values count sleeping waiters. `wait` decrements it
///    (acquiring); a non-negative old value means a unit was available: no system call.
/// 2. `signal` increments it (releasing); a negative old value means someone waits, so it
///    adds a wake token to `tokens` and wakes one sleeper (the only system call).
/// 3. A waiter spins briefly, then sleeps on `tokens`, until it can take one with a CAS.
/// 4. A waiter that times out tries to give back its decrement with a CAS on a still
///    negative `value`; if a signal already counted it (value no longer negative enough), a
///    token is on its way and it takes that instead, reporting success.
///
/// Releasing a semaphore whose value is below its initial value (units still taken) is a
/// client bug, as in GCD: a resource was never returned.
public final class Semaphore: @unchecked Sendable {
  // @unchecked Sendable: all state is atomic.
  private let value: Atomic<Int>
  private let tokens = FutexWord(0)
  private let initialValue: Int
  /// Iterations of the bounded spin before sleeping (a few microseconds).
  private static let spinIterations = 2_000

  /// Creates a semaphore with `value` units. A negative value is a client bug.
  public init(value: Int) {
    if value < 0 { clientBug("Semaphore created with a negative value (\(value))") }
    self.value = Atomic(value)
    self.initialValue = value
  }

  deinit {
    let current = value.load(ordering: .acquiring)
    if current < initialValue {
      clientBug(
        "Semaphore released while in use: value \(current) is below its initial value \(initialValue)"
      )
    }
  }

  /// Returns one unit, waking a waiter if there is one.
  /// - Returns: `true` if a waiting thread was woken.
  @discardableResult
  public func signal() -> Bool {
    // Releasing; pairs with the acquiring decrement in `wait`.
    if value.wrappingAdd(1, ordering: .acquiringAndReleasing).oldValue >= 0 { return false }
    tokens.atomic.pointee.wrappingAdd(1, ordering: .releasing)
    tokens.wake(1)
    return true
  }

  /// Takes one unit, sleeping until one is available or `deadline` passes.
  @discardableResult
  public func wait(timeout deadline: Deadline = .distantFuture) -> WaitResult {
    // Acquiring; pairs with the releasing increment in `signal`.
    if value.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue > 0 { return .success }
    return waitSlow(deadline)
  }

  /// Takes one unit, waiting at most `timeout`.
  @discardableResult
  public func wait(timeout: Duration) -> WaitResult {
    wait(timeout: .now + timeout)
  }

  @inline(never)
  private func waitSlow(_ deadline: Deadline) -> WaitResult {
    // A signal often follows within microseconds (a ping-pong, a short critical section):
    // spin briefly on the token count before paying for a sleep and a wake-up.
    for _ in 0..<Self.spinIterations {
      if takeToken() { return .success }
      spinLoopHint()
    }
    while true {
      if takeToken() { return .success }
      let seen = tokens.atomic.pointee.load(ordering: .acquiring)
      if seen != 0 { continue }
      if !tokens.wait(whileEqualTo: 0, until: deadline) {
        return giveUp()
      }
    }
  }

  private func takeToken() -> Bool {
    var current = tokens.atomic.pointee.load(ordering: .acquiring)
    while current > 0 {
      let (taken, actual) = tokens.atomic.pointee.compareExchange(
        expected: current, desired: current - 1, ordering: .acquiringAndReleasing)
      if taken { return true }
      current = actual
    }
    return false
  }

  /// Deadline passed: undo our decrement, unless a signal already counted us.
  private func giveUp() -> WaitResult {
    var current = value.load(ordering: .acquiring)
    while current < 0 {
      let (undone, actual) = value.compareExchange(
        expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
      if undone { return .timedOut }
      current = actual
    }
    // A signal counted us and is handing over a token: take it.
    while !takeToken() { tokens.wait(whileEqualTo: 0) }
    return .success
  }
}
