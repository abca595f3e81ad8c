import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// Readiness of a file descriptor, delivered to a queue: see ``ReadSource`` and
/// ``WriteSource``.
///
/// Walk-through:
/// 1. On activation the descriptor gets a one-shot registration with the I/O driver
///    (`Delivery/IODriver.swift`; the handler runs on the driver thread that saw the event
///    when the target serial queue is idle, else on the target queue), or a persistent
///    watch on the main loop when the target is the main queue (the handler usually runs inline, so no re-arm system
///    calls are needed; the watch is paused whenever the delivery cannot run inline). A
///    regular file is always ready, as in GCD: it gets no watch, and a delivery is due
///    while bytes remain.
/// 2. The main loop watches a private duplicate of the descriptor (made at activation,
///    closed after the watch is removed), so the registration in the loop's epoll set
///    belongs to this source alone: a client that closes its descriptor too early cannot
///    leave a registration the loop can no longer remove. When the watch fires, the loop
///    checks that the client's descriptor still refers to the file it had at creation (device
///    and inode): on the source's first event, and then on every 8th event (the 8th, 16th,
///    ... of this source) that comes `identityCheckIntervalMicroseconds` (1 ms) or more after
///    the last check that passed, so a stream of events costs one `fstat` per millisecond
///    instead of one each. If the number was closed and reused, the event belongs to someone
///    else: the watch is removed for good (and the duplicate closed), one warning line says
///    so, and the source never fires again; its cancel handler still runs once. Events of an
///    old file kept open elsewhere can reach the handler after the reuse until the first 8th
///    event 1 ms or more after the last check that passed: those within that millisecond,
///    and then up to 7 more, however late they come (the 7 after a check, whose time is not
///    looked at; see `mainLoopReadinessFired` for why). (The driver's registrations are
///    one-shot and tied to the file: its re-arm fails on a reused number, after at most one
///    such event.) Otherwise readiness is merged and a delivery scheduled.
/// 3. The handler runs on the target queue; `data` is computed when the handler first reads it. Only
///    after it returns is the watch re-armed (by that thread, with `epoll_ctl`, for the driver), so unread data fires again (level semantics)
///    without the loop spinning while the handler works. Hang-up and errors show as
///    readiness; a read then returns 0 or the error.
/// 4. Cancel removes the watch on the loop; only then may the cancel handler close the
///    descriptor.
final class FileDescriptorCore: SourceCore, @unchecked Sendable {
  // @unchecked Sendable: `watchState` is behind its lock; the base documents the rest.
  let fd: Int32
  let interest: FDInterest
  let label: String
  /// The file `fd` named at creation (the main loop's per-event check).
  private let identity: FileIdentity
  private let isRegularFile: Bool
  private let isListeningSocket: Bool
  private let isSocket: Bool
  /// Whether the watch stays armed between events (main-queue targets; see step 1).
  /// Whether the watch stays armed between events: sources delivering on the main loop
  /// (see `SourceCore.deliversOnMainLoop`, fixed at activation).
  private var persistentWatch: Bool { deliversOnMainLoop }

  private struct WatchState {
    /// The main loop's watch (main-queue targets), on `privateFD`.
    var watch: FDWatch?
    /// The duplicate of `fd` the main loop's watch is on (-1: none). Closed by whoever
    /// removes the watch, once it is removed.
    var privateFD: Int32 = -1
    /// The I/O driver's entry (every other target; see `Delivery/IODriver.swift`).
    var entry: IOEntry?
    var tornDown = false
  }
  /// Protected by: its lock.
  private let watchState = LockedValue(WatchState())

  init(fd: Int32, interest: FDInterest, queue: Queue, label: String) throws(EventLoopError) {
    if fd < 0 { throw .negativeDescriptor(fd) }
    var info = stat()
    if fstat(fd, &info) != 0 {
      throw errno == EBADF ? .closedDescriptor(fd) : .registrationFailed(errno: errno)
    }
    let type = info.st_mode & S_IFMT
    if type == S_IFDIR { throw .notPollable(fd, kind: "directory") }
    self.fd = fd
    self.interest = interest
    self.label = label
    identity = FileIdentity(info)
    isRegularFile = type == S_IFREG
    isSocket = type == S_IFSOCK
    var accepting: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    isListeningSocket =
      isSocket && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0
      && accepting != 0
    super.init(queue: queue, merge: .replace)
  }

  override func arm() {
    if isRegularFile {
      signal(1, mayRunInline: false)  // From `activate()`: never inside the client's call.
      return
    }
    watchState.withLock { state in
      guard !state.tornDown else { return }
      if !persistentWatch {
        // Starting the driver may fail too (no descriptor left for its epoll set): an error
        // for this source alone; the next source tries again.
        switch IODriver.start().flatMap({ $0.register(self, fd: fd, interest: interest) }) {
        case .success(let entry): state.entry = entry
        case .failure(let error): failRegistration(.registrationFailed(errno: error.code), fd: fd)
        }
        return
      }
      let duplicate = fcntl(fd, F_DUPFD_CLOEXEC, 0)
      if duplicate < 0 {
        failRegistration(.registrationFailed(errno: errno), fd: fd)
        return
      }
      do throws(EventLoopError) {
        state.watch = try EventLoop.main.watch(
          fd: duplicate, for: interest, oneShot: false,
          eventHandler: { [self] _ in mainLoopReadinessFired() })
        state.privateFD = duplicate
      } catch {
        close(duplicate)
        failRegistration(error, fd: fd)
      }
    }
  }

  /// The registration could not be made: the source will never fire. Recorded for
  /// ``Source/registrationError`` and written as one warning line; cancel still completes.
  private func failRegistration(_ error: EventLoopError, fd: Int32) {
    recordRegistrationError(error)
    writeStandardError(
      "LoopDispatch: \(label) could not watch fd \(fd): \(error); the source will not fire\n")
  }

  /// An I/O driver thread saw readiness (the registration is tied to the file: a reused
  /// number reaches this source only if the old file is still open elsewhere, once, and
  /// the re-arm then fails). Returns how the
  /// delivery went: the driver releases a source that did not take the event
  /// (`IOEntry.swift`, rule 4).
  func readinessFired() -> Scheduling {
    signal(1)
  }

  /// How long a main-queue source trusts its last identity check: an event arriving later
  /// than this after the last check that passed is checked again (`fstat`) before delivery.
  static let identityCheckIntervalMicroseconds: UInt64 = 1_000  // 1 ms.

  /// The loop's turn time (`EventLoop.turnMicroseconds`) of the last identity check of `fd`
  /// that passed (0: never, so the first event is always checked). Main loop thread only,
  /// after activation.
  private var identityCheckedAt: UInt64 = 0
  /// Events seen since the source last looked at the turn time (modulo 2⁶⁴). Main loop
  /// thread only.
  private var eventsSinceTimeLook: UInt64 = 0

  /// Main loop thread.
  private func mainLoopReadinessFired() {
    // The check costs a system call, as much as the rest of a ping-pong event: it runs only
    // when the last check that passed is older than the interval, by the time libevent took
    // when this turn's `epoll_wait` returned (no clock call). That time follows the wall
    // clock: a step backwards (`now` below the last check) checks at once.
    // The time itself is looked at on every 8th event only (and on the first): reading it is
    // a libevent call and its conversion, 62 of the ~1,400 instructions of a ping-pong event
    // (callgrind: 293M instructions for the ping-pong looking on each event, 280M on every
    // 8th). The price: the 7 events after a look are not checked however late they come.
    // So a number closed and reused after a check may deliver events of the old file until
    // the first 8th event at least the interval after that check: all within the interval,
    // then up to 7 more (the `reused-number-slow-main` scenario counts them).
    eventsSinceTimeLook &+= 1
    if identityCheckedAt == 0 || eventsSinceTimeLook & 7 == 0,
      case let now = EventLoop.mainTurnMicroseconds(),
      now < identityCheckedAt || now - identityCheckedAt >= Self.identityCheckIntervalMicroseconds
    {
      guard FileIdentity(of: fd) == identity else {
        dropStaleMainLoopWatch()
        return
      }
      identityCheckedAt = now
    }
    if signal(1) != .ranInline && persistentWatch {
      // The handler will run later (or not until resumed): stop level-triggered readiness
      // from waking the loop every turn meanwhile. `didDeliver` re-arms it.
      watchState.withLock { $0.watch }?.pause()
      mainWatchPaused = true
    }
  }

  /// Whether `mainLoopReadinessFired` paused the main loop's watch since the last delivery.
  /// Main loop thread only: a main-loop source's events and deliveries all run there (its
  /// target chain ends at the main queue), so the common delivery, which finds the watch
  /// still armed, re-arms nothing and takes no lock.
  private var mainWatchPaused = false

  /// The client's number names another file now: the main loop's watch is removed for good,
  /// so the loop does not wake for the old file every turn (it may still be open through
  /// another descriptor), and the warning is written once. Main loop thread.
  private func dropStaleMainLoopWatch() {
    let removed = watchState.withLock { state -> (FDWatch, Int32)? in
      guard let watch = state.watch else { return nil }
      defer {
        state.watch = nil
        state.privateFD = -1
      }
      return (watch, state.privateFD)
    }
    guard let (watch, duplicate) = removed else { return }
    watch.cancel { close(duplicate) }
    writeStandardError(
      "LoopDispatch: \(label): fd \(fd) was closed (and perhaps reused) while the source watched it; "
        + "cancel a source before closing its descriptor. The source will not fire again.\n")
  }

  override func didDeliver() {
    if isRegularFile {
      if interest == .write || remainingFileBytes() > 0 { signal(1, mayRunInline: false) }
      return
    }
    if persistentWatch {
      // Main loop thread (see `mainWatchPaused`).
      guard mainWatchPaused else { return }
      mainWatchPaused = false
      watchState.withLock { $0.watch }?.rearm()
      return
    }
    let entry = watchState.withLock { $0.entry }
    if let entry {
      if !entry.driver.rearm(entry, self) {
        writeStandardError(
          "LoopDispatch: \(label): fd \(fd) was closed (and perhaps reused) while the source watched it; "
            + "cancel a source before closing its descriptor. The source will not fire again.\n")
      }
    }
  }

  /// The cancel protocol's state and the driver's view of the registration, for a test's
  /// failure message (see `SourceCore.protocolDescription`). Any thread; a snapshot.
  override var protocolDescription: String {
    let entry = watchState.withLock { $0.entry }
    guard let entry else { return super.protocolDescription + ", no driver entry" }
    // Both locks, in their order (tables, then entry): one consistent snapshot.
    let registration = entry.driver.lock.withLock { tables in
      entry.state.withLock { state in
        let sources = state[interest]
        return "entry fd \(entry.fd) token \(entry.token) armed \(state.armed)"
          + " sources \(sources.cores.count) owing \(sources.owing)"
          + " deliveredSinceFire \(sources.deliveredSinceFire)"
          + " evicted \(state.evicted) removed \(state.removed)"
          + " current \(tables.byToken[entry.token] === entry)"
      }
    }
    // Whether the number still names the source's file: false when something closed it
    // (and perhaps reopened the number) while the source watched it.
    return super.protocolDescription + ", " + registration
      + ", fd names its file \(FileIdentity(of: fd) == identity)"
      + ", readable \(cls_bytes_readable(fd))"
  }

  /// FIONREAD (or the socket's send space) costs a system call: only if the handler asks.
  override var computesDataLazily: Bool { true }

  override func dataForDelivery(_ merged: UInt) -> UInt {
    switch interest {
    case .read:
      if isRegularFile { return UInt(remainingFileBytes()) }
      if isListeningSocket { return 1 }
      return UInt(Swift.max(0, cls_bytes_readable(fd)))
    case .write:
      guard isSocket else { return 1 }
      var size: Int32 = 0
      var length = socklen_t(MemoryLayout<Int32>.size)
      guard getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &length) == 0 else { return 1 }
      let unsent = Swift.max(0, cls_socket_unsent(fd))
      return UInt(Swift.max(1, Int(size) - Int(unsent)))
    }
  }

  private func remainingFileBytes() -> Int {
    var info = stat()
    guard fstat(fd, &info) == 0 else { return 0 }
    let offset = lseek(fd, 0, SEEK_CUR)
    return offset < 0 ? 0 : Swift.max(0, Int(info.st_size) - Int(offset))
  }

  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    let (watch, entry, duplicate) = watchState.withLock { state -> (FDWatch?, IOEntry?, Int32) in
      state.tornDown = true
      defer {
        state.watch = nil
        state.entry = nil
        state.privateFD = -1
      }
      return (state.watch, state.entry, state.privateFD)
    }
    if let entry {
      // Once this returns no readiness reaches the source; the descriptor may be closed.
      entry.driver.unregister(entry, self)
      completion()
    } else if let watch {
      // The duplicate is closed only once the loop no longer watches it.
      watch.cancel {
        close(duplicate)
        completion()
      }
    } else {
      completion()
    }
  }
}

/// Delivers "readable" for a descriptor to a queue. ``Source/data`` is the number of bytes
/// available to read (1 for a listening socket; the bytes left for a regular file, which is
/// always ready).
///
/// Cancel the source before closing the descriptor, and close it in the cancel handler. (A
/// source whose target is the main queue watches a duplicate of the descriptor until it is
/// cancelled: a descriptor closed without cancelling keeps its file open meanwhile, so a
/// socket's peer sees no end of file until the cancel.)
public final class ReadSource: Source, @unchecked Sendable {
  /// The watched descriptor.
  public let fd: Int32

  /// Creates an inactive read source for `fd` whose handler runs on `queue`.
  /// - Throws: ``EventLoopError`` for a negative or closed descriptor or a directory.
  public init(fd: Int32, queue: Queue = .global(), label: String = "read-source")
    throws(EventLoopError)
  {
    self.fd = fd
    let core = try FileDescriptorCore(
      fd: fd, interest: .read, queue: queue, label: "read source \"\(label)\"")
    super.init(core: core, label: label)
  }
}

/// Delivers "writable" for a descriptor to a queue. ``Source/data`` estimates the bytes that
/// can be written (socket buffer space; 1 for other descriptors).
///
/// Cancel the source before closing the descriptor, and close it in the cancel handler (see
/// ``ReadSource`` for what a main-queue source does when it is not).
public final class WriteSource: Source, @unchecked Sendable {
  /// The watched descriptor.
  public let fd: Int32

  /// Creates an inactive write source for `fd` whose handler runs on `queue`.
  /// - Throws: ``EventLoopError`` for a negative or closed descriptor or a directory.
  public init(fd: Int32, queue: Queue = .global(), label: String = "write-source")
    throws(EventLoopError)
  {
    self.fd = fd
    let core = try FileDescriptorCore(
      fd: fd, interest: .write, queue: queue, label: "write source \"\(label)\"")
    super.init(core: core, label: label)
  }
}
