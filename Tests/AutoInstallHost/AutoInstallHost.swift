import EntryShapeChecks
import LoopDispatchAutoInstall

// An async `@main` that calls nothing first: `LoopDispatchAutoInstall` installed LoopDispatch
// at load time. Without it, Swift's own executors would run this (Dispatch's main queue, on a
// thread that is not the main loop's, and libdispatch's workers), and the checks fail.
@main struct AutoInstallHost {
  static func main() async {
    guard autoInstallLinked else { fatalError("the load-time constructor is not linked") }
    await checkEntryShape("auto-install")
  }
}
