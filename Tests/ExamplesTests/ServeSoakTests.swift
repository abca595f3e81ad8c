import Glibc
import TestSupport
import Testing

/// A long mixed workload against `Examples serve` (issue 8): every request must get the right
/// answer, and afterwards the server must be back to its descriptor and object counts, must
/// not have grown its resident memory, and must exit 0 on SIGTERM without a LeakSanitizer
/// report.
///
/// In `make test-leaks` the server is built with AddressSanitizer, so LeakSanitizer scans it
/// at exit and makes the exit status non-zero on a leak (even a single unreachable object); in
/// the plain build the resident-memory bound is the leak check.
@Suite struct ServeSoakTests {
  @Test func longMixedWorkloadLeaksNothing() throws {
    let server = ServeProcess([
      "serve", "--port", "0", "--idle-timeout-ms", "\(SoakPlan.idleTimeout / 1_000_000)",
    ])
    let port = try #require(server.waitForPort(), "no port; stderr: \(server.errorText)")
    let hashes = SoakPlan.expectedHashes()

    // Warm-up: the same mix at the same concurrency, so the pool, the allocator's arenas and
    // the runtime's lazily made descriptors reach their steady state before the baseline.
    let warmUpStart = monotonicNanoseconds()
    let warmUp = runWorkload(
      port: port, rounds: SoakPlan.warmUpRounds, idleBatches: 1, seed: 1, hashes: hashes)
    let warmUpSeconds = seconds(since: warmUpStart)
    // The baseline, with one probe connection open (as at the end) and nothing of the
    // warm-up still held: the server's only custom queues are its connections' (one each),
    // and a reset connection's /hash or /delay keeps its queue and sources until it ends.
    let baseline = settle(port: port, pid: server.pid) { $0.connections == 1 && $0.queues == 1 }
    let before = try #require(baseline.state, "no /stats answer after the warm-up")
    #expect(baseline.reached, "the server did not settle after the warm-up: \(before)")

    let soakStart = monotonicNanoseconds()
    let soak = runWorkload(
      port: port, rounds: SoakPlan.rounds, idleBatches: SoakPlan.idleBatches, seed: 2,
      hashes: hashes)
    let soakSeconds = seconds(since: soakStart)
    // Back to the baseline: one connection (the probe, as at the baseline), the same open
    // descriptors, queues, sources and watches. Connections close asynchronously after the
    // clients, so this polls (with a deadline) rather than reading once.
    let end = settle(port: port, pid: server.pid) { $0.sameCounts(as: before) }
    let after = try #require(end.state, "no /stats answer after the soak")

    // Graceful shutdown with the probe open and idle: the server closes it and exits. (A
    // request sent just before the signal could be closed unread, legitimately, if the
    // server drains before reading it; ServeTests checks the request in flight.)
    let lastProbe = try #require(end.probe)
    server.send(SIGTERM)
    #expect(lastProbe.readsEndOfFile())
    let status = server.waitForExit()
    let errors = server.errorText

    let requests = warmUp.answered + soak.answered
    let sanitized = addressSanitizerIsLinked() || threadSanitizerIsLinked()
    print(
      "serve soak: \(requests) requests answered (\(warmUp.answered) warm-up in "
        + "\(format(warmUpSeconds)) s, \(soak.answered) soak in \(format(soakSeconds)) s), "
        + "\(warmUp.abandoned + soak.abandoned) abandoned by resets, "
        + "\(warmUp.connections + soak.connections) connections, "
        + "\(warmUp.idleCloses + soak.idleCloses) idle closes, "
        + "\(warmUp.idleRetries + soak.idleRetries) idle retries; "
        + "VmRSS \(before.residentKilobytes) kB -> \(after.residentKilobytes) kB "
        + "(\(after.residentKilobytes - before.residentKilobytes) kB, bound "
        + (sanitized ? "off under sanitizers" : "\(SoakPlan.residentGrowthBoundKilobytes) kB")
        + "); "
        + "fds \(before.descriptors) -> \(after.descriptors); queues \(before.queues) -> "
        + "\(after.queues); sources \(before.sources) -> \(after.sources); pool threads "
        + "\(before.poolThreads) -> \(after.poolThreads); exit \(status)")

    // Every request the plan sent expecting an answer got exactly the right one.
    for tally in [warmUp, soak] {
      #expect(tally.failures.isEmpty, "\(tally.failureCount) failures: \(tally.failures)")
    }
    #expect(warmUp.expected == SoakPlan.answers(rounds: SoakPlan.warmUpRounds, idleBatches: 1))
    #expect(
      soak.expected
        == SoakPlan.answers(rounds: SoakPlan.rounds, idleBatches: SoakPlan.idleBatches))
    #expect(warmUp.answered == warmUp.expected && soak.answered == soak.expected)
    #expect(soak.idleCloses == SoakPlan.idleBatches * SoakPlan.idleConnectionsPerBatch)

    // No descriptor or object leak: the counts came back to the baseline's.
    #expect(after.connections == 1)
    #expect(after.descriptors == before.descriptors, "descriptors leaked")
    #expect(after.queues == before.queues, "queues leaked")
    #expect(after.sources == before.sources, "sources leaked")
    #expect(after.watches == before.watches, "fd watches leaked")

    // Resident memory. Under AddressSanitizer the figure means nothing (freed memory sits in
    // a quarantine of up to 256 MB, plus shadow pages), and LeakSanitizer is the check; under
    // ThreadSanitizer its shadow and per-thread history grow with the memory and the threads
    // the run touches (a TSan run grew 3.8 MB once). The plain and release runs check it.
    if !sanitized {
      #expect(
        after.residentKilobytes - before.residentKilobytes
          <= SoakPlan.residentGrowthBoundKilobytes,
        "VmRSS grew from \(before.residentKilobytes) kB to \(after.residentKilobytes) kB")
    }

    // Exit 0 after SIGTERM; under ASan a leak makes it non-zero and prints a report.
    #expect(status == 0, "exit status \(status); stderr: \(errors.prefix(4000))")
    #expect(!errors.contains("LeakSanitizer"), "\(errors.prefix(4000))")
    #expect(!errors.contains("AddressSanitizer"), "\(errors.prefix(4000))")
    #expect(server.outputText.contains("stopped cleanly"))
  }
}

// MARK: - The plan

/// Sizes of the soak: about 20,000 answered requests at scale 1. Scaled by
/// `LOOPDISPATCH_SOAK_SCALE` when set (`make test-leaks` sets 1: the leak check wants the long
/// run even though the other suites shrink there), else by `LOOPDISPATCH_TEST_SCALE`.
private enum SoakPlan {
  /// Client threads running rounds (plus one thread for idle connections).
  static let threads = 4
  static let warmUpRounds = max(1, soakScaled(12))
  static let rounds = max(1, soakScaled(70))
  static let idleBatches = max(2, soakScaled(8))

  private static func soakScaled(_ size: Int) -> Int {
    guard let raw = getenv("LOOPDISPATCH_SOAK_SCALE"), let scale = Double(String(cString: raw)),
      scale > 0
    else { return scaled(size) }
    return Int(Double(size) * scale)
  }

  /// The server's idle timeout (`--idle-timeout-ms`), in nanoseconds. Short, so idle
  /// connections are closed quickly; keep-alive clients that are delayed this long by a busy
  /// machine reconnect (see `SoakClient.run`).
  static let idleTimeout: UInt64 = 400_000_000

  /// Answers one round of one thread expects: keep-alive 30, pipelined 12 + 8, short
  /// connections 6, malformed 3 + 1, reset 1, stalled reader 2.
  static let answersPerRound = 30 + 20 + 6 + 4 + 1 + 2
  /// Idle connections per batch, of which the first `idleRequestsPerBatch` make one request.
  static let idleConnectionsPerBatch = 12
  static let idleRequestsPerBatch = 9

  static func answers(rounds: Int, idleBatches: Int) -> Int {
    threads * rounds * answersPerRound + idleBatches * idleRequestsPerBatch
  }

  /// How much the server's VmRSS may grow between the warm-up and the end of the soak.
  ///
  /// At scale 1 the server handles about 20,000 requests after the baseline (17,712 answered,
  /// and the stalled readers' unread /metrics). Without a leak the growth measured on the
  /// 2-core machine, idle or with the cores busy with other work, was 0.5 to 1.6 MB, and it
  /// does not scale with the requests (1.1 MB at scale 3, for 53,000): malloc's per-thread
  /// arenas keep a higher high-water mark when the server falls behind and more connections
  /// are open at once. With a deliberate leak in `Connection.handle` (one object holding an
  /// array) the growth was 3.9 MB for about 208 bytes of heap blocks per request, 2.8 MB for
  /// about 144. The bound, 3 MB, is about twice the worst growth seen without a leak and
  /// catches a leak from about 170 bytes per request at scale 1. At smaller scales a slow
  /// leak can pass this check; the AddressSanitizer run's LeakSanitizer catches an
  /// unreachable block of any size.
  static let residentGrowthBoundKilobytes = 3072

  /// /hash sizes, small (answered at once) to large (milliseconds on the pool).
  static let hashSizes = [0, 1, 10, 1000, 65_536, 200_000]

  /// The expected digest of every size in `hashSizes` (the server's FNV-1a, recomputed).
  static func expectedHashes() -> [Int: String] {
    var table: [Int: String] = [:]
    for size in hashSizes {
      var hash: UInt64 = 0xcbf2_9ce4_8422_2325
      for index in 0..<size {
        hash ^= UInt64(truncatingIfNeeded: index &* 31 &+ 7)
        hash = hash &* 0x0000_0100_0000_01b3
      }
      table[size] = String(hash, radix: 16)
    }
    return table
  }

  /// Requests the server must refuse with 400 (then close), and the 431 and 501 cases.
  static let malformed: [(request: String, status: Int)] = [
    ("GARBAGE\r\n\r\n", 400),
    ("GET / HTTP/2.0\r\n\r\n", 400),
    ("GET / HTTP/1.1\r\nHost: t\r\nNoColonHere\r\n\r\n", 400),
    ("get / HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400),
    ("GET / HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n", 400),
    (
      "GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + String(repeating: "b", count: 9000) + "\r\n\r\n", 431
    ),
    ("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
  ]
}

/// One request and the answer it must get.
private struct Exchange {
  var request: String
  var status = 200
  /// The exact body, or nil to check `bodyMarkers` only.
  var body: String?
  var bodyMarkers: [String] = []
  var contentTypePrefix = "text/plain; charset=utf-8"
  var keepAlive: Bool

  /// A GET (or a POST with `body`) of `target`; a closing request is an HTTP/1.1 one with
  /// `Connection: close` or, when `legacy`, a bare HTTP/1.0 one.
  static func request(
    _ target: String, keepAlive: Bool, legacy: Bool = false, body: String? = nil
  ) -> String {
    var text = (body == nil ? "GET " : "POST ") + target
    text += keepAlive || !legacy ? " HTTP/1.1\r\nHost: soak\r\n" : " HTTP/1.0\r\n"
    if !keepAlive && !legacy { text += "Connection: close\r\n" }
    if let body {
      text += "Content-Length: \(body.utf8.count)\r\n\r\n" + body
    } else {
      text += "\r\n"
    }
    return text
  }

  /// Why `response` is not the expected answer, or nil if it is.
  func problem(with response: (status: Int, headers: [String: String], body: String)) -> String? {
    let connection = keepAlive ? "keep-alive" : "close"
    if response.status != status { return "status \(response.status), expected \(status)" }
    if response.headers["connection"] != connection {
      return "connection \(response.headers["connection"] ?? "none"), expected \(connection)"
    }
    if response.headers["content-type"]?.hasPrefix(contentTypePrefix) != true {
      return "content-type \(response.headers["content-type"] ?? "none")"
    }
    if let body, response.body != body { return "body \(response.body.debugDescription)" }
    for marker in bodyMarkers where !response.body.contains(marker) {
      return "body without \(marker.debugDescription): \(response.body.prefix(200))"
    }
    return nil
  }

  var summary: String { String(request.prefix { $0 != "\r" }.prefix(60)) }
}

// MARK: - Clients

/// Sums of what the clients saw.
private struct Tally: Sendable {
  /// Answers the plan expected, and how many came back right.
  var expected = 0
  var answered = 0
  /// Requests deliberately cut off by a client's reset (no answer expected).
  var abandoned = 0
  var connections = 0
  var idleCloses = 0
  /// Keep-alive connections the server closed for idleness while the client was delayed,
  /// reopened and asked again.
  var idleRetries = 0
  var failureCount = 0
  var failures: [String] = []

  mutating func merge(_ other: Tally) {
    expected += other.expected
    answered += other.answered
    abandoned += other.abandoned
    connections += other.connections
    idleCloses += other.idleCloses
    idleRetries += other.idleRetries
    failureCount += other.failureCount
    failures += other.failures.prefix(max(0, 20 - failures.count))
  }
}

/// A connection and when the server last had reason to restart its idle timer (the client's
/// last write, or its connect).
private final class Link {
  private(set) var client: ServeClient
  private(set) var quietSince: UInt64
  private let port: UInt16
  private let receiveBuffer: Int32?

  init?(port: UInt16, receiveBuffer: Int32? = nil) {
    self.port = port
    self.receiveBuffer = receiveBuffer
    quietSince = monotonicNanoseconds()
    guard let client = ServeClient(port: port, receiveBuffer: receiveBuffer) else { return nil }
    self.client = client
    Link.noDelay(client)
  }

  func send(_ text: String) {
    quietSince = monotonicNanoseconds()
    client.send(text)
  }

  /// Replaces the connection with a new one.
  func reconnect() -> Bool {
    quietSince = monotonicNanoseconds()
    guard let fresh = ServeClient(port: port, receiveBuffer: receiveBuffer) else { return false }
    client = fresh
    Link.noDelay(fresh)
    return true
  }

  /// Small writes (split requests) go out at once rather than waiting for delayed ACKs.
  private static func noDelay(_ client: ServeClient) {
    var one: Int32 = 1
    setsockopt(
      client.fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
  }
}

/// One thread's client side: runs rounds of episodes and tallies the answers.
private final class SoakClient {
  private let port: UInt16
  private let hashes: [Int: String]
  private var random: SoakRandom
  private(set) var tally = Tally()

  init(port: UInt16, seed: Int, hashes: [Int: String]) {
    self.port = port
    self.hashes = hashes
    random = SoakRandom(seed: seed)
  }

  /// One round: `answersPerRound` answers over about ten connections.
  func round(_ index: Int) {
    keepAliveEpisode()
    pipelinedEpisode()
    for _ in 0..<6 { shortConnection() }
    malformedEpisode(index)
    resetEpisode(index)
    stalledReaderEpisode()
  }

  /// 30 sequential requests on one connection, a fifth of them written in two pieces; the
  /// last one closes the connection half of the time (otherwise the client closes it).
  private func keepAliveEpisode() {
    guard let link = connect() else { return }
    let serverCloses = random.next(2) == 0
    for index in 0..<30 {
      let closing = serverCloses && index == 29
      if !run([randomExchange(keepAlive: !closing)], split: random.next(5) == 0, on: link) {
        return
      }
    }
    if serverCloses { expectClose(link, "keep-alive") }
  }

  /// 12 pipelined requests in one write, then 8 more whose last closes the connection.
  private func pipelinedEpisode() {
    guard let link = connect() else { return }
    guard run((0..<12).map { _ in randomExchange(keepAlive: true) }, on: link) else { return }
    var batch = (0..<7).map { _ in randomExchange(keepAlive: true) }
    batch.append(randomExchange(keepAlive: false))
    guard run(batch, on: link) else { return }
    expectClose(link, "pipelined")
  }

  /// One request and a close (HTTP/1.1 `Connection: close` or HTTP/1.0).
  private func shortConnection() {
    guard let link = connect() else { return }
    guard run([randomExchange(keepAlive: false)], on: link) else { return }
    expectClose(link, "short connection")
  }

  /// Three good requests pipelined with a bad one: three answers, the refusal, a close.
  private func malformedEpisode(_ round: Int) {
    guard let link = connect() else { return }
    var batch = (0..<3).map { _ in randomExchange(keepAlive: true) }
    let bad = SoakPlan.malformed[round % SoakPlan.malformed.count]
    batch.append(
      Exchange(request: bad.request, status: bad.status, bodyMarkers: [], keepAlive: false))
    guard run(batch, on: link) else { return }
    expectClose(link, "malformed")
  }

  /// One answered request, then a request cut off by a TCP reset: half a head, a /delay or a
  /// large /hash in flight.
  private func resetEpisode(_ round: Int) {
    guard let link = connect() else { return }
    guard run([randomExchange(keepAlive: true)], on: link) else { return }
    switch round % 3 {
    case 0: link.send("GET / HTTP/1.1\r\nHost: parti")
    case 1: link.send("GET /delay?ms=5 HTTP/1.1\r\nHost: t\r\n\r\n")
    default:
      link.send("GET /hash?bytes=200000 HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\nHo")
    }
    link.client.resetOnRelease()
    tally.abandoned += 1
  }

  /// 128 pipelined /metrics (about 220 kB of answers) into a 4 kB receive buffer, more than
  /// the loopback socket buffers hold (64 are not), so the server's sends fail with EAGAIN
  /// and its write source waits for room; two answers are read, then the client resets.
  private func stalledReaderEpisode() {
    guard let link = connect(receiveBuffer: 4096) else { return }
    let metrics = (0..<2).map { _ in metricsExchange(keepAlive: true) }
    let unread = String(repeating: metrics[0].request, count: 126)
    guard run(metrics, then: unread, on: link) else { return }
    link.client.resetOnRelease()
    tally.abandoned += 126
  }

  /// A batch of idle connections, nine after one request and three silent: each must be closed
  /// by the server's idle timer, never before the timeout has passed since the client's
  /// last write (or connect). Waiting for those closes is the soak's only pause, about one
  /// idle timeout per batch, spent blocked in recv (the server's close ends it).
  func idleBatch() {
    var links: [Link] = []
    for index in 0..<SoakPlan.idleConnectionsPerBatch {
      guard let link = connect() else { continue }
      if index < SoakPlan.idleRequestsPerBatch {
        guard run([randomExchange(keepAlive: true, quick: true)], on: link) else { continue }
      }
      links.append(link)
    }
    for link in links {
      guard link.client.readsEndOfFile() else {
        fail("an idle connection was not closed by the server within 10 s")
        continue
      }
      let waited = monotonicNanoseconds() - link.quietSince
      if waited < SoakPlan.idleTimeout {
        fail("an idle connection was closed after \(waited / 1_000_000) ms")
      }
      tally.idleCloses += 1
    }
  }

  // MARK: Requests

  /// Writes `exchanges` (pipelined when several) and `unread` in one write (in two when
  /// `split`), then checks each answer in order.
  ///
  /// If no answer at all comes back and the connection had been quiet for the idle timeout,
  /// the server may have closed it for idleness just before the write (the client thread
  /// was delayed by a busy machine): the batch is sent once more on a new connection. The
  /// server's timer never fires early, so a close sooner than that is a failure.
  @discardableResult
  private func run(
    _ exchanges: [Exchange], then unread: String = "", split: Bool = false, on link: Link
  ) -> Bool {
    tally.expected += exchanges.count
    let text = exchanges.map(\.request).joined() + unread
    var retried = false
    attempt: while true {
      let quietSince = link.quietSince
      if split {
        let half = text.utf8.count / 2
        link.send(String(decoding: text.utf8.prefix(half), as: UTF8.self))
        link.send(String(decoding: text.utf8.dropFirst(half), as: UTF8.self))
      } else {
        link.send(text)
      }
      for (index, exchange) in exchanges.enumerated() {
        guard let response = link.client.readResponse() else {
          let quiet = monotonicNanoseconds() - quietSince
          if index == 0 && !retried && !link.client.hasUnreadBytes
            && quiet >= SoakPlan.idleTimeout
          {
            retried = true
            tally.idleRetries += 1
            guard link.reconnect() else { break attempt }
            tally.connections += 1
            continue attempt
          }
          fail("\(exchange.summary): no answer (request \(index + 1) of \(exchanges.count))")
          return false
        }
        if let problem = exchange.problem(with: response) {
          fail("\(exchange.summary): \(problem)")
          return false
        }
        tally.answered += 1
      }
      return true
    }
    fail("could not reconnect after an idle close")
    return false
  }

  private func expectClose(_ link: Link, _ what: String) {
    if !link.client.readsEndOfFile() { fail("\(what): the server did not close") }
  }

  private func connect(receiveBuffer: Int32? = nil) -> Link? {
    guard let link = Link(port: port, receiveBuffer: receiveBuffer) else {
      fail("connect failed: errno \(errno)")
      return nil
    }
    tally.connections += 1
    return link
  }

  private func fail(_ what: String) {
    tally.failureCount += 1
    if tally.failures.count < 20 { tally.failures.append(what) }
  }

  /// A random request: mostly `/` and `/hash` (pool work), some `/delay`, `/stats`,
  /// `/metrics`, a POST with a body, a bad /hash argument (400, connection kept) and a 404.
  /// `quick` leaves out the slow ones.
  private func randomExchange(keepAlive: Bool, quick: Bool = false) -> Exchange {
    let legacy = !keepAlive && random.next(2) == 0
    func plain(_ target: String, _ body: String, status: Int = 200) -> Exchange {
      Exchange(
        request: Exchange.request(target, keepAlive: keepAlive, legacy: legacy), status: status,
        body: body, keepAlive: keepAlive)
    }
    switch random.next(quick ? 6 : 20) {
    case 0..<2:
      return plain("/", "hello from LoopDispatch\n")
    case 2:
      return metricsExchange(keepAlive: keepAlive, legacy: legacy)
    case 3:
      return Exchange(
        request: Exchange.request("/stats", keepAlive: keepAlive, legacy: legacy),
        bodyMarkers: ["pool_threads ", "\nconnections "], keepAlive: keepAlive)
    case 4:
      let target = "/nope/\(random.next(1000))"
      return plain(target, "no route for \(target)\n", status: 404)
    case 5..<8:
      return plain("/", "hello from LoopDispatch\n")
    case 8..<13:
      let size = SoakPlan.hashSizes[random.next(SoakPlan.hashSizes.count)]
      return plain("/hash?bytes=\(size)", "fnv1a(\(size) bytes) = \(hashes[size]!)\n")
    case 13..<15:
      let milliseconds = random.next(4)
      return plain("/delay?ms=\(milliseconds)", "waited \(milliseconds) ms\n")
    case 15:
      return plain("/hash?bytes=lots", "usage: /hash?bytes=N (N ≤ 64 MiB)\n", status: 400)
    case 16:
      return Exchange(
        request: Exchange.request("/", keepAlive: keepAlive, legacy: legacy, body: "ping=1"),
        body: "hello from LoopDispatch\n", keepAlive: keepAlive)
    case 17:
      return metricsExchange(keepAlive: keepAlive, legacy: legacy)
    default:
      return plain("/", "hello from LoopDispatch\n")
    }
  }

  private func metricsExchange(keepAlive: Bool, legacy: Bool = false) -> Exchange {
    Exchange(
      request: Exchange.request("/metrics", keepAlive: keepAlive, legacy: legacy),
      bodyMarkers: ["# TYPE loopdispatch_pool_threads gauge\n", "\nloopdispatch_sources "],
      contentTypePrefix: "text/plain; version=0.0.4", keepAlive: keepAlive)
  }
}

/// Runs `rounds` rounds on each of `SoakPlan.threads` client threads and `idleBatches` idle
/// batches on one more, all at once, and returns their summed tallies.
private func runWorkload(
  port: UInt16, rounds: Int, idleBatches: Int, seed: Int, hashes: [Int: String]
) -> Tally {
  let total = Locked(Tally())
  var threads: [pthread_t] = []
  for index in 0...SoakPlan.threads {
    threads.append(
      startThread {
        let client = SoakClient(port: port, seed: seed * 100 + index, hashes: hashes)
        if index == SoakPlan.threads {
          for _ in 0..<idleBatches { client.idleBatch() }
        } else {
          for round in 0..<rounds { client.round(round) }
        }
        let tally = client.tally
        total.withLock { $0.merge(tally) }
      })
  }
  for thread in threads { pthread_join(thread, nil) }
  return total.value
}

/// A small deterministic pseudo-random generator (xorshift64*), one per client.
private struct SoakRandom {
  private var state: UInt64

  init(seed: Int) { state = 0x9E37_79B9_7F4A_7C15 &* UInt64(seed + 1) }

  /// A value in `0..<bound`.
  mutating func next(_ bound: Int) -> Int {
    state ^= state >> 12
    state ^= state << 25
    state ^= state >> 27
    return Int((state &* 0x2545_F491_4F6C_DD1D) >> 33) % bound
  }
}

// MARK: - The server's state

/// What the server looks like from outside (/proc) and from its /stats page.
private struct ServerState {
  var residentKilobytes = 0
  var descriptors = 0
  var connections = -1
  var queues = -1
  var sources = -1
  var watches = -1
  var poolThreads = -1

  func sameCounts(as other: ServerState) -> Bool {
    connections == 1 && descriptors == other.descriptors && queues == other.queues
      && sources == other.sources && watches == other.watches
  }
}

/// What `settle` saw: the last state read (nil if /stats did not answer), whether the
/// condition held, and the probe connection, still open.
private struct Settled {
  var state: ServerState?
  var reached = false
  var probe: ServeClient?
}

/// Opens a probe connection and asks /stats on it until `done` holds for the state (polling
/// every 10 ms, for up to 20 s).
private func settle(port: UInt16, pid: pid_t, until done: (ServerState) -> Bool) -> Settled {
  guard let probe = ServeClient(port: port) else { return Settled() }
  let deadline = monotonicNanoseconds() + 20_000_000_000
  var settled = Settled(probe: probe)
  while true {
    probe.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n")
    guard let response = probe.readResponse(), response.status == 200 else {
      settled.probe = nil
      return settled
    }
    var state = ServerState()
    for line in response.body.split(separator: "\n") {
      let parts = line.split(separator: " ")
      guard parts.count == 2, let value = Int(parts[1]) else { continue }
      switch parts[0] {
      case "connections": state.connections = value
      case "queues": state.queues = value
      case "sources": state.sources = value
      case "watches_registered": state.watches = value
      case "pool_threads": state.poolThreads = value
      default: break
      }
    }
    state.descriptors = openDescriptors(of: pid)
    state.residentKilobytes = residentKilobytes(of: pid)
    settled.state = state
    settled.reached = done(state)
    if settled.reached || monotonicNanoseconds() > deadline { return settled }
    var pause = timespec(tv_sec: 0, tv_nsec: 10_000_000)
    nanosleep(&pause, nil)
  }
}

/// The number of entries in /proc/<pid>/fd.
private func openDescriptors(of pid: pid_t) -> Int {
  guard let directory = opendir("/proc/\(pid)/fd") else { return -1 }
  defer { closedir(directory) }
  var count = 0
  while let entry = readdir(directory) {
    let first = withUnsafeBytes(of: entry.pointee.d_name) { $0[0] }
    if first != UInt8(ascii: ".") { count += 1 }
  }
  return count
}

/// VmRSS from /proc/<pid>/status, in kB.
private func residentKilobytes(of pid: pid_t) -> Int {
  processStatusKilobytes(of: pid, field: "VmRSS")
}

/// Whether this process (and so the server, built by the same command) has AddressSanitizer.
private func addressSanitizerIsLinked() -> Bool { dlsym(nil, "__asan_init") != nil }

/// Whether this process (and so the server) has ThreadSanitizer.
private func threadSanitizerIsLinked() -> Bool { dlsym(nil, "__tsan_init") != nil }

// MARK: - Small helpers

private func monotonicNanoseconds() -> UInt64 {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

private func seconds(since start: UInt64) -> Double {
  Double(monotonicNanoseconds() - start) / 1e9
}

private func format(_ seconds: Double) -> String {
  let tenths = Int((seconds * 10).rounded())
  return "\(tenths / 10).\(tenths % 10)"
}
