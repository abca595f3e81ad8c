import Glibc
import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop

/// `Examples tee INPUT COPY`: copies INPUT (a path, or `-` for standard input) to standard
/// output and to the file COPY, through I/O channels.
///
/// Each chunk read (a `Bytes` value) is handed to both writers without a copy. Standard
/// output and standard input, when they are pipes or terminals, are written and read as the
/// event loop reports them ready; the files, by a pool worker. Every channel's cleanup handler
/// leaves a group, so the program ends once every descriptor is given back. Prints a summary
/// on standard error; exits 1 on an I/O error, 2 on bad arguments.
func runTee(_ arguments: [String]) -> Int32 {
  guard arguments.count == 2 else {
    writeError("usage: Examples tee INPUT COPY   (INPUT may be - for standard input)\n")
    return 2
  }
  let group = Group()
  let queue = Queue(label: "tee")
  let errors = TeeErrors()
  func cleanup(_ name: String) -> @Sendable (Int32) -> Void {
    group.enter()
    return { error in
      if error != 0 { errors.record("\(name): cleanup error \(error)") }
      group.leave()
    }
  }

  let input: IOChannel
  if arguments[0] == "-" {
    input = IOChannel(kind: .stream, fd: 0, queue: queue, cleanup: cleanup("standard input"))
  } else {
    guard
      let channel = IOChannel(
        kind: .stream, path: absolutePath(arguments[0]), flags: O_RDONLY, queue: queue,
        cleanup: cleanup(arguments[0]))
    else { return 2 }
    input = channel
  }
  let output = IOChannel(kind: .stream, fd: 1, queue: queue, cleanup: cleanup("standard output"))
  guard
    let copy = IOChannel(
      kind: .stream, path: absolutePath(arguments[1]), flags: O_WRONLY | O_CREAT | O_TRUNC,
      mode: 0o644, queue: queue, cleanup: cleanup(arguments[1]))
  else { return 2 }

  input.setLowWater(1)
  input.setHighWater(64 * 1024)
  let total = TeeCount()
  input.read(length: Int.max, queue: queue) { done, data, error in
    if !data.isEmpty {
      total.bytes += data.count
      total.chunks += 1
      for (name, writer) in [("standard output", output), (arguments[1], copy)] {
        writer.write(data: data, queue: queue) { finished, _, writeError in
          if finished && writeError != 0 { errors.record("\(name): write error \(writeError)") }
        }
      }
    }
    guard done else { return }
    if error != 0 { errors.record("\(arguments[0]): read error \(error)") }
    // Each close waits for the writes already submitted.
    input.close()
    output.close()
    copy.close()
  }
  group.wait()
  let problems = errors.all
  for problem in problems { writeError("tee: \(problem)\n") }
  writeError(
    "tee: \(total.bytes) bytes in \(total.chunks) chunks to standard output and \(arguments[1])\n")
  return problems.isEmpty ? 0 : 1
}

/// `path` made absolute against the working directory (path channels need one).
private func absolutePath(_ path: String) -> String {
  if path.hasPrefix("/") { return path }
  var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
  guard getcwd(&buffer, buffer.count) != nil else { return "/" + path }
  let directory = String(
    decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  return directory + "/" + path
}

/// The bytes and chunks read; touched only by the read handler (its calls run one at a time)
/// and read after the group's wait.
private final class TeeCount: @unchecked Sendable {
  // @unchecked Sendable: see the type's comment; the group orders the last write before the
  // read on the main thread.
  var bytes = 0
  var chunks = 0
}

/// Errors from any handler, behind a lock.
private final class TeeErrors: Sendable {
  private let list = LockedValue<[String]>([])
  func record(_ text: String) { list.withLock { $0.append(text) } }
  var all: [String] { list.withLock { $0 } }
}
