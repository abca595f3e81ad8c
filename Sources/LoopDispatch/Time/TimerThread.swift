import MainLoop

/// The dedicated thread whose event loop keeps the timers of every queue except the main
/// queue (whose timers live on the main loop). A fired timer only enqueues its work onto its
/// queue, so the thread never runs user code and its timers stay punctual.
enum TimerThread {
  /// The timer loop, started on first use.
  static let loop: EventLoop = {
    let loop = EventLoop(name: "ld.timers")
    let started = OneShotEvent()
    let thread = NativeThread.spawn(name: "ld.timers") {
      loop.execute { started.signal() }
      loop.run()
    }
    if thread == nil { internalBug("could not start the timer thread") }
    started.wait()
    return loop
  }()

  /// The loop that keeps `queue`'s timers.
  static func loop(for queue: Queue) -> EventLoop {
    queue.kind == .main ? EventLoop.main : loop
  }
}
