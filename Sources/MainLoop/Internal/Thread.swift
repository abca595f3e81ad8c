import CLoopShims
import Glibc

/// Starts a detached-style joinable POSIX thread running `body`, with a readable name.
///
/// Used by the runtime for loop threads and pool workers; no Foundation `Thread` is available.
package struct NativeThread: Sendable {
  /// The pthread handle; joinable until `join()` is called.
  package let handle: pthread_t

  /// Spawns a thread named `name` (truncated to 15 bytes by Linux) that runs `body`.
  /// Returns `nil` and leaves `errno` set if the system refuses a new thread.
  package static func spawn(name: String, _ body: @escaping @Sendable () -> Void) -> NativeThread? {
    final class Start {
      let name: String
      let body: @Sendable () -> Void
      init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
      }
    }
    // Safe: the retained box is consumed exactly once, by the new thread's entry point.
    let context = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
    var handle = pthread_t()
    let rc = pthread_create(
      &handle, nil,
      { raw in
        let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
        _ = start.name.withCString { cls_set_thread_name($0) }
        start.body()
        return nil
      }, context)
    if rc != 0 {
      Unmanaged<Start>.fromOpaque(context).release()
      errno = rc
      return nil
    }
    return NativeThread(handle: handle)
  }

  /// Starts a thread like ``spawn(name:_:)`` that nobody will join: its resources go back to
  /// the system when it exits (runtime threads that retire or live forever).
  /// Returns false and leaves `errno` set if the system refuses a new thread.
  @discardableResult
  package static func spawnDetached(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    guard let thread = spawn(name: name, body) else { return false }
    _ = pthread_detach(thread.handle)
    return true
  }

  /// Waits for the thread to finish. Call at most once.
  package func join() {
    _ = pthread_join(handle, nil)
  }

  /// The calling thread's name.
  package static var currentName: String {
    var buffer = [CChar](repeating: 0, count: 32)
    _ = cls_get_thread_name(&buffer)
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}
