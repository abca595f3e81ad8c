// The connection logic of Sources/Examples/Server/Connection.swift (the LoopDispatch `serve`
// example), copied and ported to Apple's Dispatch so that `wrk` compares the two runtimes on the
// same server: same read loop (a fresh 16 KiB buffer per readable event), same parser, same
// responses (the parser, responses and `fnv1a(bytes:)` come from the shared ExampleHTTP
// module), same write-source dance, same backpressure (reading stops while 256 KiB of answers
// wait for the client and resumes once it has taken them), same idle timeout (never while
// answers or a request are pending), same HEAD (no body) and half-close (requests sent before
// the client's FIN are answered, then the connection closes) rules.
// Routes: `/` and `/hash?bytes=N` as in the original, `/delay?ms=N` too; no `/stats` (it
// reports LoopDispatch runtime counters).
import Dispatch
import ExampleHTTP
import Glibc

/// How the idle timeout is implemented; see `--idle-timer` in main.swift.
enum IdleTimerKind {
  /// One `DispatchSourceTimer` per connection, rescheduled after each read: Dispatch's idiom.
  case source
  /// One `asyncAfter` pending per connection; each read only notes the time, and a timer that
  /// fires before the timeout has passed since then is posted again for the rest: the literal
  /// port of LoopDispatch's `serve` (`resetIdleTimer` in its Connection.swift).
  case after
}

/// One client connection. Every mutable property is confined to `queue`, a serial queue of
/// its own: the read and write sources, the idle timer and the completions of CPU work all
/// run there, so the connection needs no lock.
final class Connection: @unchecked Sendable {
  // @unchecked Sendable: mutable state is only touched on `queue` (see above).
  let id: Int
  let fd: Int32
  let queue: DispatchQueue
  private let server: HTTPServer
  private let readSource: any DispatchSourceRead
  private let writeSource: any DispatchSourceWrite
  private let idleTimerSource: (any DispatchSourceTimer)?

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
  /// Whether `readSource` is suspended right now. `readPaused` is cleared for a moment while
  /// `flush` answers buffered requests with the source still suspended; `close()` must know,
  /// since Dispatch runs no cancel handler of a suspended source.
  private var readSourceSuspended = false
  /// The client sent its FIN: what it sent before is still answered, then the connection
  /// closes (as in the LoopDispatch server).
  private var inputEnded = false
  /// True while `processInput` runs: a flush inside it leaves the next request to its loop.
  private var processing = false
  private var idleWorkItem: DispatchWorkItem?
  /// When the connection last read input (`--idle-timer after` measures the timeout from it).
  private var lastActivity = DispatchTime.now()
  private var sourcesLeft = 2

  private enum WriteSourceState { case inactive, active, suspended }

  init(id: Int, fd: Int32, server: HTTPServer) {
    self.id = id
    self.fd = fd
    self.server = server
    queue = DispatchQueue(label: "conn.\(id)")
    readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
    writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
    switch server.idleTimerKind {
    case .source:
      idleTimerSource = DispatchSource.makeTimerSource(queue: queue)
      sourcesLeft = 3
    case .after:
      idleTimerSource = nil
    }
  }

  /// Starts reading. Any thread.
  func start() {
    readSource.setEventHandler { [unowned self] in readable() }
    writeSource.setEventHandler { [unowned self] in flush() }
    readSource.setCancelHandler { [unowned self] in sourceCancelled() }
    writeSource.setCancelHandler { [unowned self] in sourceCancelled() }
    if let idleTimerSource {
      idleTimerSource.setEventHandler { [unowned self] in idleExpired() }
      idleTimerSource.setCancelHandler { [unowned self] in sourceCancelled() }
    }
    queue.async { [self] in
      readSource.activate()
      if let idleTimerSource {
        idleTimerSource.schedule(deadline: .now() + server.idleTimeout)
        idleTimerSource.activate()
      } else {
        resetIdleTimer()
      }
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

  /// Finishes what is in flight, then closes. Connection queue.
  func drain() {
    draining = true
    if !requestInFlight && outputOffset == output.count { close() }
  }

  // MARK: Reading and requests

  private func readable() {
    if readingHeldBack {
      // Backpressure: stop reading until `flush` has sent the answers (a source left running
      // would fire again at once: the socket stays readable).
      if !readPaused {
        readPaused = true
        setReadSource(suspended: true)
      }
      return
    }
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    while !closed && !inputEnded {
      let n = read(fd, &buffer, buffer.count)
      if n > 0 {
        input += buffer[..<n]
        if input.count > Self.maximumBufferedInput { break }  // Parse before reading more.
        continue
      }
      if n == 0 {
        // The peer closed its side: answer what it sent before, then close.
        inputEnded = true
        setReadSource(suspended: true)
        break
      }
      if errno == EINTR { continue }
      if errno == EAGAIN || errno == EWOULDBLOCK { break }
      return close()  // ECONNRESET and other errors: the peer is gone.
    }
    resetIdleTimer()
    processInput()
  }

  private func processInput() {
    if processing { return }
    processing = true
    parseLoop: while !closed && !requestInFlight && !closeWhenFlushed && !outputBacklogged {
      switch HTTPParser.parse(input) {
      case .incomplete:
        break parseLoop
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
    processing = false
    if inputEnded && !closed && !requestInFlight && outputOffset == output.count { close() }
  }

  private func handle(_ request: HTTPRequest) {
    let keepAlive = request.keepAlive && !draining
    // HEAD: the headers GET would send and no body.
    let omitBody = request.method == "HEAD"
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
      DispatchQueue.global().async { [self] in
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
      let delay = Swift.min(Swift.max(milliseconds, 0), 60_000)
      queue.asyncAfter(deadline: .now() + .milliseconds(delay)) { [self] in
        requestInFlight = false
        respond(
          status: 200, reason: "OK", body: "waited \(milliseconds) ms\n", keepAlive: keepAlive,
          omitBody: omitBody)
        processInput()
      }
    default:
      respond(
        status: 404, reason: "Not Found", body: "no route for \(request.path)\n",
        keepAlive: keepAlive, omitBody: omitBody)
    }
  }

  // MARK: Writing

  private func respond(
    status: Int, reason: String, body: String, keepAlive requested: Bool, omitBody: Bool = false
  ) {
    if closed { return }
    // A shutdown that began while the request was in flight closes after this response.
    let keepAlive = requested && !draining
    var response = httpResponse(status: status, reason: reason, body: body, keepAlive: keepAlive)
    if omitBody { response.removeLast(body.utf8.count) }
    output += response
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

  private func resetIdleTimer() {
    if let idleTimerSource {
      idleTimerSource.schedule(deadline: .now() + server.idleTimeout)
      return
    }
    lastActivity = .now()
    if idleWorkItem == nil { scheduleIdleWorkItem(at: lastActivity + server.idleTimeout) }
  }

  private func scheduleIdleWorkItem(at deadline: DispatchTime) {
    let item = DispatchWorkItem { [weak self] in self?.idleExpired() }
    idleWorkItem = item
    queue.asyncAfter(deadline: deadline, execute: item)
  }

  private func idleExpired() {
    if closed { return }
    if idleTimerSource == nil {
      idleWorkItem = nil
      let due = lastActivity + server.idleTimeout
      if DispatchTime.now() < due { return scheduleIdleWorkItem(at: due) }
    }
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
    idleWorkItem?.cancel()
    idleWorkItem = nil
    idleTimerSource?.cancel()
    // Dispatch runs a cancel handler only once the source is active and not suspended (and an
    // inactive or suspended source must not be released), unlike LoopDispatch's sources.
    setReadSource(suspended: false)
    readPaused = false
    readSource.cancel()
    switch writeSourceState {
    case .inactive: writeSource.activate()
    case .suspended: writeSource.resume()
    case .active: break
    }
    writeSourceState = .active
    writeSource.cancel()
  }

  /// Runs on `queue` for each source's cancel handler; the last one closes the socket.
  private func sourceCancelled() {
    sourcesLeft -= 1
    guard sourcesLeft == 0 else { return }
    Glibc.close(fd)
    let id = self.id
    let server = self.server
    DispatchQueue.main.async { server.connectionClosed(id) }
  }
}
