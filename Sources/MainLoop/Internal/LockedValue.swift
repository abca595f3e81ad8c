import Glibc

/// A value protected by a `pthread_mutex_t`, stored inline in one allocation.
///
/// Used instead of `Synchronization.Mutex` because ThreadSanitizer intercepts pthread
/// mutexes: the standard library's `Mutex` is built from uninstrumented atomics and futex
/// calls, so TSan reports false races on everything it protects.
///
/// SPI (`@_spi(LoopDispatchRuntime) import MainLoop`), public only so that `withLock` is
/// inlined into the other modules; the type is not part of MainLoop's API. With this
/// toolchain (Swift 6.3.1, SwiftPM release builds) an `@inlinable package` generic method is
/// still called, unspecialised, with the body as a closure context: checked with objdump on
/// LoopDispatch's `concurrentEnqueue`, and on a two-module scratch package where the same
/// method inlines once it is public. That was each of LoopDispatch's ~150 lock sites.
@_spi(LoopDispatchRuntime)
public final class LockedValue<Value>: @unchecked Sendable {
  // @unchecked Sendable: `value` is only touched inside `withLock`, under the mutex.
  private final class Storage: ManagedBuffer<Value, pthread_mutex_t> {}

  /// Touched only by this class and by the inlined bodies of `withLock` and `load()`.
  @usableFromInline let storage: ManagedBuffer<Value, pthread_mutex_t>

  /// - Parameter adaptive: spin briefly before sleeping when contended
  ///   (`PTHREAD_MUTEX_ADAPTIVE_NP`); for short critical sections taken by many threads.
  public init(_ value: Value, adaptive: Bool = false) {
    storage = Storage.create(minimumCapacity: 1) { _ in value }
    storage.withUnsafeMutablePointerToElements { mutex in
      // Safe: the element storage is allocated (capacity >= 1) and lives as long as `storage`.
      mutex.initialize(to: pthread_mutex_t())
      var attributes = pthread_mutexattr_t()
      pthread_mutexattr_init(&attributes)
      if adaptive { pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP)) }
      if pthread_mutex_init(mutex, &attributes) != 0 { internalBug("pthread_mutex_init failed") }
      pthread_mutexattr_destroy(&attributes)
    }
  }

  deinit {
    storage.withUnsafeMutablePointerToElements { mutex in
      _ = pthread_mutex_destroy(mutex)
      mutex.deinitialize(count: 1)
    }
  }

  /// A copy of the value, read under the lock.
  ///
  /// The way to read a value that is a function (or an optional function): through
  /// `withLock { $0 }` the caller's closure takes the value `inout` at its own, concrete
  /// type, while the storage holds it at the generic type's abstraction, so each call wraps
  /// the stored function in one more reabstraction thunk on the way in and another on the
  /// way out, and writes the wrapped value back. In a debug build the stored value grows by
  /// two thunks per read: each later call walks the whole chain, and releasing it recurses
  /// once per thunk (a test hook read at every drain overflowed a worker's stack under
  /// AddressSanitizer). Here the copy is made where the value's type is still generic, and
  /// nothing is written back. `LockedValueTests` holds this.
  @inlinable @inline(__always)
  public func load() -> Value {
    withLock { $0 }
  }

  /// Runs `body` with exclusive access to the value. For a function-typed value, read with
  /// `load()` instead (see there).
  @inlinable @inline(__always)
  public func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
    try storage.withUnsafeMutablePointers { (value, mutex) throws(E) -> T in
      pthread_mutex_lock(mutex)
      defer { pthread_mutex_unlock(mutex) }
      return try body(&value.pointee)
    }
  }
}
