import Glibc

/// Runs the built `Examples` executable (next to the test bundle) with `arguments` and
/// returns its exit status and standard output. The examples run their loops on the real
/// process main thread, which in-process tests cannot do.
func runExample(_ arguments: [String]) -> (status: Int32, output: String) {
  let executable = examplesPath()
  var pipeFDs: [Int32] = [0, 0]
  precondition(pipe(&pipeFDs) == 0)
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
  posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
  let argv = ([executable] + arguments).map { strdup($0) } + [nil]
  defer { for arg in argv { free(arg) } }
  var pid = pid_t()
  let rc = posix_spawn(&pid, executable, &actions, nil, argv, environ)
  posix_spawn_file_actions_destroy(&actions)
  close(pipeFDs[1])
  precondition(rc == 0, "could not start \(executable): \(rc)")
  var output = [UInt8]()
  var buffer = [UInt8](repeating: 0, count: 4096)
  while true {
    let n = read(pipeFDs[0], &buffer, buffer.count)
    if n > 0 { output += buffer[..<n] } else if n == 0 || errno != EINTR { break }
  }
  close(pipeFDs[0])
  var status: Int32 = 0
  while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
  let exited = (status & 0x7f) == 0
  return (exited ? (status >> 8) & 0xff : -1, String(decoding: output, as: UTF8.self))
}

/// `Examples` is built into the same directory as the test bundle.
private func examplesPath() -> String {
  var buffer = [CChar](repeating: 0, count: 4096)
  let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
  precondition(n > 0)
  let selfPath = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  let directory = selfPath.split(separator: "/", omittingEmptySubsequences: false).dropLast()
    .joined(separator: "/")
  return directory + "/Examples"
}
