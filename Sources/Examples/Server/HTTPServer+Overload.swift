import ExampleHTTP
import Glibc
import LoopDispatch

/// The accept path when the process is out of descriptors (EMFILE, or ENFILE for the system).
///
/// The listening socket is level-triggered: a client waiting in the backlog keeps it readable,
/// so an accept that fails and returns would be called again at once, for ever (a full core
/// and ~600,000 log lines a second before this existed). Instead:
/// 1. The failed accept is counted (`refusedAccepts`) and starts an episode if none is open.
/// 2. Waiting clients are answered instead of left hanging: the reserve descriptor (`/dev/null`,
///    opened at start) is closed, which frees one slot; the client is accepted into it, sent
///    `503 Service Unavailable` with `Connection: close` and `Retry-After`, and closed; the
///    reserve is opened again. Repeated while clients wait (at most `shedBatch` per pass),
///    each counted in `overloadAnswers`.
/// 3. The accept source is suspended until a connection closes (a descriptor is free again)
///    or `acceptBackoff` passes, whichever comes first; then accepting resumes and, if still
///    out of descriptors, goes back to step 1.
/// 4. The first accept that succeeds ends the episode with one log line: how long it lasted,
///    how many accepts were refused and how many clients got 503. An episode longer than
///    `reportInterval` also logs one line per interval, so it is never silent.
extension HTTPServer {
  /// How long accepting pauses after running out of descriptors (unless a connection closes).
  static let acceptBackoff = Duration.milliseconds(75)
  /// Clients answered 503 per pass at most: the main queue stays responsive.
  static let shedBatch = 64
  /// An episode still going on logs a line this often.
  static let reportInterval = Duration.seconds(10)

  /// The out-of-descriptors state. Only touched on the main queue.
  struct OverloadState {
    /// Whether the accept source is suspended for the backoff.
    var acceptsPaused = false
    /// Ends the backoff; cancelled when a connection closes first.
    var backoffTimer: DelayedWork?
    /// The reserve descriptor (`/dev/null`), or -1 while it is in use or could not be opened.
    var reserve: Int32 = -1
    /// When the current episode began (nil: accepts are succeeding).
    var episodeStart: Deadline?
    /// When the episode last logged a line.
    var lastReport = Deadline.now
    var refusedInEpisode = 0
    var answeredInEpisode = 0
  }

  /// Makes the runtime's I/O driver start now, while descriptors are plentiful: it opens its
  /// own (an epoll set, a timer) when the first descriptor source of a non-main queue is
  /// registered, which would otherwise be the first connection's, after the accept loop may
  /// have taken every descriptor; every connection's sources would then fail to register.
  /// A throwaway read source on a pipe does it; start() waits for its registration.
  func startIODriver() {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { return }
    let (readEnd, writeEnd) = (fds[0], fds[1])
    let registered = Semaphore(value: 0)
    let probeSource = try? ReadSource(fd: readEnd, queue: Queue(label: "serve.warm-up"))
    guard let probeSource else {
      close(readEnd)
      close(writeEnd)
      return
    }
    probeSource.setRegistrationHandler { registered.signal() }
    probeSource.setCancelHandler {
      close(readEnd)
      close(writeEnd)
    }
    probeSource.activate()
    _ = registered.wait(timeout: .now + .seconds(5))
    probeSource.cancel()
  }

  /// Opens the reserve descriptor if it is not open. Main queue.
  func openReserveDescriptor() {
    if overload.reserve < 0 { overload.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC) }
  }

  func closeReserveDescriptor() {
    if overload.reserve >= 0 { close(overload.reserve) }
    overload.reserve = -1
  }

  /// `accept` failed with `code` (EMFILE or ENFILE). Main queue.
  func outOfDescriptors(_ code: Int32) {
    refusedAccepts.add(1, ordering: .relaxed)
    overload.refusedInEpisode += 1
    let now = Deadline.now
    if overload.episodeStart == nil {
      overload.episodeStart = now
      overload.lastReport = now
    } else if now >= overload.lastReport + Self.reportInterval {
      overload.lastReport = now
      Log.error("serve: accept: still out of descriptors (\(describe(code))); \(episodeSummary)")
    }
    shedWaitingClients()
    pauseAccepts()
  }

  /// Answers waiting clients 503 through the reserve descriptor's slot (step 2).
  private func shedWaitingClients() {
    for _ in 0..<Self.shedBatch {
      guard overload.reserve >= 0 else { return }
      closeReserveDescriptor()
      let fd = accept(listener, nil, nil)
      if fd >= 0 {
        answerOverloaded(fd)
        close(fd)
      }
      openReserveDescriptor()
      if fd < 0 { return }  // Nobody else waits (or the slot was taken meanwhile).
    }
  }

  /// Sends the 503 (it fits in an empty socket buffer; a client that has gone gets nothing).
  private func answerOverloaded(_ fd: Int32) {
    let body = "server out of file descriptors; retry later\n"
    let response = Array(
      ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\nRetry-After: 1\r\n"
        + "Server: LoopDispatch-Examples\r\n\r\n" + body).utf8)
    let sent = response.withUnsafeBytes {
      send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
    }
    // Read what the request sent so far: closing with unread input sends a reset, which may
    // reach the client before it has read the answer.
    var scratch = [UInt8](repeating: 0, count: 4096)
    for _ in 0..<4 where recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT)) > 0 {}
    if sent > 0 {
      overloadAnswers.add(1, ordering: .relaxed)
      overload.answeredInEpisode += 1
    }
  }

  /// Step 3: suspends the accept source for the backoff.
  private func pauseAccepts() {
    if overload.acceptsPaused || draining { return }
    overload.acceptsPaused = true
    acceptSource.suspend()
    overload.backoffTimer = Queue.main.after(Self.acceptBackoff) { [self] in resumeAccepts() }
  }

  /// Ends the backoff. Main queue.
  private func resumeAccepts() {
    guard overload.acceptsPaused else { return }
    overload.acceptsPaused = false
    overload.backoffTimer?.cancel()
    overload.backoffTimer = nil
    openReserveDescriptor()
    acceptSource.resume()
  }

  /// A connection closed: a descriptor is free, so a paused accept resumes now. Main queue.
  func descriptorFreed() {
    if overload.acceptsPaused { resumeAccepts() }
  }

  /// An accept succeeded: ends an episode with its one log line (step 4). Main queue.
  func acceptSucceeded() {
    guard overload.episodeStart != nil else { return }
    Log.error("serve: accept: descriptors available again; \(episodeSummary)")
    overload.episodeStart = nil
    overload.refusedInEpisode = 0
    overload.answeredInEpisode = 0
  }

  private var episodeSummary: String {
    let start = overload.episodeStart ?? .now
    let elapsed = Deadline.now.uptimeNanoseconds - start.uptimeNanoseconds
    return
      "out of descriptors for \(elapsed / 1_000_000) ms: \(overload.refusedInEpisode) "
      + "accept(s) refused, \(overload.answeredInEpisode) client(s) answered 503"
  }

  private func describe(_ code: Int32) -> String { String(cString: strerror(code)) }

  /// Cancels the accept source (its cancel handler closes the listening socket); a source
  /// suspended for the backoff is resumed, since its cancel handler waits while it is
  /// suspended. Main queue.
  func stopAccepting() {
    acceptSource.cancel()
    if overload.acceptsPaused {
      overload.acceptsPaused = false
      overload.backoffTimer?.cancel()
      overload.backoffTimer = nil
      acceptSource.resume()
    }
    if overload.episodeStart != nil {
      Log.error("serve: accept: stopped while \(episodeSummary)")
      overload.episodeStart = nil
    }
  }

  /// The server's own counters in the Prometheus text format, for /metrics.
  var prometheusText: String {
    """
    # HELP serve_accepts_refused_total Accepts that failed for want of a file descriptor.
    # TYPE serve_accepts_refused_total counter
    serve_accepts_refused_total \(refusedAccepts.load(ordering: .relaxed))
    # HELP serve_overload_responses_total Clients answered 503 while out of file descriptors.
    # TYPE serve_overload_responses_total counter
    serve_overload_responses_total \(overloadAnswers.load(ordering: .relaxed))

    """
  }

  /// The server's own counters as /stats lines.
  var statsText: String {
    "accepts_refused \(refusedAccepts.load(ordering: .relaxed))\n"
      + "overload_503 \(overloadAnswers.load(ordering: .relaxed))\n"
  }
}
