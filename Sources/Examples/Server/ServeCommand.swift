import ExampleHTTP
import Glibc
import LoopDispatch

/// The `serve` command line.
struct ServeOptions {
  var port: UInt16 = 8080
  /// A connection with no request and no answer pending for this long is closed.
  var idleTimeout = Duration.seconds(10)
  /// A connection whose answers have made no write progress for this long is closed.
  var writeTimeout = Duration.seconds(10)
  /// After SIGINT/SIGTERM, connections still open this long are closed and the process exits.
  var drainTimeout = Duration.seconds(3)
  /// Lowers the soft RLIMIT_NOFILE at start (tests of the out-of-descriptors path).
  var maximumOpenFiles: Int?
  /// Logs how the runtime sized itself at start (the pool's CPUs and where that came from).
  var verbose = false

  static let usage =
    "usage: serve [--port N] [--idle-timeout-ms N] [--write-timeout-ms N] "
    + "[--drain-timeout-ms N] [--max-open-files N] [--verbose]"

  /// Parses `arguments`; nil (after logging why) when one is bad.
  init?(_ arguments: [String]) {
    var index = 0
    while index < arguments.count {
      let flag = arguments[index]
      if flag == "--verbose" {
        verbose = true
        index += 1
        continue
      }
      let value = index + 1 < arguments.count ? arguments[index + 1] : nil
      switch (flag, value.flatMap { Int($0) }) {
      case ("--port", let number?) where (0...65535).contains(number):
        port = UInt16(number)
      case ("--idle-timeout-ms", let number?) where number > 0:
        idleTimeout = .milliseconds(number)
      case ("--write-timeout-ms", let number?) where number > 0:
        writeTimeout = .milliseconds(number)
      case ("--drain-timeout-ms", let number?) where number >= 0:
        drainTimeout = .milliseconds(number)
      case ("--max-open-files", let number?) where number >= 16:
        maximumOpenFiles = number
      default:
        Log.error("serve: bad argument '\(flag)'; \(Self.usage)")
        return nil
      }
      index += 2
    }
  }
}

/// `Examples serve [--port N] [--idle-timeout-ms N] [--write-timeout-ms N]
/// [--drain-timeout-ms N] [--max-open-files N] [--verbose]`: an HTTP/1.1 keep-alive server on 127.0.0.1,
/// the runtime's main job.
///
/// Where things run:
/// - the listening socket is a `ReadSource` on the main queue (accept on the main loop); out
///   of descriptors, waiting clients get 503 and accepting pauses (`HTTPServer+Overload`);
/// - each connection has its own serial queue with a read source and a write source;
/// - CPU work (`/hash?bytes=N`) runs on a global queue and answers on the connection's queue;
/// - idle connections (10 s by default) and connections whose client takes no answers (10 s
///   without write progress) are closed by an `InactivityTimer`;
/// - SIGINT and SIGTERM arrive through `SignalSource`s on the main queue: the server stops
///   accepting, lets in-flight requests finish, closes idle connections and exits 0; whatever
///   is still open after `--drain-timeout-ms` (3 s by default) is closed, and the process
///   exits 0. A second signal exits at once, status 0.
func runServe(_ arguments: [String]) -> Int32 {
  guard let options = ServeOptions(arguments) else { return 2 }
  if let limit = options.maximumOpenFiles {
    var current = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &current)
    current.rlim_cur = Swift.min(rlim_t(limit), current.rlim_max)
    if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &current) != 0 {
      Log.error("serve: setrlimit(RLIMIT_NOFILE, \(limit)): \(String(cString: strerror(errno)))")
      return 1
    }
  }
  // A peer that resets its connection must not kill the server with SIGPIPE.
  signal(SIGPIPE, SIG_IGN)
  let listener: Int32
  do {
    listener = try makeListeningSocket(port: options.port)
  } catch {
    Log.error("serve: \(error)")
    return 1
  }
  let server: HTTPServer
  do {
    server = try HTTPServer(listener: listener, options: options)
  } catch {
    Log.error("serve: \(error)")
    return 1
  }
  server.start()
  Log.info("listening on http://127.0.0.1:\(boundPort(listener))/ (Ctrl-C to stop)")
  if options.verbose {
    let stats = RuntimeStats.current
    Log.info(
      "runtime: pool sized for \(stats.poolCPUs) CPUs (from \(stats.poolCPUSource)), "
        + "\(stats.poolThreads) pool threads")
  }
  // `runMain()` never returns, so nothing after it uses `server`: an optimised build may
  // release it (and its sources, closing the listening socket) before the loop starts.
  // `withExtendedLifetime(server) { Queue.runMain() }` did not prevent that (its end is
  // unreachable): a release build closed the listener right after "listening on".
  Queue.runMain(keepingAlive: server)
}
