import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// One open file as the I/O channels see it: every ``IOChannel`` and every one-shot
/// `read(from:)`/`write(to:)` on one descriptor shares one entry, as libdispatch's channels
/// share its `dispatch_fd_entry`.
///
/// What the entry owns, and why one per descriptor:
/// - **One serial queue** (`queue`), the `control` queue of every channel on it. Operations
///   of all those channels are ordered by the one queue they are submitted to: two
///   `dispatch_write`s on one descriptor reach it in the order they were called, and a
///   barrier on any channel sees every operation submitted before it on any other.
/// - **The lanes** (`DescriptorEntry+Lanes.swift`): reads one at a time in submission
///   order, writes likewise, and on a regular file a STREAM channel's reads and writes in one
///   lane (they share the file position).
/// - **The descriptor's flags**: a socket, pipe or terminal is made non-blocking when the
///   entry is made and given its flags back when the entry ends; a regular file is made
///   blocking (libdispatch does both).
/// - **The cleanup handlers** of its channels: they run when the entry ends, that is when
///   its last channel has closed (or been released) and every operation's last handler has
///   run. A channel made from another with `IOChannel(kind:sharing:)` joins the same entry,
///   so the creator's cleanup (which may close the descriptor) waits for it.
///
/// Entries for a descriptor number are found through `registry`; a channel made from a path
/// gets an entry of its own that is never registered: it opens its own descriptor (so does a
/// channel made from a path channel), and a number it shares with no one cannot be reused
/// under another channel.
///
/// Thread-safety: the fields marked "registry lock" are touched only while holding
/// `registry`'s lock (joining and leaving happen on any thread, and a lookup must not find
/// an entry that is ending); the fields marked "queue" only by blocks running on `queue`;
/// the `let`s are fixed at creation.
final class DescriptorEntry: @unchecked Sendable {
  // @unchecked Sendable: see the type's comment (each mutable field names its owner).

  /// Where the descriptor comes from.
  enum Origin {
    /// The caller's descriptor, with the flags to give back at the end (nil: unchanged).
    case descriptor(restoring: Int32?)
    /// A file the entry opens at its first use and closes at its end.
    case path(String, flags: Int32, mode: mode_t)
    /// No descriptor: a channel that failed at creation keeps a queue of its own here.
    case none
  }

  let origin: Origin
  /// The queue every channel of the entry uses as its `control`.
  let queue: Queue

  // MARK: Queue state

  /// The descriptor (-1 until a path entry opens its file, and after it ends).
  var fd: Int32
  /// Why a path entry's file could not be opened (0: it could, or has not been tried).
  var openFailure: Int32 = 0
  /// Whether the descriptor is known and typed (`isFile`, `isSocket`): at creation for a
  /// descriptor, at the first use for a path.
  var prepared = false
  /// A regular file or block device, or a character device epoll refuses (/dev/null): read
  /// and written with blocking calls, chunk by chunk, on the queue.
  var isFile = false
  var isSocket = false
  /// A path entry: the file type the channel's check found at creation (a missing file
  /// that `O_CREAT` will make counts as regular), which decides `O_NONBLOCK` at the open.
  var pathType: mode_t = S_IFREG
  /// The memory reads go into, kept while reads come back empty or short.
  let readBuffer = ReadBuffer()
  /// Operations behind a barrier, in submission order (the barrier first).
  var held: [IOOperation] = []
  /// The lanes: `lanes[Lane.read]`, `[Lane.write]`, `[Lane.fileStream]`; each runs its first
  /// operation, the others wait behind it.
  var lanes: [[IOOperation]] = [[], [], []]
  /// The readiness sources of `Lane.read` and `Lane.write` (`DescriptorEntry+Readiness`),
  /// made at the first wait and kept for the entry's life; `listening`: resumed.
  var readiness: [Source?] = [nil, nil]
  var listening = [false, false]
  /// Finished operations whose last handler call has not run yet (barriers wait for them).
  var undelivered = 0
  /// Whether a barrier's body is running (``IOChannel/fileDescriptor`` may then open a path).
  var inBarrier = false
  /// `pump`'s re-entry guard: an operation that finishes at once calls `pump` again from
  /// inside it, and the outer call goes round again instead of recursing.
  var pumping = false
  var pumpAgain = false

  // MARK: Registry-lock state

  /// A registered entry: the file its number named when it was made (device and inode).
  private var file = (device: UInt64(0), inode: UInt64(0))

  /// Channels using the entry (joined and not yet left).
  private var holders = 0
  /// The cleanup handlers of the channels that joined, in joining order.
  private var cleanups: [(queue: Queue, handler: @Sendable (Int32) -> Void)] = []
  /// Set once the last holder has left.
  private var ended = false

  /// The entries of descriptors channels use, by number. An entry leaves it when it ends,
  /// after its flags are given back, under the same lock: a new entry for the number (the
  /// caller may close and reuse it once the cleanups have run) never sees the old one's
  /// O_NONBLOCK as the descriptor's own.
  private static let registry = LockedValue<[Int32: DescriptorEntry]>([:])

  private init(origin: Origin, fd: Int32) {
    self.origin = origin
    self.fd = fd
    queue = Queue(label: "io.channel")
    queue.namesThreads = false
  }

  /// An entry with no descriptor, for a channel that failed at creation.
  static func detached() -> DescriptorEntry { DescriptorEntry(origin: .none, fd: -1) }

  /// A path entry (not registered: its descriptor is its own), opened at its first use.
  static func forPath(_ path: String, flags: Int32, mode: mode_t) -> DescriptorEntry {
    DescriptorEntry(origin: .path(path, flags: flags, mode: mode), fd: -1)
  }

  /// Joins the entry of `fd`, making it if there is none, unless `check` (given the file's
  /// `st_mode`) finds the channel cannot use it. Returns the entry and 0, or nil and the
  /// error: `EBADF` for a descriptor that is not open, else `check`'s.
  static func join(
    fd: Int32, cleanup: (queue: Queue, handler: @Sendable (Int32) -> Void)?,
    check: (mode_t) -> Int32
  ) -> (DescriptorEntry?, Int32) {
    registry.withLock { entries in
      var status = stat()
      guard fd >= 0, fstat(fd, &status) == 0 else { return (nil, EBADF) }
      let error = check(status.st_mode)
      guard error == 0 else { return (nil, error) }
      let entry: DescriptorEntry
      let file = (device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
      if let found = entries[fd], found.file == file {
        entry = found
      } else {
        // None, or a stale one: its number was closed while a channel still used it (before
        // the cleanup handlers ran, against the contract) and now names another file. The
        // new file gets an entry of its own; the stale one leaves the table and ends alone.
        entry = make(fd: fd, mode: status.st_mode, file: file)
        entries[fd] = entry
      }
      entry.holders += 1
      if let cleanup { entry.cleanups.append(cleanup) }
      return (entry, 0)
    }
  }

  /// A new registered entry for `fd` (under the registry lock): typed now, and its flags set
  /// as libdispatch sets them (a file blocking, anything else non-blocking).
  private static func make(
    fd: Int32, mode: mode_t, file: (device: UInt64, inode: UInt64)
  ) -> DescriptorEntry {
    let type = mode & S_IFMT
    // Regular files and block devices, and character devices epoll refuses (/dev/null,
    // /dev/zero: EPERM), are read and written with blocking calls; a readiness source on
    // them would never fire.
    let isFile =
      type == S_IFREG || type == S_IFBLK || (type == S_IFCHR && !isPollable(fd))
    let flags = fcntl(fd, F_GETFL)
    var restoring: Int32?
    if flags >= 0 {
      let wanted = isFile ? flags & ~O_NONBLOCK : flags | O_NONBLOCK
      if wanted != flags, fcntl(fd, F_SETFL, wanted) == 0 { restoring = flags }
    }
    let entry = DescriptorEntry(origin: .descriptor(restoring: restoring), fd: fd)
    entry.file = file
    // Written before the entry is published (the registry lock orders them for every later
    // reader on `queue`).
    entry.prepared = true
    entry.isFile = isFile
    entry.isSocket = type == S_IFSOCK
    return entry
  }

  /// Whether epoll accepts `fd` (a scratch epoll set).
  static func isPollable(_ fd: Int32) -> Bool {
    let scratch = cls_epoll_create()
    guard scratch >= 0 else { return true }
    defer { _ = Glibc.close(scratch) }
    return cls_epoll_control(scratch, cls_epoll_ctl_add, fd, cls_epollin, 0) == 0
  }

  /// Whether `fd` still names the file the entry was made for (device and inode). Under the
  /// registry lock.
  private var namesItsFile: Bool {
    var status = stat()
    return fstat(fd, &status) == 0
      && (UInt64(status.st_dev), UInt64(status.st_ino)) == file
  }

  /// Joins an entry known to be alive (a path entry, or the entry of a channel that has not
  /// left it: it holds the entry while the caller runs on `queue`).
  func join(cleanup: (queue: Queue, handler: @Sendable (Int32) -> Void)?) {
    DescriptorEntry.registry.withLock { _ in
      precondition(!ended, "an entry joined after it ended")
      holders += 1
      if let cleanup { cleanups.append(cleanup) }
    }
  }

  /// One holder leaves (any thread). The last one ends the entry: its flags are given back
  /// and it leaves the registry (under the lock), then, on `queue`, a path entry closes its
  /// file and the cleanup handlers are submitted in joining order, each with 0.
  func leave() {
    let handlers: [(queue: Queue, handler: @Sendable (Int32) -> Void)]? =
      DescriptorEntry.registry.withLock { entries in
        holders -= 1
        guard holders == 0 else { return nil }
        ended = true
        // A stale entry (replaced in the table: its number names another file now) leaves
        // that file's flags alone. So does an entry whose number was closed early (before
        // the cleanup handlers, against the contract) and reopened on another file that no
        // channel uses: the flags go back only to the file the entry was made for. (A close
        // and reuse between this check and the `fcntl` would still slip through: only the
        // owner of the number can rule that out, by closing it after the cleanup handlers.)
        if case .descriptor(let restoring) = origin, entries[fd] === self {
          if let restoring, namesItsFile { _ = fcntl(fd, F_SETFL, restoring) }
          entries[fd] = nil
        }
        defer { cleanups = [] }
        return cleanups
      }
    guard let handlers else { return }
    queue.async { [self] in
      stopListening()
      if case .path = origin, fd >= 0 { _ = Glibc.close(fd) }
      fd = -1
      for cleanup in handlers {
        let handler = cleanup.handler
        cleanup.queue.async { handler(0) }
      }
    }
  }

  // MARK: Opening a path (on `queue`)

  /// Opens a path entry's file once, at its first use (an operation, or
  /// ``IOChannel/fileDescriptor`` in a barrier), with `O_NONBLOCK` unless it is a regular file
  /// (`typeAtCreation` from the channel's check): a FIFO with no writer then opens at once
  /// instead of freezing the queue, as in libdispatch. Returns 0 or the open's error.
  func prepare(typeAtCreation: mode_t) -> Int32 {
    guard !prepared else { return openFailure }
    prepared = true
    guard case .path(let path, let flags, let mode) = origin else { return openFailure }
    let regular = typeAtCreation == S_IFREG
    let wanted = (regular ? flags & ~O_NONBLOCK : flags | O_NONBLOCK) | O_CLOEXEC
    var opened: Int32
    repeat {
      opened = open(path, wanted, mode)
    } while opened < 0 && errno == EINTR
    guard opened >= 0 else {
      openFailure = errno
      return openFailure
    }
    fd = opened
    var status = stat()
    guard fstat(fd, &status) == 0 else {
      openFailure = errno
      return openFailure
    }
    let type = status.st_mode & S_IFMT
    isSocket = type == S_IFSOCK
    isFile =
      type == S_IFREG || type == S_IFBLK || (type == S_IFCHR && !DescriptorEntry.isPollable(fd))
    return 0
  }
}
