import Glibc
import MainLoop

/// Drains libdispatch's main queue (`DispatchQueue.main`) on LoopDispatch's main loop, so that
/// libraries that post to it, and Swift's default main executor on Linux (which is that queue:
/// `@MainActor` work without ``ConcurrencyIntegration/install()``), run under
/// ``Queue/runMain()``.
///
/// How: libdispatch exports what CoreFoundation's run loop uses on Linux to drain the main
/// queue: `_dispatch_get_main_queue_handle_4CF()`, an eventfd that libdispatch writes when
/// work is queued, and `_dispatch_main_queue_callback_4CF(_:)`, which drains the queue on the
/// main thread. They are looked up with `dlsym` (Sources/ never imports Dispatch); where
/// libdispatch is not loaded (a C program on our C API alone), nothing happens.
///
/// The main loop watches the eventfd. Each report reads it (resetting the count: a post made
/// during the drain writes it again, so the next turn drains again) and then drains, so no
/// post is lost between the two. libdispatch drains what was queued when the drain began;
/// LoopDispatch's main queue drains in its own phase of the turn, bounded as always. Each
/// queue is FIFO; neither starves the other (each turn serves both).
///
/// Thread-safety: `attach` runs on the main thread (from `runMain`), before the loop runs;
/// the watch's handler runs on the main thread (the main loop's).
enum DispatchMainQueueBridge {
  private typealias HandleFunction = @convention(c) () -> Int32
  private typealias DrainFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void

  /// The watch, kept for the process's life once made; nil before `attach` or where
  /// libdispatch is absent. Main thread only.
  nonisolated(unsafe) private static var watch: FDWatch?
  nonisolated(unsafe) private static var attached = false

  /// Makes the main loop drain libdispatch's main queue, once. Main thread.
  static func attach() {
    guard !attached else { return }
    attached = true
    // RTLD_DEFAULT (a null handle): every loaded object, libdispatch.so among them.
    guard let handleSymbol = dlsym(nil, "_dispatch_get_main_queue_handle_4CF"),
      let drainSymbol = dlsym(nil, "_dispatch_main_queue_callback_4CF")
    else { return }
    // Safe: the symbols are libdispatch's, with these C signatures (dispatch/private.h:
    // `dispatch_runloop_handle_t` is an `int` on Linux).
    let handle = unsafeBitCast(handleSymbol, to: HandleFunction.self)
    let drain = unsafeBitCast(drainSymbol, to: DrainFunction.self)
    let fd = handle()
    guard fd >= 0 else { return }
    do {
      watch = try EventLoop.main.watch(fd: fd, for: .read) {
        var count: UInt64 = 0
        _ = read(fd, &count, MemoryLayout<UInt64>.size)  // Non-blocking (EFD_NONBLOCK).
        drain(nil)
      }
    } catch {
      writeStandardError(
        "LoopDispatch: cannot watch Dispatch's main queue (\(error)); DispatchQueue.main will not run\n"
      )
      return
    }
    // Work queued before the eventfd existed wrote nothing to it: drain once in the first
    // turn.
    EventLoop.main.execute { drain(nil) }
  }
}
