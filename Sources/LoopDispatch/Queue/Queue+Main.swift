import Glibc
import MainLoop

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
