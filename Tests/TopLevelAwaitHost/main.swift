import EntryShapeChecks
import Glibc
import LoopDispatch

// Top-level code with `await`, LoopDispatch installed first. Prints "ok top-level-await" and
// exits 0, or "FAIL top-level-await: <why>" and exits 1.
ConcurrencyIntegration.install()
await checkEntryShape("top-level-await")
