import Glibc
import TestSupport
import Testing

/// The `serve` example over loopback, with a real client.
@Suite struct ServeTests {
  /// Starts `Examples serve --port 0` and returns it with the port it printed.
  private func startServer(_ extra: [String] = []) -> (BackgroundProgram, UInt16)? {
    let server = BackgroundProgram("Examples", ["serve", "--port", "0"] + extra)
    guard let line = server.readLine(containing: "listening on http://127.0.0.1:"),
      let portText = line.split(separator: ":").last?.split(separator: "/").first,
      let port = UInt16(portText)
    else { return nil }
    return (server, port)
  }

  @Test func answersKeepAliveRequestsAndShutsDownCleanly() throws {
    let (server, port) = try #require(startServer())
    let client = try #require(ServeClient(port: port))
    for _ in 0..<3 {
      client.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      let response = try #require(client.readResponse())
      #expect(response.status == 200)
      #expect(response.body == "hello from LoopDispatch\n")
      #expect(response.headers["connection"] == "keep-alive")
    }
    // Pipelined requests on the same connection are answered in order.
    client.send(
      "GET /hash?bytes=10 HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(client.readResponse()?.body == "fnv1a(10 bytes) = b4b4221e5bfb6820\n")
    #expect(client.readResponse()?.status == 404)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func hashRunsOnTheWorkerPool() throws {
    let (server, port) = try #require(startServer())
    let client = try #require(ServeClient(port: port))
    client.send("GET /hash?bytes=1000000 HTTP/1.1\r\nHost: t\r\n\r\n")
    let response = try #require(client.readResponse())
    #expect(response.status == 200)
    #expect(response.body.hasPrefix("fnv1a(1000000 bytes) = "))
    client.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n")
    let stats = try #require(client.readResponse())
    #expect(stats.body.contains("pool_threads "))
    #expect(stats.body.contains("connections 1"))
    #expect(stats.body.contains("sources "))
    // This connection's queue ran the /hash request and is running this one.
    #expect(stats.body.contains("queue \"serve.conn\" kind serial queues 1 submitted "))
    #expect(stats.body.contains("main_loop_events "))
    client.send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
    let metrics = try #require(client.readResponse())
    #expect(metrics.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
    #expect(metrics.body.contains("# TYPE loopdispatch_pool_threads gauge\n"))
    #expect(metrics.body.contains("\nloopdispatch_pool_jobs_started_total "))
    #expect(metrics.body.contains("# TYPE loopdispatch_queue_max_wait_seconds gauge\n"))
    #expect(metrics.body.contains("\nloopdispatch_queue_submitted_total{queue=\"serve.conn\"} "))
    #expect(metrics.body.contains("\nloopdispatch_queue_depth{queue=\"loopdispatch.main\"} "))
    server.send(SIGINT)
    #expect(server.waitForExit() == 0)
  }

  @Test func malformedRequestsGet400AndAClose() throws {
    let (server, port) = try #require(startServer())
    let client = try #require(ServeClient(port: port))
    client.send("GARBAGE\r\n\r\n")
    #expect(client.readResponse()?.status == 400)
    #expect(client.readsEndOfFile())
    let chunked = try #require(ServeClient(port: port))
    chunked.send("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    #expect(chunked.readResponse()?.status == 501)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func oversizedHeadersGet431() throws {
    let (server, port) = try #require(startServer())
    let client = try #require(ServeClient(port: port))
    client.send(
      "GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + String(repeating: "a", count: 20_000) + "\r\n\r\n")
    let response = try #require(client.readResponse())
    #expect(response.status == 431)
    #expect(client.readsEndOfFile())
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func clientResetsNeverCrashTheServer() throws {
    let (server, port) = try #require(startServer())
    for index in 0..<50 {
      let client = try #require(ServeClient(port: port))
      if index % 2 == 0 { client.send("GET /hash?bytes=200000 HTTP/1.1\r\nHost: t\r\n\r\n") }
      client.send("GET / HTTP/1.1\r\nHost: partial")
      client.reset()
    }
    let survivor = try #require(ServeClient(port: port))
    survivor.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(survivor.readResponse()?.status == 200)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func manyConcurrentClients() throws {
    let (server, port) = try #require(startServer())
    let clients = (0..<64).compactMap { _ in ServeClient(port: port) }
    #expect(clients.count == 64)
    for round in 0..<10 {
      for client in clients { client.send("GET /hash?bytes=\(round) HTTP/1.1\r\nHost: t\r\n\r\n") }
      var ok = 0
      for client in clients where client.readResponse()?.status == 200 { ok += 1 }
      #expect(ok == clients.count)
    }
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }

  @Test func gracefulShutdownFinishesTheRequestInFlight() throws {
    let (server, port) = try #require(startServer())
    let busy = try #require(ServeClient(port: port))
    let idle = try #require(ServeClient(port: port))
    idle.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    #expect(idle.readResponse()?.status == 200)
    busy.send("GET /delay?ms=300 HTTP/1.1\r\nHost: t\r\n\r\n")
    // Make sure the request has reached the server before signalling: it was sent before the
    // probe, which is answered. (Its readiness may not have been handled yet: a draining
    // connection reads and answers a request that has arrived.)
    let probe = try #require(ServeClient(port: port))
    probe.send("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    #expect(probe.readResponse()?.status == 200)
    server.send(SIGTERM)
    let response = try #require(busy.readResponse())
    #expect(response.status == 200)
    #expect(response.body == "waited 300 ms\n")
    #expect(response.headers["connection"] == "close")
    #expect(busy.readsEndOfFile())
    #expect(idle.readsEndOfFile())
    #expect(server.waitForExit() == 0)
    #expect(ServeClient(port: port) == nil)  // No longer accepting.
  }

  @Test func idleConnectionsTimeOut() throws {
    let (server, port) = try #require(startServer(["--idle-timeout-ms", "100"]))
    let client = try #require(ServeClient(port: port))
    let start = time(nil)
    #expect(client.readsEndOfFile())  // Closed by the server's idle timer.
    #expect(time(nil) - start < 10)
    server.send(SIGTERM)
    #expect(server.waitForExit() == 0)
  }
}
