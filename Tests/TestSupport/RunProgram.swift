import Glibc

/// What a finished child process left behind.
public struct ProgramResult: Sendable {
  /// The exit status, or -1 if the process was killed by a signal.
  public let status: Int32
  /// The signal that killed it, or 0.
  public let signal: Int32
  public let output: String
  public let errorOutput: String
}

/// Runs the executable `name`, built next to the test bundle, with `arguments`, and returns
/// its exit status, standard output and standard error. Used for programs that must run on
/// their own process main thread (the examples, the main-queue scenarios).
public func runProgram(_ name: String, _ arguments: [String]) -> ProgramResult {
  var outPipe: [Int32] = [0, 0]
  var errPipe: [Int32] = [0, 0]
  precondition(pipe(&outPipe) == 0 && pipe(&errPipe) == 0)
  let pid = spawnBuiltProgram(
    name, arguments, stdout: outPipe[1], stderr: errPipe[1], closing: [outPipe[0], errPipe[0]])
  close(outPipe[1])
  close(errPipe[1])
  // Read both pipes to the end (poll so neither can fill up and stall the child).
  var output = [UInt8]()
  var errors = [UInt8]()
  var open = [outPipe[0], errPipe[0]]
  var buffer = [UInt8](repeating: 0, count: 4096)
  while !open.isEmpty {
    var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
    if poll(&fds, nfds_t(fds.count), -1) < 0 { if errno == EINTR { continue } else { break } }
    for entry in fds where entry.revents != 0 {
      let n = read(entry.fd, &buffer, buffer.count)
      if n > 0 {
        if entry.fd == outPipe[0] { output += buffer[..<n] } else { errors += buffer[..<n] }
      } else if n == 0 || errno != EINTR {
        close(entry.fd)
        open.removeAll { $0 == entry.fd }
      }
    }
  }
  var status: Int32 = 0
  while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
  let signal = status & 0x7f
  return ProgramResult(
    status: signal == 0 ? (status >> 8) & 0xff : -1, signal: signal,
    output: String(decoding: output, as: UTF8.self),
    errorOutput: String(decoding: errors, as: UTF8.self))
}

/// Starts the executable `name` (built next to the test bundle) with `arguments`, its
/// standard output on `stdout` and, if given, its standard error on `stderr`. The child
/// inherits no other descriptor: not the parent's pipe ends, nor other tests' sockets and
/// pipes (so a program's descriptor count is its own, and no test's child holds another
/// test's pipe open). `closing` lists the parent's pipe ends, closed one by one where
/// glibc's `posix_spawn_file_actions_addclosefrom_np` is missing.
///
/// The child starts with no signals blocked, whatever the calling thread blocks (Swift
/// concurrency's threads block some), so signal scenarios behave as in a shell; and without
/// Swift's backtracer, which would inherit the output pipes of a child that traps on purpose
/// and could outlive it (it is also slow under the sanitizers).
public func spawnBuiltProgram(
  _ name: String, _ arguments: [String], stdout: Int32, stderr: Int32? = nil,
  closing: [Int32]
) -> pid_t {
  let executable = builtProductsDirectory() + "/" + name
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_adddup2(&actions, stdout, 1)
  if let stderr { posix_spawn_file_actions_adddup2(&actions, stderr, 2) }
  // glibc's closefrom action (2.34+), which Glibc does not import; looked up at run time.
  typealias AddCloseFrom =
    @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
  if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
    _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
  } else {
    for fd in closing { posix_spawn_file_actions_addclose(&actions, fd) }
  }
  var attributes = posix_spawnattr_t()
  posix_spawnattr_init(&attributes)
  defer { posix_spawnattr_destroy(&attributes) }
  var emptyMask = sigset_t()
  sigemptyset(&emptyMask)
  posix_spawnattr_setsigmask(&attributes, &emptyMask)
  posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
  var environment: [UnsafeMutablePointer<CChar>?] = []
  var entry = environ
  while let variable = entry.pointee {
    environment.append(strdup(variable))
    entry += 1
  }
  environment.append(strdup("SWIFT_BACKTRACE=enable=no"))
  environment.append(nil)
  let argv = ([executable] + arguments).map { strdup($0) } + [nil]
  defer { for pointer in argv + environment { free(pointer) } }
  var pid = pid_t()
  let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, environment)
  precondition(rc == 0, "could not start \(executable): \(rc)")
  return pid
}

/// The directory holding the test bundle and the package's executables.
func builtProductsDirectory() -> String {
  var buffer = [CChar](repeating: 0, count: 4096)
  let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
  precondition(n > 0)
  let selfPath = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  return selfPath.split(separator: "/", omittingEmptySubsequences: false).dropLast()
    .joined(separator: "/")
}
