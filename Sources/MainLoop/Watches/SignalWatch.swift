import CLibevent
import Glibc

/// A watch on a POSIX signal, registered with ``EventLoop/watchSignal(_:_:)``.
///
/// The handler runs on the loop thread after the signal arrives (libevent's self-pipe turns
/// the asynchronous signal into an ordinary event), never inside the signal handler. Several
/// watches may watch one signal. While any watch for a signal is live, the signal's default
/// action (for example termination on `SIGTERM`) does not happen; the previous disposition is
/// restored when the last watch for it is cancelled.
///
/// Thread-safety: `cancel(then:)` and `isCancelled` may be called from any thread.
public final class SignalWatch: Sendable {
  /// The watched signal number.
  public let signal: Int32
  let registration: EventRegistration

  init(signal: Int32, registration: EventRegistration) {
    self.signal = signal
    self.registration = registration
  }

  /// Whether ``cancel(then:)`` has been called.
  public var isCancelled: Bool { registration.isCancelled }

  /// Stops the watch; see ``FDWatch/cancel(then:)`` for the guarantees.
  public func cancel(then completion: (@Sendable () -> Void)? = nil) {
    registration.cancel(then: completion)
  }
}

/// The loop that watches signals, and how many signal watches it has. libevent routes all
/// signals of a process to one event base at a time, so the loop that first watches a signal
/// keeps the role until its last signal watch is removed.
/// Protected by: the mutex.
private let signalOwner = LockedValue<(id: ObjectIdentifier, name: String, watches: Int)?>(nil)

extension EventLoop {
  /// Watches `signal`; `handler` runs on the loop thread once per delivery batch.
  ///
  /// - Throws: ``EventLoopError/invalidSignal(_:)`` for `SIGKILL`, `SIGSTOP` or a number out
  ///   of range; ``EventLoopError/signalsOwnedByAnotherLoop(owner:)`` when another loop of
  ///   this process already watches signals.
  /// - Thread-safety: callable from any thread, like ``watch(fd:for:oneShot:_:)``.
  public func watchSignal(
    _ signal: Int32, _ handler: @escaping @Sendable () -> Void
  ) throws(EventLoopError) -> SignalWatch {
    guard signal > 0, signal < 65, signal != SIGKILL, signal != SIGSTOP else {
      throw .invalidSignal(signal)
    }
    let me = ObjectIdentifier(self)
    let ownerName = signalOwner.withLock { owner -> String? in
      if owner == nil { owner = (me, name, 0) }
      if owner!.id != me { return owner!.name }
      owner!.watches += 1
      return nil
    }
    if let ownerName { throw .signalsOwnedByAnotherLoop(owner: ownerName) }
    let registration = EventRegistration(
      loop: self, descriptor: "signal \(signal)",
      onRemoved: {
        signalOwner.withLock { owner in
          owner!.watches -= 1
          if owner!.watches == 0 { owner = nil }
        }
      },
      handler: { _ in handler() }
    )
    try register(registration, fd: signal, events: cl_ev_signal | cl_ev_persist)
    return SignalWatch(signal: signal, registration: registration)
  }
}
