import Glibc
import Synchronization

/// A joinable POSIX thread running a closure: a loop thread for cross-thread benchmarks.
///
/// MainLoop's own thread helper is package-internal, and Foundation is avoided so the
/// benchmark binary's threads are exactly the ones we start (plus the rival's pool).
struct BenchThread {
  let handle: pthread_t

  /// Starts a thread that runs `body`; traps if the system refuses.
  static func spawn(_ body: @escaping @Sendable () -> Void) -> BenchThread {
    final class Start {
      let body: @Sendable () -> Void
      init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    // Safe: the retained box is consumed exactly once, by the new thread's entry point.
    let context = Unmanaged.passRetained(Start(body)).toOpaque()
    var handle = pthread_t()
    let rc = pthread_create(
      &handle, nil,
      { raw in
        Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue().body()
        return nil
      }, context)
    if rc != 0 {
      Unmanaged<Start>.fromOpaque(context).release()
      benchmarkFailure("pthread_create failed: \(rc)")
    }
    return BenchThread(handle: handle)
  }

  /// Waits for the thread to finish; everything it wrote is visible afterwards.
  func join() {
    _ = pthread_join(handle, nil)
  }
}

/// A one-way flag one thread raises and another spins on (with `sched_yield`): used only
/// outside timed regions, e.g. to wait until a loop thread is running.
final class Flag: Sendable {
  // Atomic.
  private let raised = Atomic<Bool>(false)

  init() {}

  func raise() {
    // Releasing; pairs with the acquiring load in `wait()`.
    raised.store(true, ordering: .releasing)
  }

  func wait() {
    while !raised.load(ordering: .acquiring) { sched_yield() }
  }
}
