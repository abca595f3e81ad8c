import Glibc

/// Why an ``EventLoop`` refused a registration.
public enum EventLoopError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The file descriptor is negative.
  case negativeDescriptor(Int32)
  /// The file descriptor is not open (never opened, or already closed).
  case closedDescriptor(Int32)
  /// The descriptor refers to something epoll cannot watch (a regular file or a directory).
  case notPollable(Int32, kind: String)
  /// The signal number is out of range or cannot be caught (`SIGKILL`, `SIGSTOP`).
  case invalidSignal(Int32)
  /// Another loop in this process already watches signals; only one loop may.
  case signalsOwnedByAnotherLoop(owner: String)
  /// libevent or the kernel refused the registration; `errno` is attached.
  case registrationFailed(errno: Int32)
  /// No process has this id (it never existed, or has exited and been reaped), or the id is
  /// not positive.
  case noSuchProcess(Int32)
  /// The system lacks what the request needs; `reason` names the missing call or file (for
  /// example `pidfd_open` on a kernel older than Linux 5.3, or `/proc/pressure/memory`
  /// where the kernel has no pressure stall information).
  case unsupported(feature: String, reason: String)
  /// inotify refused to watch the file descriptor `fd` names (a `FileSource` in
  /// LoopDispatch): `call` is the refused call (`inotify_init1` or `inotify_add_watch`) and
  /// `errno` its error. The description names the limit reached, if any.
  case fileWatchFailed(Int32, call: String, errno: Int32)

  /// A one-line explanation naming the descriptor, signal or errno involved.
  public var description: String {
    switch self {
    case .negativeDescriptor(let fd):
      return "file descriptor \(fd) is negative"
    case .closedDescriptor(let fd):
      return "file descriptor \(fd) is not open"
    case .notPollable(let fd, let kind):
      return "file descriptor \(fd) is a \(kind), which epoll cannot watch"
    case .invalidSignal(let signo):
      return "signal \(signo) cannot be watched"
    case .signalsOwnedByAnotherLoop(let owner):
      return
        "signals are already watched by event loop \"\(owner)\"; only one loop may watch signals"
    case .registrationFailed(let code):
      return "event registration failed (errno \(code))"
    case .noSuchProcess(let pid):
      return "no process with id \(pid) (it does not exist, or has exited and been reaped)"
    case .unsupported(let feature, let reason):
      return "\(feature) is not supported on this system: \(reason)"
    case .fileWatchFailed(let fd, let call, let code):
      return "cannot watch the file of descriptor \(fd): \(call) failed: "
        + Self.fileWatchReason(call: call, errno: code)
    }
  }

  /// Why inotify refused, naming the limit behind the error.
  private static func fileWatchReason(call: String, errno code: Int32) -> String {
    switch code {
    case ENOSPC:
      return "the per-user limit of inotify watches is reached "
        + "(/proc/sys/fs/inotify/max_user_watches) (errno \(code))"
    case EMFILE where call == "inotify_init1":
      return "the per-user limit of inotify instances is reached "
        + "(/proc/sys/fs/inotify/max_user_instances), or the process has no descriptor left "
        + "(RLIMIT_NOFILE) (errno \(code))"
    case EMFILE, ENFILE:
      return "no file descriptor left (the process's RLIMIT_NOFILE or the system's "
        + "/proc/sys/fs/file-max) (errno \(code))"
    case ENOMEM:
      return "the kernel is out of memory (errno \(code))"
    case EACCES:
      return "read access to the file is not permitted (errno \(code))"
    case ENOENT where call == "inotify_add_watch":
      return "/proc is not mounted (the file is named through /proc/self/fd) (errno \(code))"
    default:
      return "errno \(code)"
    }
  }
}
