import MainLoop

/// What every source has: handlers, activation, suspension and cancellation.
///
/// Sources start inactive: set the handlers, then call ``activate()``. Every handler runs on
/// the target queue; the event handler never runs concurrently with itself. A source keeps
/// its target queue alive until it is cancelled.
///
/// Dropping the last reference to an active source cancels it: no further event handler
/// runs, and the cancel handler (if any) runs once. A handler that captures its own source
/// keeps it alive (as in GCD): cancel such a source, which releases the handlers. Because
/// `Queue.runMain()` never returns, an optimised build may end the lifetime of a local
/// source before it: keep sources in properties, or call
/// `Queue.runMain(keepingAlive: source)` (not `withExtendedLifetime`, whose end is
/// unreachable after a call that never returns).
///
/// Thread-safety: every method may be called from any thread.
public class Source: @unchecked Sendable {
  // @unchecked Sendable: all state is in `core`, which documents its own protection.
  let core: SourceCore
  /// A name for diagnostics.
  public let label: String

  init(core: SourceCore, label: String) {
    self.core = core
    self.label = label
    core.owner = self
  }

  deinit {
    core.release()
  }

  /// The queue the handlers run on.
  public var queue: Queue { core.queue }

  /// Makes `queue` the queue the handlers run on. Only before ``activate()`` (as GCD's
  /// `dispatch_set_target_queue` on an inactive source); afterwards it is a client bug.
  /// Thread-safety: any thread.
  public func setTarget(_ queue: Queue) {
    if !core.retarget(to: queue) {
      clientBug(
        "setTarget on source \"\(label)\" after it was activated; set a source's queue before activate()"
      )
    }
  }

  /// The data of the current event, read inside the event handler: bytes readable (read
  /// sources), writable space estimate (write sources), fires since the last handler run
  /// (timer and signal sources), the merged value (data sources), `DISPATCH_PROC_EXIT`
  /// (process sources), the pressure levels seen (memory-pressure sources) or the or-ed
  /// ``FileSource/Events`` bits (file sources). For fd sources it is
  /// computed when first read in a handler run (a system call), so a handler that does not
  /// read it pays nothing.
  public var data: UInt { core.currentDataValue() }

  /// Sets the closure run on the target queue for each batch of events.
  public func setEventHandler(_ handler: (@Sendable () -> Void)?) {
    core.handlers.withLock { $0.event = handler }
  }

  /// Sets the closure run once on the target queue after ``cancel()``, last of all. Like
  /// every handler, it waits while the source is inactive or suspended: it runs after
  /// ``activate()`` or the last ``resume()`` (or when the last reference to the source goes).
  public func setCancelHandler(_ handler: (@Sendable () -> Void)?) {
    core.handlers.withLock { $0.cancel = handler }
  }

  /// Sets the closure run once on the target queue when the source is activated; on a
  /// source already activated (and not cancelled) it is queued at once.
  public func setRegistrationHandler(_ handler: (@Sendable () -> Void)?) {
    core.setRegistrationHandler(handler)
  }

  /// Starts the source (idempotent).
  public func activate() { core.activate() }

  /// Whether ``resume()`` now would activate the source (never activated, not suspended).
  /// For the C API, which binds handler contexts at activation.
  package var resumeWouldActivate: Bool {
    core.status.load(ordering: .acquiring) & SourceCore.activated == 0
      && core.suspendCount.load(ordering: .acquiring) == 0
  }

  /// Stops handler deliveries until a matching ``resume()``; events meanwhile are merged.
  public func suspend() { core.suspend() }

  /// Undoes one ``suspend()``; on a source never activated and never suspended, activates
  /// it. Resuming a source that is not suspended is a client bug and traps.
  public func resume() { core.resume(label: "source \"\(label)\"") }

  /// Stops the source: no new event handler call starts after this returns (one whose
  /// delivery was already past its cancelled check on another thread may still run, as in
  /// GCD); the cancel handler runs once, after any running event handler, on the target queue.
  public func cancel() { core.cancel() }

  /// Whether ``cancel()`` has been called.
  public var isCancelled: Bool { core.isCancelled }

  /// Why ``activate()`` could not register the source with the system, or nil if it could
  /// (or has not been activated). Set before `activate()` returns when the system refuses at
  /// once (for example `epoll` refusing a descriptor such as `/dev/null`, errno `EPERM`, or
  /// a full descriptor table, `EMFILE`, when the first fd source starts the I/O driver: a
  /// later source tries again). Such a source never fires; ``cancel()`` still runs its cancel handler once.
  public var registrationError: EventLoopError? { core.registrationError }
}
