import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

extension Queue {
  /// Runs the main event loop on the process main thread, forever: the `dispatch_main`
  /// analogue. Main-queue work, main-queue timers and sources targeting the main queue all
  /// run here, and so does work on Dispatch's own main queue (`DispatchQueue.main`, and
  /// `@MainActor` work when ``ConcurrencyIntegration/install()`` was not called), when
  /// libdispatch is loaded (`DispatchMainQueueBridge`). If the loop is stopped (`EventLoop.main.stop()`), the process exits with 0.
  ///
  /// Calling it off the main thread is a client bug and traps.
  public static func runMain() -> Never {
    DispatchMainQueueBridge.attach()
    EventLoop.main.run()
    exit(0)
  }

  /// ``runMain()``, keeping `objects` (sources, servers, whatever the program's work hangs
  /// on) alive for the rest of the process.
  ///
  /// Use this rather than `withExtendedLifetime(object) { Queue.runMain() }`: ``runMain()``
  /// never returns, so the end of that closure is unreachable and an optimised build may
  /// release the object before the loop starts (the example server's listening socket was
  /// closed that way, in a release build, right after it said it was listening).
  public static func runMain(keepingAlive objects: AnyObject...) -> Never {
    keptAlive.withLock { $0 += objects }
    runMain()
  }

  /// What ``runMain(keepingAlive:)`` keeps for the process's life.
  private static let keptAlive = LockedValue<[AnyObject]>([])

  /// Runs the main loop until `deadline` passes (or it is stopped). For tests and tools.
  /// - Returns: `true` if the deadline passed.
  @discardableResult
  public static func runMain(until deadline: Deadline) -> Bool {
    DispatchMainQueueBridge.attach()
    return EventLoop.main.run(until: deadline)
  }

  /// Runs the main loop until `condition` holds (checked after each loop turn), it is
  /// stopped, or `deadline` passes. For tests and tools.
  /// - Returns: `true` if `condition` held.
  @discardableResult
  public static func runMain(
    until condition: () -> Bool, deadline: Deadline = .distantFuture
  ) -> Bool {
    DispatchMainQueueBridge.attach()
    return EventLoop.main.run(until: condition, deadline: deadline)
  }
}
