import Glibc

/// A closure handed to a new pthread.
private final class ThreadBody {
  let run: @Sendable () -> Void
  init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Starts a plain pthread running `body`; join it with `pthread_join`.
public func startThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  // Unsafe pointer: the retained box is taken back, exactly once, by the new thread.
  let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
  var thread = pthread_t()
  let rc = pthread_create(
    &thread, nil,
    { raw in
      Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue().run()
      return nil
    }, box)
  precondition(rc == 0, "pthread_create failed: \(rc)")
  return thread
}

/// A `kB` figure (`VmRSS`, `VmHWM`, ...) of process `pid` from /proc/<pid>/status, or -1.
public func processStatusKilobytes(of pid: pid_t, field: String) -> Int {
  let fd = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return -1 }
  defer { close(fd) }
  var bytes = [UInt8](repeating: 0, count: 8192)
  let n = read(fd, &bytes, bytes.count)
  guard n > 0 else { return -1 }
  for line in String(decoding: bytes[..<n], as: UTF8.self).split(separator: "\n")
  where line.hasPrefix("\(field):") {
    return line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
  }
  return -1
}

/// The number of frames on the calling thread's stack, up to 4096 (glibc's `backtrace`, found
/// with `dlsym`: the Glibc module does not export <execinfo.h>). Counted in frames, not
/// bytes: under AddressSanitizer a local's address may be on its fake stack, not the thread's.
@inline(never)
public func currentStackDepth() -> Int {
  let capacity: Int32 = 4096
  let frames = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: Int(capacity))
  // Unsafe pointer: a buffer of `capacity` slots, filled by `backtrace` and freed here.
  defer { frames.deallocate() }
  return Int(backtraceFunction(frames, capacity))
}

/// glibc's `backtrace(3)`.
private let backtraceFunction:
  @convention(c) (
    UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32
  ) -> Int32 = {
    guard let symbol = dlsym(nil, "backtrace") else { fatalError("glibc has no backtrace") }
    // Safe: `backtrace` has this C signature: int backtrace(void **buffer, int size).
    return unsafeBitCast(
      symbol,
      to: (@convention(c) (
        UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32
      ) -> Int32).self)
  }()
