import CLibevent
import Glibc

/// Which readiness an ``FDWatch`` reports.
public enum FDInterest: Sendable, Hashable, CustomStringConvertible {
  /// The descriptor has data to read, a pending connection, or hang-up/error.
  case read
  /// The descriptor can accept writes, or has hang-up/error.
  case write

  var libeventFlags: Int16 { self == .read ? cl_ev_read : cl_ev_write }

  /// `"read"` or `"write"`.
  public var description: String { self == .read ? "read" : "write" }
}

/// A level-triggered readiness watch on a file descriptor, registered with
/// ``EventLoop/watch(fd:for:oneShot:_:)``.
///
/// The handler runs on the loop thread every turn in which the descriptor is ready, until the
/// watch is cancelled. Read and write watches on one descriptor are independent.
///
/// ## Closing the descriptor safely
/// Never close a watched descriptor first: its number may be reused at once by another
/// thread. Cancel the watch and close in the completion, which runs on the loop thread once
/// the watch is removed and no handler can start:
///
/// ```swift
/// watch.cancel { close(fd) }
/// ```
///
/// Thread-safety: `cancel(then:)` and `isCancelled` may be called from any thread.
public final class FDWatch: Sendable {
  /// The watched descriptor.
  public let fd: Int32
  /// What the watch reports.
  public let interest: FDInterest
  let registration: EventRegistration

  init(fd: Int32, interest: FDInterest, oneShot: Bool, registration: EventRegistration) {
    self.fd = fd
    self.interest = interest
    self.isOneShot = oneShot
    self.registration = registration
  }

  /// Whether ``cancel(then:)`` has been called.
  public var isCancelled: Bool { registration.isCancelled }

  /// Whether the watch is one-shot (see ``EventLoop/watch(fd:for:oneShot:_:)``).
  public let isOneShot: Bool

  /// Re-arms a one-shot watch after it fired, or a paused watch, so that it reports the next
  /// readiness. Safe from any thread (off the loop thread it takes effect on the loop's next
  /// turn). No effect on a cancelled watch, nor on a persistent watch that is not paused.
  public func rearm() {
    let registration = self.registration
    let oneShot = isOneShot
    if registration.loop.isInLoopThread {
      registration.rearmOnLoop(oneShot: oneShot)
    } else {
      registration.loop.execute { registration.rearmOnLoop(oneShot: oneShot) }
    }
  }

  /// Stops a persistent watch from reporting readiness until ``rearm()``, without removing
  /// it. Safe from any thread (off the loop thread it takes effect on the loop's next turn).
  public func pause() {
    let registration = self.registration
    if registration.loop.isInLoopThread {
      registration.pauseOnLoop()
    } else {
      registration.loop.execute { registration.pauseOnLoop() }
    }
  }

  /// Stops the watch. Safe from any thread; calling it again only adds a completion.
  ///
  /// Once this returns, no new handler call starts. Called from another thread, it may race
  /// with a call the loop thread has just begun (past its cancelled check): that one call may
  /// still run. `completion` runs on the loop thread after the watch is removed from the loop
  /// (immediately, before returning, when called on the loop thread), when no handler is
  /// running and none will: the place to close the descriptor.
  public func cancel(then completion: (@Sendable () -> Void)? = nil) {
    registration.cancel(then: completion)
  }
}

extension EventLoop {
  /// Watches `fd` for `interest`; `handler` runs on the loop thread while it is ready.
  ///
  /// - Parameters:
  ///   - fd: An open, pollable descriptor (socket, pipe, tty, eventfd, ...), preferably
  ///     non-blocking.
  ///   - interest: ``FDInterest/read`` or ``FDInterest/write``.
  ///   - handler: Runs on the loop thread each turn the descriptor is ready (level-triggered).
  ///   - oneShot: When true, the watch reports readiness once and then stays quiet until
  ///     ``FDWatch/rearm()`` (for handing readiness to another thread without spinning).
  /// - Throws: ``EventLoopError`` for a negative or closed descriptor, a regular file or a
  ///   directory, or a registration the kernel refuses.
  /// - Thread-safety: callable from any thread. Off the loop thread the descriptor is checked
  ///   at once and the registration completes on the loop's next turn.
  public func watch(
    fd: Int32, for interest: FDInterest, oneShot: Bool = false,
    _ handler: @escaping @Sendable () -> Void
  ) throws(EventLoopError) -> FDWatch {
    try watch(fd: fd, for: interest, oneShot: oneShot, eventHandler: { _ in handler() })
  }

  /// ``watch(fd:for:oneShot:_:)`` with a handler that takes libevent's event flags: the form
  /// LoopDispatch's sources use, which saves the per-event hop through the wrapping closure.
  package func watch(
    fd: Int32, for interest: FDInterest, oneShot: Bool,
    eventHandler: @escaping @Sendable (Int16) -> Void
  ) throws(EventLoopError) -> FDWatch {
    try Self.validatePollable(fd)
    let registration = EventRegistration(
      loop: self, descriptor: "fd \(fd) \(interest)", handler: eventHandler)
    let flags = interest.libeventFlags | (oneShot ? 0 : cl_ev_persist)
    try register(registration, fd: fd, events: flags)
    return FDWatch(fd: fd, interest: interest, oneShot: oneShot, registration: registration)
  }

  /// Adds `registration` now on the loop thread (throwing on failure) or posts the add.
  func register(_ registration: EventRegistration, fd: Int32, events: Int16) throws(EventLoopError)
  {
    if isInLoopThread {
      let code = registration.addOnLoop(fd: fd, events: events)
      if code != 0 { throw .registrationFailed(errno: code) }
    } else {
      execute {
        let code = registration.addOnLoop(fd: fd, events: events)
        if code != 0 {
          writeStandardError(
            "LoopDispatch: \(registration.descriptor) could not be registered (errno \(code)); "
              + "the watch is cancelled\n")
          registration.cancel(then: nil)
        }
      }
    }
  }

  /// Checks that `fd` is open and that epoll can watch it.
  static func validatePollable(_ fd: Int32) throws(EventLoopError) {
    if fd < 0 { throw .negativeDescriptor(fd) }
    var info = stat()
    if fstat(fd, &info) != 0 {
      throw errno == EBADF ? .closedDescriptor(fd) : .registrationFailed(errno: errno)
    }
    switch info.st_mode & S_IFMT {
    case S_IFREG: throw .notPollable(fd, kind: "regular file")
    case S_IFDIR: throw .notPollable(fd, kind: "directory")
    default: return
    }
  }
}
