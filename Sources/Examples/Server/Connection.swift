import ExampleHTTP
import Glibc
import LoopDispatch

/// One client connection. Every mutable property is confined to `queue`, a serial queue of
/// its own: the read and write sources, the idle timer and the completions of CPU work all
/// run there, so the connection needs no lock.
///
/// Life cycle: read → parse → respond (at once, or after work on a global queue) → flush
/// (through the write source when the socket is full) → next request or close. Closing
/// cancels both sources; the descriptor is closed by the last cancel handler, after which the
/// server forgets the connection.
final class Connection: @unchecked Sendable {
  // @unchecked Sendable: mutable state is only touched on `queue` (see above).
  let id: Int
  let fd: Int32
  let queue: Queue
  private let server: HTTPServer
  private let readSource: ReadSource
  private let writeSource: WriteSource

  private var input: [UInt8] = []
  private var output: [UInt8] = []
  private var outputOffset = 0
  private var requestInFlight = false
  private var closeWhenFlushed = false
  private var draining = false
  private var closed = false
  private var writeSourceState = WriteSourceState.inactive
  /// True while the read source is suspended because the client is not reading its answers.
  private var readPaused = false
  private var idleTimer: DelayedWork?
  /// When the connection last read input; the idle timer measures from here.
  private var lastActivity = Deadline.now
  private var sourcesLeft = 2

  private enum WriteSourceState { case inactive, active, suspended }

  init(id: Int, fd: Int32, server: HTTPServer) throws(EventLoopError) {
    self.id = id
    self.fd = fd
    self.server = server
    // One label for every connection: /metrics folds queues by label, so a label per
    // connection would make one time series per connection.
    queue = Queue(label: "serve.conn")
    readSource = try ReadSource(fd: fd, queue: queue, label: "conn.\(id).read")
    writeSource = try WriteSource(fd: fd, queue: queue, label: "conn.\(id).write")
  }

  /// Starts reading. Any thread.
  func start() {
    readSource.setEventHandler { [unowned self] in readable() }
    writeSource.setEventHandler { [unowned self] in flush() }
    readSource.setCancelHandler { [unowned self] in sourceCancelled() }
    writeSource.setCancelHandler { [unowned self] in sourceCancelled() }
    queue.async { [self] in
      readSource.activate()
      resetIdleTimer()
    }
  }

  /// Answers not yet sent (bytes) above which the connection stops reading and parsing new
  /// requests until the client has taken them: a client that pipelines requests without
  /// reading cannot make the server buffer without bound.
  static let maximumBufferedOutput = 256 * 1024

  private var outputBacklogged: Bool {
    output.count - outputOffset >= Self.maximumBufferedOutput
  }

  /// Requests not yet parsed (bytes) above which the connection stops reading while it
  /// cannot parse them (a request in flight, or a close pending).
  static let maximumBufferedInput = 4 * HTTPParser.maximumHeadBytes

  /// Whether reading must stop until `flush` has sent the answers: answers are piling up, or
  /// requests are piling up behind one that is being answered. Input the parser is waiting
  /// on never stops reading (a body larger than `maximumBufferedInput` could never arrive);
  /// the parser bounds it (a head over `maximumHeadBytes` gets 431, a declared body over
  /// `maximumBodyBytes` gets 413).
  private var readingHeldBack: Bool {
    outputBacklogged
      || (input.count > Self.maximumBufferedInput && (requestInFlight || closeWhenFlushed))
  }

  /// Finishes what is in flight, then closes. A request that has already arrived counts as in
  /// flight (it is read and answered, with `Connection: close`), even if its readiness event
  /// has not reached this connection yet: shutdown loses no request a client sent before it.
  /// Connection queue.
  func drain() {
    draining = true
    guard !closed, !requestInFlight, outputOffset == output.count else { return }
    readable()
    if !closed && !requestInFlight && outputOffset == output.count { close() }
  }

  // MARK: Reading and requests

  private func readable() {
    if readingHeldBack {
      // Backpressure: stop reading until `flush` has sent the answers (level-triggered, so a
      // source left running would fire again at once).
      if !readPaused {
        readPaused = true
        readSource.suspend()
      }
      return
    }
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    while !closed {
      let n = read(fd, &buffer, buffer.count)
      if n > 0 {
        input += buffer[..<n]
        if input.count > Self.maximumBufferedInput { break }  // Parse before reading more.
        continue
      }
      if n == 0 { return close() }  // The peer closed its side.
      if errno == EINTR { continue }
      if errno == EAGAIN || errno == EWOULDBLOCK { break }
      return close()  // ECONNRESET and other errors: the peer is gone.
    }
    resetIdleTimer()
    processInput()
  }

  private func processInput() {
    while !closed && !requestInFlight && !closeWhenFlushed && !outputBacklogged {
      switch HTTPParser.parse(input) {
      case .incomplete:
        return
      case .request(let request, let consumed):
        input.removeFirst(consumed)
        handle(request)
      case .malformed(let refusal):
        // 400 (not HTTP, or conflicting Content-Length) or 413 (body over the limit): the
        // framing of what follows is unknown, so the connection closes after the answer.
        respond(
          status: refusal.status, reason: refusal.reason,
          body: "\(refusal.reason.lowercased()): \(refusal)\n", keepAlive: false)
      case .headTooLarge:
        respond(
          status: 431, reason: "Request Header Fields Too Large",
          body: "request head larger than \(HTTPParser.maximumHeadBytes) bytes\n", keepAlive: false)
      case .unsupported(let what):
        respond(status: 501, reason: "Not Implemented", body: "\(what)\n", keepAlive: false)
      }
    }
  }

  private func handle(_ request: HTTPRequest) {
    let keepAlive = request.keepAlive && !draining
    switch request.path {
    case "/":
      respond(status: 200, reason: "OK", body: "hello from LoopDispatch\n", keepAlive: keepAlive)
    case "/hash":
      guard let bytes = request.query("bytes").flatMap({ Int($0) }),
        (0...(64 << 20)).contains(bytes)
      else {
        return respond(
          status: 400, reason: "Bad Request", body: "usage: /hash?bytes=N (N ≤ 64 MiB)\n",
          keepAlive: keepAlive)
      }
      requestInFlight = true
      Queue.global().async { [self] in
        let digest = fnv1a(bytes: bytes)  // CPU work off the connection's queue.
        queue.async { [self] in
          requestInFlight = false
          respond(
            status: 200, reason: "OK", body: "fnv1a(\(bytes) bytes) = \(digest)\n",
            keepAlive: keepAlive)
          processInput()
        }
      }
    case "/delay":
      let milliseconds = request.query("ms").flatMap { Int($0) } ?? 100
      requestInFlight = true
      queue.after(.milliseconds(Swift.min(Swift.max(milliseconds, 0), 60_000))) { [self] in
        requestInFlight = false
        respond(
          status: 200, reason: "OK", body: "waited \(milliseconds) ms\n", keepAlive: keepAlive)
        processInput()
      }
    case "/stats":
      requestInFlight = true
      Queue.main.async { [self] in
        // The connection count belongs to the main queue; the answer goes back here.
        let body = "\(RuntimeStats.current)\nconnections \(server.connectionCount)\n"
        queue.async { [self] in
          requestInFlight = false
          respond(status: 200, reason: "OK", body: body, keepAlive: keepAlive)
          processInput()
        }
      }
    case "/metrics":
      respond(
        status: 200, reason: "OK", body: RuntimeStats.current.prometheusText,
        keepAlive: keepAlive, contentType: "text/plain; version=0.0.4; charset=utf-8")
    default:
      respond(
        status: 404, reason: "Not Found", body: "no route for \(request.path)\n",
        keepAlive: keepAlive)
    }
  }

  // MARK: Writing

  private func respond(
    status: Int, reason: String, body: String, keepAlive requested: Bool,
    contentType: String = "text/plain; charset=utf-8"
  ) {
    if closed { return }
    // A shutdown that began while the request was in flight closes after this response.
    let keepAlive = requested && !draining
    output += httpResponse(
      status: status, reason: reason, body: body, keepAlive: keepAlive, contentType: contentType)
    if !keepAlive { closeWhenFlushed = true }
    flush()
  }

  private func flush() {
    while outputOffset < output.count && !closed {
      let n = output.withUnsafeBytes { bytes in
        send(
          fd, bytes.baseAddress! + outputOffset, output.count - outputOffset, Int32(MSG_NOSIGNAL))
      }
      if n > 0 {
        outputOffset += n
      } else if n < 0 && errno == EINTR {
        continue
      } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
        setWriteSource(active: true)  // Come back when the socket drains.
        return
      } else {
        return close()
      }
    }
    output.removeAll(keepingCapacity: true)
    outputOffset = 0
    setWriteSource(active: false)
    if closeWhenFlushed || (draining && !requestInFlight) { return close() }
    if readPaused {
      // The client took its answers: answer what is buffered, then read again. The flag is
      // cleared first so the flushes inside `processInput` do not come back here.
      readPaused = false
      processInput()
      if closed { return }
      if readingHeldBack {
        readPaused = true  // Still suspended; the next full flush tries again.
      } else {
        readSource.resume()
      }
    }
  }

  private func setWriteSource(active: Bool) {
    switch (writeSourceState, active) {
    case (.inactive, true):
      writeSource.activate()
      writeSourceState = .active
    case (.suspended, true):
      writeSource.resume()
      writeSourceState = .active
    case (.active, false):
      writeSource.suspend()
      writeSourceState = .suspended
    default:
      break
    }
  }

  // MARK: Timeouts and closing

  /// Notes activity. The timer is not moved per request (a cancel and a new timer per
  /// request kept the service loop busy with timer churn, a tenth of the server's CPU under
  /// load): one timer stays pending, and when it fires early relative to the last activity
  /// it is scheduled again for the rest of the timeout.
  private func resetIdleTimer() {
    lastActivity = .now
    if idleTimer == nil { scheduleIdleTimer(at: lastActivity + server.idleTimeout) }
  }

  private func scheduleIdleTimer(at deadline: Deadline) {
    // A strong capture: `close()` cancels the timer, which releases the closure (and so the
    // connection) at once; a fired timer finds `closed` set.
    idleTimer = queue.after(deadline: deadline) { [self] in idleExpired() }
  }

  private func idleExpired() {
    idleTimer = nil
    if closed { return }
    let due = lastActivity + server.idleTimeout
    if Deadline.now < due { return scheduleIdleTimer(at: due) }
    // Busy, not idle: a request is being answered, answers are waiting for the client, or
    // the next request has arrived and its read event has not run yet.
    if requestInFlight || readPaused || outputOffset < output.count || hasUnreadInput() {
      return resetIdleTimer()
    }
    close()
  }

  /// Whether the socket holds bytes not read yet (a peek that never blocks).
  private func hasUnreadInput() -> Bool {
    var byte: UInt8 = 0
    return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
  }

  private func close() {
    if closed { return }
    closed = true
    idleTimer?.cancel()
    idleTimer = nil
    readSource.cancel()
    writeSource.cancel()
    // As in GCD, a cancel handler waits while its source is suspended or inactive: let each
    // source run again (cancelled, so only its cancel handler runs).
    if readPaused { readSource.resume() }
    switch writeSourceState {
    case .inactive: writeSource.activate()
    case .suspended: writeSource.resume()
    case .active: break
    }
  }

  /// Runs on `queue` for each source's cancel handler; the last one closes the socket.
  private func sourceCancelled() {
    sourcesLeft -= 1
    guard sourcesLeft == 0 else { return }
    Glibc.close(fd)
    let id = self.id
    let server = self.server
    Queue.main.async { server.connectionClosed(id) }
  }
}
