import Glibc

/// The process's open descriptors, as (number, link target) pairs from /proc/self/fd
/// (the directory's own descriptor excluded). Pipes show as `pipe:[inode]`.
func openDescriptors() -> [(fd: Int32, target: String)] {
  guard let directory = opendir("/proc/self/fd") else { return [] }
  defer { closedir(directory) }
  let own = dirfd(directory)
  var result: [(fd: Int32, target: String)] = []
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard let fd = Int32(name), fd != own else { continue }
    var buffer = [CChar](repeating: 0, count: 256)
    let n = readlink("/proc/self/fd/\(name)", &buffer, buffer.count - 1)
    let target =
      n > 0
      ? String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
    result.append((fd, target))
  }
  return result
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
@discardableResult
func raiseDescriptorLimit() -> Int {
  var limit = rlimit()
  guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
  if limit.rlim_cur < limit.rlim_max {
    limit.rlim_cur = limit.rlim_max
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
  }
  return Int(clamping: limit.rlim_cur)
}

/// A non-blocking, close-on-exec pipe and the inode both ends share.
func makeStressPipe() -> (read: Int32, write: Int32, inode: UInt64) {
  var fds: [Int32] = [0, 0]
  precondition(pipe(&fds) == 0, "pipe failed: errno \(errno)")
  for fd in fds {
    precondition(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0)
    precondition(fcntl(fd, F_SETFD, FD_CLOEXEC) == 0)
  }
  var info = stat()
  precondition(fstat(fds[0], &info) == 0)
  return (fds[0], fds[1], UInt64(info.st_ino))
}
