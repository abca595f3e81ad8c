import Glibc
import TestSupport

/// Stress sizes: `full` when LOOPDISPATCH_STRESS=full, otherwise a fiftieth (what
/// `make test` runs), and scaled further by LOOPDISPATCH_TEST_SCALE under the sanitizers.
func stressSize(_ full: Int) -> Int {
  let isFull = getenv("LOOPDISPATCH_STRESS").map { String(cString: $0) == "full" } ?? false
  return scaled(isFull ? full : Swift.max(1, full / 50))
}
