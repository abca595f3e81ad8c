import CLoopShims
import Glibc

/// The one place where system calls are retried on `EINTR` and where errors that can only
/// be bugs (`EBADF` on a descriptor we own, `EFAULT`, `EINVAL`) become traps.
package enum Syscall {
  /// Runs `body` until it does not fail with `EINTR`; returns its result (-1 keeps `errno`).
  @inline(__always)
  static func retrying<T: FixedWidthInteger>(_ body: () -> T) -> T {
    while true {
      let result = body()
      if result == -1 && errno == EINTR { continue }
      return result
    }
  }

  /// Reads the 8-byte counter of an eventfd or timerfd we own, discarding it.
  /// `EAGAIN` (nothing to read) is normal; anything else is a bug.
  static func drainCounter(_ fd: Int32) {
    var value: UInt64 = 0
    let n = retrying { read(fd, &value, 8) }
    if n == -1 && errno != EAGAIN {
      internalBug("read of internal counter fd \(fd) failed: errno \(errno)")
    }
  }

  /// Adds one to an eventfd we own. `EAGAIN` means the counter is saturated, which still
  /// leaves it readable, so the wake-up is delivered anyway.
  static func signalEventfd(_ fd: Int32) {
    var one: UInt64 = 1
    let n = retrying { write(fd, &one, 8) }
    if n == -1 && errno != EAGAIN {
      internalBug("write to eventfd \(fd) failed: errno \(errno)")
    }
  }

  /// Closes a descriptor we own. `EINTR` from close must not be retried on Linux.
  static func closeOwned(_ fd: Int32) {
    if close(fd) == -1 && errno == EBADF {
      internalBug("close of owned fd \(fd) reported EBADF")
    }
  }

  /// The calling thread's kernel id.
  package static var currentThreadID: Int32 { cls_gettid() }
}
