import ExampleHTTP
import Glibc
import LoopDispatch

/// One client connection. Every mutable property is confined to `queue`, a serial queue of
/// its own: the read and write sources, the idle timer and the completions of CPU work all
/// run there, so the connection needs no lock.
///
/// Life cycle: read → parse → respond (at once, or after work on a global queue) → flush
/// (through the write source when the socket is full) → next request or close. A client that
/// half-closes (sends its FIN) gets an answer to every complete request it sent before it,
/// then the connection closes. Closing cancels both sources; the descriptor is closed by the
/// last cancel handler, after which the server forgets the connection.
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
  /// True while reading waits because the client is not reading its answers (backpressure).
  private var readPaused = false
  /// The client sent its FIN: nothing more will arrive; what has arrived is still answered.
  private var inputEnded = false
  /// Whether `readSource` is suspended right now (for backpressure or after the FIN).
  /// `readPaused` is cleared for a moment while `flush` answers buffered requests with the
  /// source still suspended, and a cancelled source must be resumed for its cancel handler.
  private var readSourceSuspended = false
  /// True while `processInput` runs: a flush inside it leaves the next request to its loop.
  private var processing = false
  /// Whether `100 Continue` went out for the request whose body is arriving.
  private var continueSent = false
  /// Closes the connection when idle or stuck writing, counted from the last activity.
  private lazy var timer = InactivityTimer(
    queue: queue, idleTimeout: server.options.idleTimeout,
    writeTimeout: server.options.writeTimeout,
    activity: { [unowned self] in currentActivity },
    expired: { [unowned self] _ in close() })
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
      timer.noteActivity()
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

  /// Closes at once, whatever is in flight (the drain deadline). Connection queue.
  func abort() { close() }

  // MARK: Reading and requests

  private func readable() {
    if readingHeldBack {
      // Backpressure: stop reading until `flush` has sent the answers (level-triggered, so a
      // source left running would fire again at once).
      readPaused = true
      setReadSource(suspended: true)
      return
    }
    if !inputEnded { readAvailable() }
    if !closed { processInput() }
  }

  /// Reads what the socket holds (up to `maximumBufferedInput` past what is buffered).
  private func readAvailable() {
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    var received = false
    while !closed {
      let n = read(fd, &buffer, buffer.count)
      if n > 0 {
        input += buffer[..<n]
        received = true
        if input.count > Self.maximumBufferedInput { break }  // Parse before reading more.
        // A short read took all the socket held: stop here rather than pay a second `read`
        // for its EAGAIN (one system call in six per keep-alive request, `strace -c -f`
        // under wrk). The source is level-triggered, so bytes that arrive meanwhile, or
        // the end of file, fire it again.
        if n < buffer.count { break }
        continue
      }
      if n == 0 {
        // The peer closed its side (a half-close, or a full close we see first as a FIN):
        // answer the requests it sent before, then close. The source stops (level-triggered,
        // an end of file would fire it again at once).
        inputEnded = true
        setReadSource(suspended: true)
        break
      }
      if errno == EINTR { continue }
      if errno == EAGAIN || errno == EWOULDBLOCK { break }
      return close()  // ECONNRESET and other errors: the peer is gone.
    }
    if received { timer.noteActivity() }
  }

  /// Parses and answers buffered requests while nothing holds them back. Once the client's
  /// input has ended and everything before it is answered, closes.
  private func processInput() {
    if processing { return }  // A flush inside the loop below: the loop goes on by itself.
    processing = true
    parseLoop: while !closed && !requestInFlight && !closeWhenFlushed && !outputBacklogged {
      switch HTTPParser.parse(input) {
      case .incomplete:
        sendContinueIfExpected()
        break parseLoop
      case .request(let request, let consumed):
        input.removeFirst(consumed)
        continueSent = false
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
    processing = false
    // After the FIN: every complete request has been answered (an incomplete one never will
    // be), so the connection closes once the answers are out (`flush` comes back here).
    if inputEnded && !closed && !requestInFlight && outputOffset == output.count { close() }
  }

  /// Sends `100 Continue` when the head of the request being received asks for it
  /// (`Expect: 100-continue`) and its body has not all arrived: the client waits for it
  /// before sending the body (RFC 9110 section 10.1.1). Not while draining (the connection
  /// closes after the request in flight).
  private func sendContinueIfExpected() {
    guard !continueSent, !draining, !input.isEmpty, headExpectsContinue(input) else { return }
    continueSent = true
    output += Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
    timer.noteActivity()
    flush()
  }

  private func handle(_ request: HTTPRequest) {
    let keepAlive = request.keepAlive && !draining
    // HEAD: the headers GET would send, Content-Length included, and no body.
    let omitBody = request.method == "HEAD"
    // Absolute-form is served for this server's own authority only (RFC 9112 section 3.2.2;
    // this is not a proxy): 421 Misdirected Request for any other.
    if let authority = request.absoluteAuthority, !server.isOwnAuthority(authority) {
      return respond(
        status: 421, reason: "Misdirected Request", body: "this server is not \(authority)\n",
        keepAlive: keepAlive, omitBody: omitBody)
    }
    switch request.path {
    case "/":
      respond(
        status: 200, reason: "OK", body: "hello from LoopDispatch\n", keepAlive: keepAlive,
        omitBody: omitBody)
    case "/hash":
      guard let bytes = request.query("bytes").flatMap({ Int($0) }),
        (0...(64 << 20)).contains(bytes)
      else {
        return respond(
          status: 400, reason: "Bad Request", body: "usage: /hash?bytes=N (N ≤ 64 MiB)\n",
          keepAlive: keepAlive, omitBody: omitBody)
      }
      requestInFlight = true
      Queue.global().async { [self] in
        let digest = fnv1a(bytes: bytes)  // CPU work off the connection's queue.
        queue.async { [self] in
          requestInFlight = false
          respond(
            status: 200, reason: "OK", body: "fnv1a(\(bytes) bytes) = \(digest)\n",
            keepAlive: keepAlive, omitBody: omitBody)
          processInput()
        }
      }
    case "/delay":
      let milliseconds = request.query("ms").flatMap { Int($0) } ?? 100
      requestInFlight = true
      queue.after(.milliseconds(Swift.min(Swift.max(milliseconds, 0), 60_000))) { [self] in
        requestInFlight = false
        respond(
          status: 200, reason: "OK", body: "waited \(milliseconds) ms\n", keepAlive: keepAlive,
          omitBody: omitBody)
        processInput()
      }
    case "/stats":
      requestInFlight = true
      Queue.main.async { [self] in
        // The connection count belongs to the main queue; the answer goes back here.
        let body =
          "\(RuntimeStats.current)\nconnections \(server.connectionCount)\n\(server.statsText)"
        queue.async { [self] in
          requestInFlight = false
          respond(status: 200, reason: "OK", body: body, keepAlive: keepAlive, omitBody: omitBody)
          processInput()
        }
      }
    case "/metrics":
      respond(
        status: 200, reason: "OK",
        body: RuntimeStats.current.prometheusText + server.prometheusText,
        keepAlive: keepAlive, omitBody: omitBody,
        contentType: "text/plain; version=0.0.4; charset=utf-8")
    default:
      respond(
        status: 404, reason: "Not Found", body: "no route for \(request.path)\n",
        keepAlive: keepAlive, omitBody: omitBody)
    }
  }

  // MARK: Writing

  private func respond(
    status: Int, reason: String, body: String, keepAlive requested: Bool,
    omitBody: Bool = false, contentType: String = "text/plain; charset=utf-8"
  ) {
    if closed { return }
    // A shutdown that began while the request was in flight closes after this response.
    let keepAlive = requested && !draining
    var response = httpResponse(
      status: status, reason: reason, body: body, keepAlive: keepAlive, contentType: contentType)
    if omitBody { response.removeLast(body.utf8.count) }
    output += response
    if !keepAlive { closeWhenFlushed = true }
    timer.noteActivity()  // The write timeout counts from the answer.
    flush()
  }

  private func flush() {
    var progressed = false
    defer { if progressed { timer.noteActivity() } }
    while outputOffset < output.count && !closed {
      let n = output.withUnsafeBytes { bytes in
        send(
          fd, bytes.baseAddress! + outputOffset, output.count - outputOffset, Int32(MSG_NOSIGNAL))
      }
      if n > 0 {
        outputOffset += n
        progressed = true
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
      } else if !inputEnded {
        setReadSource(suspended: false)
      }
    } else if inputEnded && !processing && !requestInFlight {
      processInput()  // Answers what the client sent before its FIN, then closes.
    }
  }

  private func setReadSource(suspended: Bool) {
    guard suspended != readSourceSuspended else { return }
    readSourceSuspended = suspended
    if suspended { readSource.suspend() } else { readSource.resume() }
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

  /// What the inactivity timer sees: busy with a request (or one has arrived and its read
  /// event has not run yet), waiting for the client to take answers, or idle.
  private var currentActivity: ConnectionActivity {
    if requestInFlight { return .working }
    if outputOffset < output.count { return .writing }
    return hasUnreadInput() ? .working : .idle
  }

  /// Whether the socket holds bytes not read yet (a peek that never blocks).
  private func hasUnreadInput() -> Bool {
    var byte: UInt8 = 0
    return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
  }

  private func close() {
    if closed { return }
    closed = true
    timer.stop()
    readSource.cancel()
    writeSource.cancel()
    // As in GCD, a cancel handler waits while its source is suspended or inactive: let each
    // source run again (cancelled, so only its cancel handler runs).
    setReadSource(suspended: false)
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
