import Glibc

/// A child process left running while a test talks to it (a server), with its standard
/// output readable line by line.
public final class BackgroundProgram: @unchecked Sendable {
  // @unchecked Sendable: used from one test at a time; `buffer` is only touched by callers
  // of `readLine`, which the tests do not call concurrently.
  public let pid: pid_t
  private let outputFD: Int32
  private var buffer: [UInt8] = []
  private var reaped = false
  private var exitStatus: Int32 = -1

  /// Starts the executable `name` (built next to the test bundle) with `arguments`.
  public init(_ name: String, _ arguments: [String]) {
    var fds: [Int32] = [0, 0]
    precondition(pipe(&fds) == 0)
    pid = spawnBuiltProgram(name, arguments, stdout: fds[1], closing: [fds[0]])
    close(fds[1])
    outputFD = fds[0]
  }

  deinit {
    if !reaped {
      kill(pid, SIGKILL)
      _ = waitForExit()
    }
    close(outputFD)
  }

  /// Reads standard output until a line containing `text` arrives (returning it) or the
  /// output ends or `seconds` pass (returning nil).
  public func readLine(containing text: String, seconds: Int32 = 30) -> String? {
    let deadline = time(nil) + Int(seconds)
    while time(nil) <= deadline {
      if let newline = buffer.firstIndex(of: 10) {
        let line = String(decoding: buffer[..<newline], as: UTF8.self)
        buffer.removeFirst(newline + 1)
        if line.contains(text) { return line }
        continue
      }
      var poller = pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0)
      if poll(&poller, 1, 200) <= 0 { continue }
      var chunk = [UInt8](repeating: 0, count: 4096)
      let n = read(outputFD, &chunk, chunk.count)
      if n <= 0 { return nil }
      buffer += chunk[..<n]
    }
    return nil
  }

  /// Sends `signal` to the child.
  public func send(_ signal: Int32) { kill(pid, signal) }

  /// Waits for the child to exit; returns its exit status, or -1 if a signal killed it.
  public func waitForExit() -> Int32 {
    if reaped { return exitStatus }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    reaped = true
    exitStatus = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    return exitStatus
  }
}
