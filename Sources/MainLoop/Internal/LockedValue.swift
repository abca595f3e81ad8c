import Glibc

/// A value protected by a `pthread_mutex_t`, stored inline in one allocation.
///
/// Used instead of `Synchronization.Mutex` because ThreadSanitizer intercepts pthread
/// mutexes: the standard library's `Mutex` is built from uninstrumented atomics and futex
/// calls, so TSan reports false races on everything it protects.
package final class LockedValue<Value>: @unchecked Sendable {
  // @unchecked Sendable: `value` is only touched inside `withLock`, under the mutex.
  private final class Storage: ManagedBuffer<Value, pthread_mutex_t> {}

  private let storage: ManagedBuffer<Value, pthread_mutex_t>

  /// - Parameter adaptive: spin briefly before sleeping when contended
  ///   (`PTHREAD_MUTEX_ADAPTIVE_NP`); for short critical sections taken by many threads.
  package init(_ value: Value, adaptive: Bool = false) {
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

  /// Runs `body` with exclusive access to the value.
  @inline(__always)
  package func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
    try storage.withUnsafeMutablePointers { (value, mutex) throws(E) -> T in
      pthread_mutex_lock(mutex)
      defer { pthread_mutex_unlock(mutex) }
      return try body(&value.pointee)
    }
  }
}
