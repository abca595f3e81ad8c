import CLoopShims
import Glibc

// Files, pipes and paths the I/O channel tests share.

/// A pipe with blocking ends (the shared `makePipe` makes them non-blocking), so that a test
/// can see the channel set and restore the flag. Close-on-exec from the start: a child
/// process another test starts meanwhile must not keep the write end, which would hold back
/// the reader's end of file until the child exits.
func blockingPipe() throws -> (Int32, Int32) {
  var ends: [Int32] = [-1, -1]
  guard cls_pipe2(&ends, O_CLOEXEC) == 0 else { throw SetupFailed(call: "pipe2") }
  return (ends[0], ends[1])
}

/// A failed set-up call in these tests.
struct SetupFailed: Error { let call: String }

func temporaryFile() throws -> Int32 {
  var template = Array("/tmp/iochannel-XXXXXX".utf8CString)
  let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
  guard fd >= 0 else { throw SetupFailed(call: "mkstemp") }
  return fd
}

/// The path an open descriptor names (through /proc).
func descriptorPath(_ fd: Int32) throws -> String {
  var buffer = [CChar](repeating: 0, count: 4096)
  let count = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
  guard count > 0 else { throw SetupFailed(call: "readlink") }
  return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
