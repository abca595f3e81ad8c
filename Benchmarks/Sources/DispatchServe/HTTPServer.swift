// Sources/Examples/Server/HTTPServer.swift (the LoopDispatch `serve` example) ported to Apple's
// Dispatch: accept on a read source on the main queue, SIGINT/SIGTERM through signal sources on
// the main queue, graceful drain, exit 0.
import Dispatch
import ExampleHTTP
import Glibc

/// Accepts connections on the main queue and shuts down gracefully on SIGINT/SIGTERM: stop
/// accepting, let every connection finish its request in flight, exit 0 when none is left.
final class HTTPServer: @unchecked Sendable {
  // @unchecked Sendable: every mutable property is only touched on the main queue.
  let listener: Int32
  let idleTimeout: DispatchTimeInterval
  let idleTimerKind: IdleTimerKind
  private let acceptSource: any DispatchSourceRead
  private var signalSources: [any DispatchSourceSignal] = []
  /// Only touched on the main queue.
  private var connections: [Int: Connection] = [:]
  private var nextID = 0
  private var draining = false

  init(listener: Int32, idleTimeout: DispatchTimeInterval, idleTimerKind: IdleTimerKind) {
    self.listener = listener
    self.idleTimeout = idleTimeout
    self.idleTimerKind = idleTimerKind
    acceptSource = DispatchSource.makeReadSource(fileDescriptor: listener, queue: .main)
    for signalNumber in [SIGINT, SIGTERM] {
      signal(signalNumber, SIG_IGN)  // Delivered through the signal source instead.
      signalSources.append(DispatchSource.makeSignalSource(signal: signalNumber, queue: .main))
    }
  }

  /// Starts accepting. Call on the main thread before `dispatchMain()`.
  func start() {
    let listener = self.listener
    acceptSource.setEventHandler { [unowned self] in acceptAll() }
    acceptSource.setCancelHandler { close(listener) }
    acceptSource.activate()
    for source in signalSources {
      let name = source.handle == UInt(SIGINT) ? "SIGINT" : "SIGTERM"
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
      let connection = Connection(id: nextID, fd: fd, server: self)
      connections[nextID] = connection
      connection.start()
    }
  }

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
    exit(0)  // `dispatchMain()` never returns.
  }
}
