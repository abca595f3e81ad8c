import Glibc

/// A one-shot latch for tests: `wait` blocks until `open` is called or the timeout passes.
/// Built on a pthread mutex and condition variable so the tests need no Dispatch.
final class Latch: @unchecked Sendable {
  // @unchecked Sendable: `isOpen` is protected by `mutex`.
  private var mutex = pthread_mutex_t()
  private var condition = pthread_cond_t()
  private var isOpen = false

  init() {
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

  func open() {
    pthread_mutex_lock(&mutex)
    isOpen = true
    pthread_cond_broadcast(&condition)
    pthread_mutex_unlock(&mutex)
  }

  /// Returns whether the latch opened within `seconds`.
  func wait(seconds: Int = 30) -> Bool {
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
