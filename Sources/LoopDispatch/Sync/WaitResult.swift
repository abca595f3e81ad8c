import MainLoop

/// The outcome of a timed wait.
public enum WaitResult: Sendable, Equatable {
  /// The awaited condition happened before the deadline.
  case success
  /// The deadline passed first.
  case timedOut
}

extension FutexWord {
  /// Sleeps while the word equals `expected`, at most until `deadline`.
  /// Returns false if the deadline has passed (without sleeping).
  func wait(whileEqualTo expected: UInt32, until deadline: Deadline) -> Bool {
    if deadline == .distantFuture {
      wait(whileEqualTo: expected)
      return true
    }
    let now = Deadline.now
    if now >= deadline { return false }
    wait(
      whileEqualTo: expected, timeoutNanoseconds: deadline.uptimeNanoseconds - now.uptimeNanoseconds
    )
    return true
  }
}
