import CLoopShims
import Glibc

/// Why the system refused a new thread: the error number `pthread_create` returned
/// (`EAGAIN` when it is out of memory for the stack or over a thread limit).
package struct ThreadSpawnError: Error, CustomStringConvertible {
  /// The `errno` value `pthread_create` returned.
  package let code: Int32

  /// `pthread_create: <strerror text>`, for one-line reports.
  package var description: String {
    "pthread_create: \(String(cString: strerror(code)))"
  }
}

/// Starts a detached-style joinable POSIX thread running `body`, with a readable name.
///
/// Used by the runtime for loop threads and pool workers; no Foundation `Thread` is available.
/// A refusal by the system is reported to the caller (``ThreadSpawnError``), never trapped
/// here: only the caller knows whether it can carry on without the thread.
package struct NativeThread: Sendable {
  /// The pthread handle; joinable until `join()` is called.
  package let handle: pthread_t

  /// Starts a thread named `name` (truncated to 15 bytes by Linux) that runs `body`.
  /// Throws the error `pthread_create` returned if the system refuses a new thread; `body`
  /// is then released without running.
  package static func start(
    name: String, _ body: @escaping @Sendable () -> Void
  ) throws(ThreadSpawnError) -> NativeThread {
    final class Start {
      let name: String
      let body: @Sendable () -> Void
      init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
      }
    }
    // Safe: the retained box is consumed exactly once, by the new thread's entry point, or
    // below if the thread was never created.
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
      // Safe: no thread was created, so nobody else will consume the box.
      Unmanaged<Start>.fromOpaque(context).release()
      throw ThreadSpawnError(code: rc)
    }
    return NativeThread(handle: handle)
  }

  /// Like ``start(name:_:)``, for callers that cannot carry on without the thread (tests,
  /// demos): returns `nil` and leaves `errno` set if the system refuses a new thread.
  package static func spawn(name: String, _ body: @escaping @Sendable () -> Void) -> NativeThread? {
    do {
      return try start(name: name, body)
    } catch {
      errno = error.code
      return nil
    }
  }

  /// Starts a thread like ``start(name:_:)`` that nobody will join: its resources go back to
  /// the system when it exits (runtime threads that retire or live forever).
  /// Throws the error `pthread_create` returned if the system refuses a new thread.
  package static func spawnDetached(
    name: String, _ body: @escaping @Sendable () -> Void
  ) throws(ThreadSpawnError) {
    let thread = try start(name: name, body)
    _ = pthread_detach(thread.handle)
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
