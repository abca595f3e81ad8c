import Glibc
import Synchronization

/// A one-shot gate built on a pthread mutex and condition variable: one thread waits, another
/// opens it once. Used by both sides of a comparison so that neither pays for the other's
/// primitive (no `DispatchSemaphore` on our side, no LoopDispatch `Semaphore` on Dispatch's).
final class Latch: @unchecked Sendable {
  // @unchecked Sendable: `isOpen` is protected by `mutex`; the pointers never change.

  // Unsafe pointers: pthread objects must not move, so they live in their own allocations.
  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  /// Protected by: mutex.
  private var isOpen = false

  init() {
    pthread_mutex_init(mutex, nil)
    pthread_cond_init(condition, nil)
  }

  deinit {
    pthread_cond_destroy(condition)
    pthread_mutex_destroy(mutex)
    condition.deallocate()
    mutex.deallocate()
  }

  /// Opens the gate, waking the waiter. Everything written before is visible to it.
  func open() {
    pthread_mutex_lock(mutex)
    isOpen = true
    pthread_cond_signal(condition)
    pthread_mutex_unlock(mutex)
  }

  /// Blocks until the gate is open.
  func wait() {
    pthread_mutex_lock(mutex)
    while !isOpen { pthread_cond_wait(condition, mutex) }
    pthread_mutex_unlock(mutex)
  }
}

/// Counts finished work items down with an atomic; the one that brings the count to zero
/// reads the clocks (wall and process CPU, ``ClockReading``) and opens ``done``.
///
/// Submitted closures reach the run in progress through ``active`` and capture nothing, so a
/// submission costs only what the runtime does (a capture would make every closure retain
/// and release one shared object). Both sides of a comparison use the same counter.
final class Countdown: @unchecked Sendable {
  // @unchecked Sendable: `remaining` is atomic; `finished` is written by the last item
  // before it opens `done` and read by the waiter after `done.wait()`, which orders the two.

  /// The run in progress. Set before the first submission (which orders the write before the
  /// items' reads) and cleared after `done` opened.
  nonisolated(unsafe) static var active: Countdown?

  /// The body of every counted item.
  static func tickActive() { active.unsafelyUnwrapped.tick() }

  // Atomic.
  private let remaining: Atomic<Int>
  let done = Latch()
  var finished = ClockReading(wall: 0, cpu: 0)

  init(total: Int) { remaining = Atomic(total) }

  @inline(__always)
  func tick() {
    // Acquiring and releasing: the last decrement sees every earlier item's effects.
    if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
      finished = ClockReading.end()
      done.open()
    }
  }

  /// Installs a countdown of `total` items as ``active``, runs `submit` (which returns the
  /// ``ClockReading/start()`` it took before its first submission), waits for the last item,
  /// uninstalls it and returns ns per item, wall clock and process CPU, from that reading
  /// until the last item ran.
  static func measure(total: Int, _ submit: () -> ClockReading) -> Measurement {
    let countdown = Countdown(total: total)
    active = countdown
    defer { active = nil }
    let start = submit()
    countdown.done.wait()
    return Measurement(from: start, to: countdown.finished, operations: total)
  }
}
