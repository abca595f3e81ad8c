import Glibc
import TestSupport
import Testing

/// `Examples tee`: a file copied to standard output (a pipe, so through readiness) and to a
/// second file (through the pool), byte for byte; a missing input is an error, not a crash.
@Suite struct TeeExampleTests {
  @Test func teeCopiesAFileToStandardOutputAndToACopy() throws {
    let input = "/tmp/loopdispatch-tee-in-\(getpid())"
    let copy = "/tmp/loopdispatch-tee-copy-\(getpid())"
    defer {
      unlink(input)
      unlink(copy)
    }
    // About 400 KB of numbered lines: several chunks, more than a pipe holds at once.
    let text = (0..<40_000).map { "line \($0)\n" }.joined()
    try writeFile(input, text)
    let result = runProgram("Examples", ["tee", input, copy])
    #expect(result.status == 0)
    #expect(result.output == text)
    #expect(try readFile(copy) == text)
    #expect(result.errorOutput.contains("tee: \(text.utf8.count) bytes in"))
  }

  @Test func aMissingInputIsReportedAndExitsWithOne() {
    let copy = "/tmp/loopdispatch-tee-none-\(getpid())"
    defer { unlink(copy) }
    let result = runProgram("Examples", ["tee", "/nonexistent/loopdispatch-tee", copy])
    #expect(result.status == 1)
    #expect(result.errorOutput.contains("read error \(ENOENT)"))
    #expect(runProgram("Examples", ["tee", "only-one-argument"]).status == 2)
  }
}

private struct FileError: Error { let path: String }

private func writeFile(_ path: String, _ text: String) throws {
  let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
  guard fd >= 0 else { throw FileError(path: path) }
  defer { close(fd) }
  let bytes = Array(text.utf8)
  var offset = 0
  while offset < bytes.count {
    let wrote = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard wrote > 0 else { throw FileError(path: path) }
    offset += wrote
  }
}

private func readFile(_ path: String) throws -> String {
  let fd = open(path, O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { throw FileError(path: path) }
  defer { close(fd) }
  var bytes: [UInt8] = []
  var buffer = [UInt8](repeating: 0, count: 65536)
  while true {
    let got = read(fd, &buffer, buffer.count)
    guard got > 0 else { break }
    bytes += buffer[..<got]
  }
  return String(decoding: bytes, as: UTF8.self)
}
