import ExampleHTTP
import Glibc
import LoopDispatch

/// `Examples serve [--port N] [--idle-timeout-ms N]`: an HTTP/1.1 keep-alive server on
/// 127.0.0.1, the runtime's main job.
///
/// Where things run:
/// - the listening socket is a `ReadSource` on the main queue (accept on the main loop);
/// - each connection has its own serial queue with a read source and a write source;
/// - CPU work (`/hash?bytes=N`) runs on a global queue and answers on the connection's queue;
/// - idle connections are closed by `after` timers;
/// - SIGINT and SIGTERM arrive through `SignalSource`s on the main queue: the server stops
///   accepting, lets in-flight requests finish, closes idle connections and exits 0.
func runServe(_ arguments: [String]) -> Int32 {
  var port: UInt16 = 8080
  var idleTimeout = Duration.seconds(10)
  var index = 0
  while index < arguments.count {
    let flag = arguments[index]
    let value = index + 1 < arguments.count ? arguments[index + 1] : nil
    switch (flag, value.flatMap { Int($0) }) {
    case ("--port", let number?) where (0...65535).contains(number):
      port = UInt16(number)
    case ("--idle-timeout-ms", let number?) where number > 0:
      idleTimeout = .milliseconds(number)
    default:
      Log.error("serve: bad argument '\(flag)'; usage: serve [--port N] [--idle-timeout-ms N]")
      return 2
    }
    index += 2
  }
  // A peer that resets its connection must not kill the server with SIGPIPE.
  signal(SIGPIPE, SIG_IGN)
  let listener: Int32
  do {
    listener = try makeListeningSocket(port: port)
  } catch {
    Log.error("serve: \(error)")
    return 1
  }
  let server: HTTPServer
  do {
    server = try HTTPServer(listener: listener, idleTimeout: idleTimeout)
  } catch {
    Log.error("serve: \(error)")
    return 1
  }
  server.start()
  Log.info("listening on http://127.0.0.1:\(boundPort(listener))/ (Ctrl-C to stop)")
  // `runMain()` never returns, so nothing after it uses `server`: without this an optimised
  // build may release it (and its sources, closing the listening socket) right away.
  withExtendedLifetime(server) { Queue.runMain() }
}
