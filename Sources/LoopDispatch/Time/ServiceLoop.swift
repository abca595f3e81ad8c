import MainLoop

/// The dedicated thread whose event loop keeps the timers of timer sources (and `Task.sleep`)
/// of every queue except those whose chain ends at the main queue (whose timers live on the
/// main loop), and watches the signals of sources that do not target the main queue. The
/// `after` timers of those queues are the I/O driver's (`Time/DriverTimers.swift`), unless
/// the driver could not start, and so are their descriptors (`Delivery/IODriver.swift`).
/// It never runs user code: a fired timer only enqueues work onto its queue, so its timers
/// stay punctual.
enum ServiceLoop {
  /// The service loop, started on first use on the thread `ld.service`.
  static let shared: EventLoop = {
    let loop = EventLoop(processLifetimeName: "ld.service")
    loop.setTimerPassObserver { TimerFireBatch.service.flush() }
    let started = OneShotEvent()
    do {
      try NativeThread.spawnDetached(name: "ld.service") {
        loop.execute { started.signal() }
        loop.run()
      }
    } catch {
      resourceFailure("could not start the service loop thread ld.service (\(error))")
    }
    started.wait()
    return loop
  }()

  /// The loop that keeps `queue`'s timers and sources: the main loop for the main queue and
  /// for every queue whose target chain ends at it (their work runs on the main thread, so
  /// their events are seen there too), the service loop otherwise. Chosen when the timer or
  /// source is created.
  static func loop(for queue: Queue) -> EventLoop {
    queue.root.kind == .main ? EventLoop.main : shared
  }
}
