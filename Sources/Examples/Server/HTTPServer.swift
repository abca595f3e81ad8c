import ExampleHTTP
import Glibc
import LoopDispatch
import Synchronization

/// Accepts connections on the main queue and shuts down gracefully on SIGINT/SIGTERM.
///
/// Shutdown walk-through:
/// 1. A signal source (main queue) calls `beginShutdown`: the accept source is cancelled (its
///    cancel handler closes the listening socket), so no new connection is accepted.
/// 2. Every connection is told to drain: it finishes the request in flight, flushes its
///    response, then closes; an idle connection closes at once.
/// 3. Each closed connection reports back on the main queue; when none is left the main loop
///    stops and `Queue.runMain()` exits the process with status 0.
/// 4. If connections are still open `drainTimeout` after the signal (a client that never
///    reads its answers, a long request), they are closed where they stand and the process
///    exits 0 as in step 3. A second SIGINT or SIGTERM during the drain exits at once, status
///    0, without closing anything first.
///
/// Out of descriptors: see `HTTPServer+Overload.swift`.
final class HTTPServer: @unchecked Sendable {
  // @unchecked Sendable: every mutable property is only touched on the main queue, except the
  // atomic counters.
  let listener: Int32
  let options: ServeOptions
  let acceptSource: ReadSource
  private var signalSources: [SignalSource] = []
  /// Only touched on the main queue.
  private var connections: [Int: Connection] = [:]
  /// Only touched on the main queue.
  private var nextID = 0
  /// Only touched on the main queue.
  private(set) var draining = false
  /// Out-of-descriptors state (`HTTPServer+Overload.swift`). Only touched on the main queue.
  var overload = OverloadState()
  /// Accepts that failed for want of a descriptor (EMFILE, ENFILE). Atomic (read by
  /// connections for /metrics).
  let refusedAccepts = Atomic<Int>(0)
  /// Clients answered 503 because the server was out of descriptors. Atomic.
  let overloadAnswers = Atomic<Int>(0)

  init(listener: Int32, options: ServeOptions) throws(EventLoopError) {
    self.listener = listener
    self.options = options
    acceptSource = try ReadSource(fd: listener, queue: .main, label: "accept")
    for signal in [SIGINT, SIGTERM] {
      signalSources.append(
        try SignalSource(signal: signal, queue: .main, label: "signal \(signal)"))
    }
  }

  /// Starts accepting. Call on the main thread before `Queue.runMain()`.
  func start() {
    let listener = self.listener
    startIODriver()
    openReserveDescriptor()
    acceptSource.setEventHandler { [unowned self] in acceptAll() }
    acceptSource.setCancelHandler { close(listener) }
    acceptSource.activate()
    for source in signalSources {
      let name = source.signal == SIGINT ? "SIGINT" : "SIGTERM"
      source.setEventHandler { [unowned self] in beginShutdown(reason: name) }
      source.activate()
    }
  }

  /// Accepts every pending connection. Main queue.
  private func acceptAll() {
    while !draining && !overload.acceptsPaused {
      let fd = accept(listener, nil, nil)
      if fd < 0 {
        if errno == EINTR || errno == ECONNABORTED { continue }
        if errno == EMFILE || errno == ENFILE { return outOfDescriptors(errno) }
        if errno != EAGAIN && errno != EWOULDBLOCK {
          Log.error("serve: accept failed: \(String(cString: strerror(errno)))")
        }
        return
      }
      acceptSucceeded()
      _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
      var one: Int32 = 1
      setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
      nextID += 1
      let id = nextID
      do {
        let connection = try Connection(id: id, fd: fd, server: self)
        connections[id] = connection
        connection.start()
      } catch {
        Log.error("serve: connection \(id): \(error)")
        close(fd)
      }
    }
  }

  /// Number of open connections. Main queue.
  var connectionCount: Int { connections.count }

  /// Called (on the main queue) once a connection has closed its socket.
  func connectionClosed(_ id: Int) {
    connections[id] = nil
    if draining {
      if connections.isEmpty { finish() }
    } else {
      descriptorFreed()
    }
  }

  /// Stops accepting and drains connections; a second call exits at once. Main queue.
  private func beginShutdown(reason: String) {
    if draining {
      Log.info("\(reason) again: exiting now; \(connections.count) connection(s) dropped")
      _exit(0)
    }
    draining = true
    Log.info(
      "\(reason): stopping; \(connections.count) connection(s) finishing "
        + "(at most \(options.drainTimeout.milliseconds) ms)")
    stopAccepting()
    for connection in connections.values {
      connection.queue.async { connection.drain() }
    }
    if connections.isEmpty { return finish() }
    Queue.main.after(options.drainTimeout) { [self] in drainDeadlinePassed() }
  }

  /// The drain deadline: whatever is still open is closed now. Main queue.
  private func drainDeadlinePassed() {
    if connections.isEmpty { return }
    Log.info("drain deadline: closing \(connections.count) connection(s) still open")
    for connection in connections.values {
      connection.queue.async { connection.abort() }
    }
  }

  private var finished = false

  private func finish() {
    if finished { return }
    finished = true
    for source in signalSources { source.cancel() }
    closeReserveDescriptor()
    Log.info("stopped cleanly")
    EventLoop.main.stop()  // `Queue.runMain()` then exits with status 0.
  }
}

extension Duration {
  /// Whole milliseconds (rounded down).
  var milliseconds: Int64 {
    let (seconds, attoseconds) = components
    return seconds * 1000 + attoseconds / 1_000_000_000_000_000
  }
}
