import ExampleHTTP
import Glibc
import LoopDispatch

/// Accepts connections on the main queue and shuts down gracefully on SIGINT/SIGTERM.
///
/// Shutdown walk-through:
/// 1. A signal source (main queue) calls `beginShutdown`: the accept source is cancelled (its
///    cancel handler closes the listening socket), so no new connection is accepted.
/// 2. Every connection is told to drain: it finishes the request in flight, flushes its
///    response, then closes; an idle connection closes at once.
/// 3. Each closed connection reports back on the main queue; when none is left the main loop
///    stops and `Queue.runMain()` exits the process with status 0.
final class HTTPServer: @unchecked Sendable {
  // @unchecked Sendable: every mutable property is only touched on the main queue.
  let listener: Int32
  let idleTimeout: Duration
  private let acceptSource: ReadSource
  private var signalSources: [SignalSource] = []
  /// Only touched on the main queue.
  private var connections: [Int: Connection] = [:]
  private var nextID = 0
  private var draining = false

  init(listener: Int32, idleTimeout: Duration) throws(EventLoopError) {
    self.listener = listener
    self.idleTimeout = idleTimeout
    acceptSource = try ReadSource(fd: listener, queue: .main, label: "accept")
    for signal in [SIGINT, SIGTERM] {
      signalSources.append(
        try SignalSource(signal: signal, queue: .main, label: "signal \(signal)"))
    }
  }

  /// Starts accepting. Call on the main thread before `Queue.runMain()`.
  func start() {
    let listener = self.listener
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
    while !draining {
      let fd = accept(listener, nil, nil)
      if fd < 0 {
        if errno == EINTR || errno == ECONNABORTED { continue }
        if errno != EAGAIN && errno != EWOULDBLOCK {
          Log.error("serve: accept failed: \(String(cString: strerror(errno)))")
        }
        return
      }
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
    if draining && connections.isEmpty { finish() }
  }

  /// Stops accepting and drains connections. Main queue.
  private func beginShutdown(reason: String) {
    if draining { return }
    draining = true
    Log.info("\(reason): stopping; \(connections.count) connection(s) finishing")
    acceptSource.cancel()
    for connection in connections.values {
      connection.queue.async { connection.drain() }
    }
    if connections.isEmpty { finish() }
  }

  private func finish() {
    for source in signalSources { source.cancel() }
    Log.info("stopped cleanly")
    EventLoop.main.stop()  // `Queue.runMain()` then exits with status 0.
  }
}
