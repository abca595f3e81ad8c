import Synchronization

/// A function every event loop calls on its own thread before a poll that may block: LoopDispatch
/// installs one that makes the pool wake-up the loop thread deferred while it kept a CPU busy
/// (`LoopDispatch/Pool/WorkerPool+DeferredWake.swift`, rule 2). Installed once; nothing is
/// called before.
///
/// SPI (`@_spi(LoopDispatchRuntime) import MainLoop`): not part of MainLoop's API.
@_spi(LoopDispatchRuntime)
public enum BlockingHook {
  /// Atomic. The installed function's address, 0 before. Acquiring load, releasing store:
  /// the function is code, nothing else is published with it.
  private static let function = Atomic<UInt>(0)

  /// Installs `hook` (a later call replaces it). Any thread.
  public static func install(_ hook: @convention(c) () -> Void) {
    function.store(unsafeBitCast(hook, to: UInt.self), ordering: .releasing)
  }

  /// Calls the hook, if one is installed. A loop thread, before it may block.
  @inline(__always)
  static func run() {
    let bits = function.load(ordering: .acquiring)
    guard bits != 0 else { return }
    unsafeBitCast(bits, to: (@convention(c) () -> Void).self)()
  }
}
