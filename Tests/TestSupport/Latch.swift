import Glibc
import Synchronization

/// A one-shot latch for tests: `wait` blocks until `open` is called or the timeout passes.
/// Built on a pthread mutex and condition variable so the tests need no Dispatch.
public final class Latch: @unchecked Sendable {
  // @unchecked Sendable: `isOpen` is protected by `mutex`.
  private var mutex = pthread_mutex_t()
  private var condition = pthread_cond_t()
  private var isOpen = false

  public init() {
    pthread_mutex_init(&mutex, nil)
    var attributes = pthread_condattr_t()
    pthread_condattr_init(&attributes)
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
    pthread_cond_init(&condition, &attributes)
    pthread_condattr_destroy(&attributes)
  }

  deinit {
    pthread_cond_destroy(&condition)
    pthread_mutex_destroy(&mutex)
  }

  public func open() {
    pthread_mutex_lock(&mutex)
    isOpen = true
    pthread_cond_broadcast(&condition)
    pthread_mutex_unlock(&mutex)
  }

  /// Returns whether the latch opened within `seconds`.
  public func wait(seconds: Int = 30) -> Bool {
    var deadline = timespec()
    clock_gettime(CLOCK_MONOTONIC, &deadline)
    deadline.tv_sec += seconds
    pthread_mutex_lock(&mutex)
    defer { pthread_mutex_unlock(&mutex) }
    while !isOpen {
      if pthread_cond_timedwait(&condition, &mutex, &deadline) == ETIMEDOUT { return isOpen }
    }
    return true
  }
}

/// A counter touched from several threads.
public final class Counter: Sendable {
  private let value = Atomic<Int>(0)
  public init() {}
  @discardableResult
  public func increment() -> Int {
    value.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
  }
  public func add(_ amount: Int) { value.wrappingAdd(amount, ordering: .sequentiallyConsistent) }
  public var current: Int { value.load(ordering: .sequentiallyConsistent) }
}

/// A mutable value shared by a test and the work it starts. The test guarantees, by its
/// construction, that accesses never overlap (they are confined to one thread or ordered by
/// a latch, a loop stop or a queue).
public final class Shared<Value>: @unchecked Sendable {
  // @unchecked Sendable: see the type's comment; each test that uses it states its ordering.
  public var value: Value
  public init(_ value: Value) { self.value = value }
}

/// A value behind a pthread mutex (which ThreadSanitizer understands), for tests that record
/// from many threads.
public final class Locked<Value: Sendable>: @unchecked Sendable {
  // @unchecked Sendable: `storage` is only touched with `mutex` held.
  private var mutex = pthread_mutex_t()
  private var storage: Value
  public init(_ value: Value) {
    storage = value
    pthread_mutex_init(&mutex, nil)
  }
  deinit { pthread_mutex_destroy(&mutex) }
  public func withLock<T: Sendable>(_ body: @Sendable (inout Value) -> T) -> T {
    pthread_mutex_lock(&mutex)
    defer { pthread_mutex_unlock(&mutex) }
    return body(&storage)
  }
  public var value: Value { withLock { $0 } }
}

/// Scales a stress size by `LOOPDISPATCH_TEST_SCALE` (default 1). Sanitizer runs in `make
/// test` use a smaller scale; the full sizes run in the plain test pass.
public func scaled(_ size: Int) -> Int {
  guard let raw = getenv("LOOPDISPATCH_TEST_SCALE"), let scale = Double(String(cString: raw)),
    scale > 0
  else { return size }
  return Swift.max(1, Int(Double(size) * scale))
}
