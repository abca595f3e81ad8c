import Glibc
import TestSupport

/// `Examples serve` as a child process with both its standard output and its standard error
/// captured (LeakSanitizer reports on standard error), read to the end by a thread of its own
/// so the server can never block on a full pipe.
final class ServeProcess {
  let pid: pid_t
  private let output = Locked<[UInt8]>([])
  private let errors = Locked<[UInt8]>([])
  private let listening = Latch()
  private let ended = Latch()
  private let reader: pthread_t
  private var exitStatus: Int32?

  init(_ arguments: [String]) {
    var outPipe: [Int32] = [0, 0]
    var errPipe: [Int32] = [0, 0]
    // Close-on-exec, so no other test's child inherits them (and holds them open).
    precondition(pipe(&outPipe) == 0 && pipe(&errPipe) == 0)
    for fd in outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    pid = spawnBuiltProgram(
      "Examples", arguments, stdout: outPipe[1], stderr: errPipe[1],
      closing: [outPipe[0], errPipe[0]])
    close(outPipe[1])
    close(errPipe[1])
    let (output, errors, listening, ended) = (output, errors, listening, ended)
    let (outFD, errFD) = (outPipe[0], errPipe[0])
    reader = startThread {
      var open = [outFD, errFD]
      var chunk = [UInt8](repeating: 0, count: 4096)
      while !open.isEmpty {
        var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        if poll(&fds, nfds_t(fds.count), -1) < 0 { if errno == EINTR { continue } else { break } }
        for entry in fds where entry.revents != 0 {
          let n = read(entry.fd, &chunk, chunk.count)
          if n > 0 {
            let bytes = Array(chunk[..<n])
            if entry.fd == outFD {
              let text = output.withLock { all in
                all += bytes
                return String(decoding: all, as: UTF8.self)
              }
              if text.contains("listening on http://127.0.0.1:") { listening.open() }
            } else {
              errors.withLock { $0 += bytes }
            }
          } else if n == 0 || errno != EINTR {
            close(entry.fd)
            open.removeAll { $0 == entry.fd }
          }
        }
      }
      listening.open()
      ended.open()
    }
  }

  deinit {
    if exitStatus == nil {
      kill(pid, SIGKILL)
      _ = waitForExit()
    }
  }

  var outputText: String { String(decoding: output.value, as: UTF8.self) }
  var errorText: String { String(decoding: errors.value, as: UTF8.self) }

  /// The port from the "listening on http://127.0.0.1:PORT/" line, or nil.
  func waitForPort() -> UInt16? {
    _ = listening.wait(seconds: 60)
    guard let line = outputText.split(separator: "\n").first(where: { $0.contains("listening") }),
      let portText = line.split(separator: ":").last?.split(separator: "/").first
    else { return nil }
    return UInt16(portText)
  }

  func send(_ signal: Int32) { kill(pid, signal) }

  /// Waits (polling, at most `seconds`) until standard output contains `text`.
  func waitForOutput(containing text: String, seconds: Double = 30) -> Bool {
    let deadline = monotonicSeconds() + seconds
    while monotonicSeconds() < deadline {
      if outputText.contains(text) { return true }
      var pause = timespec(tv_sec: 0, tv_nsec: 5_000_000)
      nanosleep(&pause, nil)
    }
    return outputText.contains(text)
  }

  /// Waits at most `seconds` for the exit; the exit status (as `waitForExit()`), or nil if
  /// the server is still running then (it is left running; `deinit` kills it).
  func waitForExit(seconds: Double) -> Int32? {
    if let exitStatus { return exitStatus }
    let deadline = monotonicSeconds() + seconds
    while monotonicSeconds() < deadline {
      var status: Int32 = 0
      let reaped = waitpid(pid, &status, WNOHANG)
      if reaped == pid {
        let result = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
        exitStatus = result
        _ = ended.wait(seconds: 60)
        pthread_join(reader, nil)
        return result
      }
      var pause = timespec(tv_sec: 0, tv_nsec: 5_000_000)
      nanosleep(&pause, nil)  // Polling for the exit, with a deadline.
    }
    return nil
  }

  /// Waits for the exit and the end of both outputs; the exit status, or -1 after a signal.
  func waitForExit() -> Int32 {
    if let exitStatus { return exitStatus }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    let result = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    exitStatus = result
    _ = ended.wait(seconds: 60)
    pthread_join(reader, nil)
    return result
  }
}

/// Seconds on the monotonic clock.
func monotonicSeconds() -> Double {
  var now = timespec()
  clock_gettime(CLOCK_MONOTONIC, &now)
  return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
