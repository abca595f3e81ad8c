// `NIOServe [--port N] [--idle-timeout-ms N] [--threads N]`: the routes of `Examples serve` that
// scripts/wrk-servers.sh loads, written the usual SwiftNIO way: a MultiThreadedEventLoopGroup
// (System.coreCount event loops unless --threads), `configureHTTPServerPipeline` (NIO's HTTP/1.1
// decoder, encoder, pipelining helper and error handler) and one handler. Routes:
//   /               200 "hello from LoopDispatch\n"
//   /hash?bytes=N   200 "fnv1a(N bytes) = HEX\n" (`fnv1a` of ExampleHTTP, computed inline on the
//                   connection's event loop, as evhttp does; serve computes it on a global
//                   queue); 400 "usage: ..." when N is not an integer in 0...64 MiB
//   anything else   404 "no route for PATH\n"
// with serve's status lines and headers (Content-Type, Content-Length, Connection, Server); HEAD
// gets the headers without the body. Keep-alive as serve decides it (HTTP/1.1 unless
// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`), the connection closed after
// an answer that says close; pipelined requests are answered in order (NIO's pipelining
// helper); a connection idle for the idle timeout (serve's 10 s) is closed. NIO answers a request
// it cannot parse with a bare 400 and closes (serve's 400 has a body).
//
// Listens on 127.0.0.1 only (backlog 512, SO_REUSEADDR, TCP_NODELAY on accepted sockets, as
// serve); prints "listening on http://127.0.0.1:PORT/ (Ctrl-C to stop)". SIGINT or SIGTERM:
// stops accepting, closes the connections (each answer is written on its loop before the close
// runs there), exits 0.
import ExampleHTTP
import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix

/// One connection's requests, on its event loop.
final class HTTPHandler: ChannelInboundHandler {
  typealias InboundIn = HTTPServerRequestPart
  typealias OutboundOut = HTTPServerResponsePart

  /// Largest N of /hash?bytes=N, as in serve.
  static let maximumHashBytes = 64 << 20

  /// The head of the request being received; it is answered at its end (no route reads a body,
  /// so body parts are dropped).
  private var request: HTTPRequestHead?

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    switch Self.unwrapInboundIn(data) {
    case .head(let head):
      request = head
    case .body:
      break
    case .end:
      guard let request else { return }
      self.request = nil
      let (status, body) = Self.answer(target: request.uri)
      respond(context: context, to: request, status: status, body: body)
    }
  }

  /// The idle timeout (IdleStateHandler, first in the pipeline): close.
  func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
    if event is IdleStateHandler.IdleStateEvent {
      context.close(promise: nil)
    } else {
      context.fireUserInboundEventTriggered(event)
    }
  }

  /// serve's routes (Sources/Examples/Server/Connection.swift) for a target in origin form.
  static func answer(target: String) -> (HTTPResponseStatus, String) {
    let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
    let path = parts[0]
    switch path {
    case "/":
      return (.ok, "hello from LoopDispatch\n")
    case "/hash":
      guard
        let bytes = parts.dropFirst().first.flatMap({ query("bytes", in: $0) }).flatMap(Int.init),
        (0...maximumHashBytes).contains(bytes)
      else { return (.badRequest, "usage: /hash?bytes=N (N ≤ 64 MiB)\n") }
      return (.ok, "fnv1a(\(bytes) bytes) = \(fnv1a(bytes: bytes))\n")
    default:
      return (.notFound, "no route for \(path)\n")
    }
  }

  /// `HTTPRequest.query(name)` of ExampleHTTP over the query (what follows the first '?').
  static func query(_ name: String, in query: Substring) -> String? {
    for pair in query.split(separator: "&") {
      let parts = pair.split(separator: "=", maxSplits: 1)
      if parts.first == Substring(name) { return parts.count > 1 ? String(parts[1]) : "" }
    }
    return nil
  }

  /// Writes the answer with serve's headers (`httpResponse` of ExampleHTTP) and flushes it;
  /// closes the connection once it is written when the request did not keep the connection.
  private func respond(
    context: ChannelHandlerContext, to request: HTTPRequestHead, status: HTTPResponseStatus,
    body: String
  ) {
    let keepAlive = request.isKeepAlive
    var headers = HTTPHeaders()
    headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
    headers.add(name: "Content-Length", value: String(body.utf8.count))
    headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
    headers.add(name: "Server", value: "LoopDispatch-Examples")
    let head = HTTPResponseHead(version: .http1_1, status: status, headers: headers)
    context.write(Self.wrapOutboundOut(.head(head)), promise: nil)
    // HEAD: NIO's encoder refuses a body for it (and sends none).
    if request.method != .HEAD {
      let buffer = context.channel.allocator.buffer(string: body)
      context.write(Self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
    }
    let written = context.writeAndFlush(Self.wrapOutboundOut(.end(nil)))
    if !keepAlive {
      written.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) }
    }
  }
}

func runServe(_ arguments: [String]) -> Int32 {
  var port = 8080
  var idleTimeout = TimeAmount.seconds(10)
  var threads = System.coreCount
  var index = 0
  while index < arguments.count {
    let flag = arguments[index]
    let value = index + 1 < arguments.count ? Int(arguments[index + 1]) : nil
    switch (flag, value) {
    case ("--port", let number?) where (0...65535).contains(number):
      port = number
    case ("--idle-timeout-ms", let number?) where number > 0:
      idleTimeout = .milliseconds(Int64(number))
    case ("--threads", let number?) where number > 0:
      threads = number
    default:
      Log.error(
        "NIOServe: bad argument '\(flag)'; usage: NIOServe [--port N] [--idle-timeout-ms N] "
          + "[--threads N]")
      return 2
    }
    index += 2
  }
  // SIGINT and SIGTERM are blocked before the event loops' threads start (they inherit the
  // mask), so only `sigwait` below takes them.
  var stopSignals = sigset_t()
  sigemptyset(&stopSignals)
  sigaddset(&stopSignals, SIGINT)
  sigaddset(&stopSignals, SIGTERM)
  pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
  // A peer that resets its connection must not kill the server with SIGPIPE.
  signal(SIGPIPE, SIG_IGN)

  let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
  let bootstrap = ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 512)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
    .childChannelInitializer { [idleTimeout] channel in
      channel.eventLoop.makeCompletedFuture {
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(IdleStateHandler(readTimeout: idleTimeout))
        try pipeline.configureHTTPServerPipeline()
        try pipeline.addHandler(HTTPHandler())
      }
    }
  let listener: any Channel
  do {
    listener = try bootstrap.bind(host: "127.0.0.1", port: port).wait()
  } catch {
    Log.error("NIOServe: bind 127.0.0.1:\(port): \(error)")
    try? group.syncShutdownGracefully()
    return 1
  }
  Log.info("listening on http://127.0.0.1:\(listener.localAddress?.port ?? 0)/ (Ctrl-C to stop)")

  var received: Int32 = 0
  sigwait(&stopSignals, &received)
  Log.info("\(received == SIGINT ? "SIGINT" : "SIGTERM"): stopping")
  do {
    try listener.close().wait()
    // Closes every connection on its loop, then stops the loops.
    try group.syncShutdownGracefully()
  } catch {
    Log.error("NIOServe: shutdown: \(error)")
    return 1
  }
  Log.info("stopped cleanly")
  return 0
}

exit(runServe(Array(CommandLine.arguments.dropFirst())))
