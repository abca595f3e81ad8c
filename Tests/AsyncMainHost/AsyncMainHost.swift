import EntryShapeChecks
import Glibc
import LoopDispatch
import MainLoop

// An `async` `@main` that installs LoopDispatch first thing, as the docs say: the main task's
// continuation after its first `await` goes to the main executor that existed before the
// install (Dispatch's main queue); the main loop drains that queue, so it resumes. Prints
// "ok async-main" and exits 0, or "FAIL async-main: <why>" and exits 1.
@main struct AsyncMainHost {
  static func main() async {
    ConcurrencyIntegration.install()
    await checkEntryShape("async-main")
  }
}
