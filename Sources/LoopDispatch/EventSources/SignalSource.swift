@_spi(LoopDispatchRuntime) import MainLoop

/// Delivers a POSIX signal to a queue. ``Source/data`` counts deliveries since the last
/// handler run. Several sources may watch one signal; while any does, the signal's default
/// action (such as termination) does not happen.
///
/// The signal is watched from creation (so its default action is held off once `init`
/// returns); the handler runs only once the source is activated.
public final class SignalSource: Source, @unchecked Sendable {
  /// The watched signal.
  public let signal: Int32

  /// Creates an inactive signal source whose handler runs on `queue`.
  ///
  /// Every signal source of the process, whatever its target (the main queue included), is
  /// watched by LoopDispatch's service loop, so sources on any mix of queues and signals
  /// work together; the handler is then queued on the target.
  /// - Throws: ``EventLoopError/invalidSignal(_:)`` for `SIGKILL`, `SIGSTOP` or an invalid
  ///   number; ``EventLoopError/signalsOwnedByAnotherLoop(owner:)`` if the program itself
  ///   watches signals on another event loop (``EventLoop/watchSignal(_:_:)``; libevent lets
  ///   only one loop per process watch signals).
  public init(signal: Int32, queue: Queue = .global(), label: String = "signal-source")
    throws(EventLoopError)
  {
    self.signal = signal
    let core = SignalCore(queue: queue)
    try core.watch(signal)
    super.init(core: core, label: label)
  }
}

final class SignalCore: SourceCore, @unchecked Sendable {
  // @unchecked Sendable: `watch` is behind its lock; the base documents the rest.
  private let watchBox = LockedValue<SignalWatch?>(nil)

  init(queue: Queue) {
    super.init(queue: queue, merge: .add)
  }

  /// Watches `signal` on the service loop, for every target: one loop owns the process's
  /// signals (libevent allows only one), so sources on the main queue and on other queues
  /// can coexist. The call returns only once the loop has installed the handler, so the
  /// default action is held off from then on.
  func watch(_ signal: Int32) throws(EventLoopError) {
    let signalLoop = ServiceLoop.shared
    let watch = try signalLoop.watchSignal(signal) { [self] in self.signal(1) }
    watchBox.withLock { $0 = watch }
    if !signalLoop.isInLoopThread {
      // The add was posted before this marker: once the marker runs, it is in place.
      let installed = OneShotEvent()
      signalLoop.execute { installed.signal() }
      installed.wait()
    }
  }

  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    let watch = watchBox.withLock { box -> SignalWatch? in
      defer { box = nil }
      return box
    }
    if let watch {
      watch.cancel(then: completion)
    } else {
      completion()
    }
  }
}
