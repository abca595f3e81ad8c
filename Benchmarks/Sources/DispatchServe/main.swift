// `DispatchServe [--port N] [--idle-timeout-ms N] [--idle-timer source|after]`: the LoopDispatch
// `Examples serve` HTTP/1.1 keep-alive server written with Apple's Dispatch instead, the
// baseline for `scripts/wrk-servers.sh`. Listens on 127.0.0.1 only; prints the same
// "listening on http://127.0.0.1:PORT/" line; SIGINT/SIGTERM drain and exit 0.
//
// `--idle-timer source` (default) resets the idle timeout by rescheduling one timer source per
// connection, Dispatch's idiom; `--idle-timer after` ports LoopDispatch's scheme literally (one
// `asyncAfter` pending per connection, posted again for the rest of the timeout when it fires
// early; a read only notes the time).
import Dispatch
import ExampleHTTP
import Glibc

func runServe(_ arguments: [String]) -> Int32 {
  var port: UInt16 = 8080
  var idleTimeout = DispatchTimeInterval.seconds(10)
  var idleTimerKind = IdleTimerKind.source
  var index = 0
  while index < arguments.count {
    let flag = arguments[index]
    let value = index + 1 < arguments.count ? arguments[index + 1] : nil
    switch (flag, value.flatMap { Int($0) }, value) {
    case ("--port", let number?, _) where (0...65535).contains(number):
      port = UInt16(number)
    case ("--idle-timeout-ms", let number?, _) where number > 0:
      idleTimeout = .milliseconds(number)
    case ("--idle-timer", _, "source"):
      idleTimerKind = .source
    case ("--idle-timer", _, "after"):
      idleTimerKind = .after
    default:
      Log.error(
        "DispatchServe: bad argument '\(flag)'; usage: DispatchServe [--port N] "
          + "[--idle-timeout-ms N] [--idle-timer source|after]")
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
    Log.error("DispatchServe: \(error)")
    return 1
  }
  let server = HTTPServer(
    listener: listener, idleTimeout: idleTimeout, idleTimerKind: idleTimerKind)
  server.start()
  Log.info("listening on http://127.0.0.1:\(boundPort(listener))/ (Ctrl-C to stop)")
  // Keep the server (and its sources) alive: `dispatchMain()` never returns, so without this
  // the optimizer may release `server` right after `start()`.
  withExtendedLifetime(server) { dispatchMain() }
}

exit(runServe(Array(CommandLine.arguments.dropFirst())))
