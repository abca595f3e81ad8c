import LoopDispatch

/// `PoolProbe` has one hook for the whole process, and Swift Testing runs suites side by
/// side: a suite that set it while another's was set would replace that hook mid-test (one
/// test's counts stop, the other's never start). The suites that set it take turns here.
func withPoolProbeHookTurn<T>(_ body: () throws -> T) rethrows -> T {
  _ = poolProbeHookTurn.wait()
  defer { _ = poolProbeHookTurn.signal() }
  return try body()
}

/// One holder at a time.
private let poolProbeHookTurn = Semaphore(value: 1)
