import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// The process's one inotify instance, shared by every ``FileSource``.
///
/// Walk-through:
/// 1. The first file source makes the instance (`inotify_init1`, non-blocking) and an
///    internal read source on its descriptor, targeting the serial queue `ld.file-watch`: the
///    I/O driver watches it like any other descriptor, and runs the reader inline on the
///    driver thread that saw it readable when that queue is idle. The hub then lives as long
///    as the process. (The reader counts as one of ``RuntimeStats/liveSources``.)
/// 2. A source joins with `inotify_add_watch("/proc/self/fd/N", mask | IN_MASK_ADD)`.
///    inotify returns the same watch descriptor (wd) for the same file, so the sources of
///    one file share one `Watch`: the sources, the kernel mask (the union of what they asked
///    for; it only grows while the watch lives, as `IN_MASK_ADD` makes it, and events no
///    source asked for are dropped by the filter in step 3), a private duplicate of a
///    descriptor of the file (a `WatchedFile`, to `fstat` it at each event) and the file's
///    state last seen.
/// 3. The reader reads every queued event, translates each into ``FileSource/Events`` with
///    the file's state (EXTEND: the size grew; LINK: the link count changed; DELETE: it
///    dropped to 0, see ``FileSource``; one `fstat` of the duplicate per file per read, made
///    outside the lock: `FileWatchHub+Translation.swift`), and or-s the events each activated
///    source asked for into its data, then schedules each source's handler on its target
///    queue (never inline: one hop from the reader).
/// 4. A source leaving (cancel) is removed from its watch; the last one removes the kernel
///    watch (`inotify_rm_watch`) and lets go of the duplicate (closed once no reader holds
///    it either). The `IN_IGNORED` the removal queues names a wd no longer in the table and is
///    skipped (the kernel hands out wds cyclically, so the number is not reused by the next
///    watch). An `IN_IGNORED` for a wd still in the table means the kernel dropped the watch
///    itself (the file system was unmounted): its sources get REVOKE and the watch is
///    forgotten.
/// 5. If the kernel's queue overflowed (`IN_Q_OVERFLOW`), events of any watch may be lost, its
///    `IN_IGNORED` included: every watch is checked with the kernel (a watch it dropped is
///    revoked as in step 4) and what its file's state shows changed is reported.
/// 6. A `read` that fails (other than `EAGAIN`, `EINTR`) is reported on standard error, once
///    per run of failures, and the reader pauses (10 ms, doubling up to 1 s) before it reads
///    again, so a failure that repeats does not make the driver spin.
///
/// Who may touch what: `table` is behind its lock, which also serialises every
/// `inotify_add_watch` and `inotify_rm_watch` with the table, so a joining source and the
/// last leaving one always agree on whether the kernel watch exists. No `fstat` and no
/// `close` runs under the lock (either may block on a network or FUSE file system, which
/// would hold up every source joining or leaving). `inotifyFD` is immutable and `reader` is
/// set once before the hub is published; `buffer` and `readFailures` are touched only by the
/// reader's handler (on its serial queue).
final class FileWatchHub: @unchecked Sendable {
  // @unchecked Sendable: `table` is behind its lock; `buffer` and `readFailures` are
  // confined to the reader's serial queue; `reader` is written once before publication;
  // `injectedReadFailures` is atomic; the rest is immutable.

  /// What the hub last saw of a watched file.
  struct FileState {
    var size: Int64
    var links: UInt64
    var modified: timespec
    var changed: timespec

    init(_ info: stat) {
      size = Int64(info.st_size)
      links = UInt64(info.st_nlink)
      modified = info.st_mtim
      changed = info.st_ctim
    }
  }

  /// The private duplicate of a watched file's descriptor. Shared by its watch and by any
  /// reader that took it to `fstat` outside the lock, and closed when the last of them lets
  /// go: so a reader's `fstat` never reaches a number closed (and perhaps reused) by a
  /// source leaving meanwhile, and the `close` happens outside the lock.
  final class WatchedFile: Sendable {
    let fd: Int32

    init(fd: Int32) { self.fd = fd }

    deinit { close(fd) }

    /// The file's state now, or nil if `fstat` fails. Never under the table's lock.
    func state() -> FileState? {
      var info = stat()
      return fstat(fd, &info) == 0 ? FileState(info) : nil
    }
  }

  /// One kernel watch: every source of one file.
  struct Watch {
    var sources: [FileSourceCore]
    /// The inotify mask the kernel has for the file.
    var mask: UInt32
    /// A duplicate of the first source's descriptor; its identity is the watch's (a wd the
    /// kernel gives to another watch later comes with another file).
    let file: WatchedFile
    var state: FileState
    /// Whether the file is a directory (entries changing count as WRITE).
    let isDirectory: Bool

    /// The kernel's mask grew by `mask` (`IN_MASK_ADD`): starts tracking from `now` what the
    /// watch did not see before, without losing a change of what it did see that the reader
    /// has not taken yet.
    mutating func widen(by mask: UInt32, now: FileState) {
      let gained = mask & ~self.mask
      if gained & cls_in_modify != 0 { state.size = now.size }
      if gained & cls_in_attrib != 0 { state.links = now.links }
      self.mask |= mask
    }
  }

  struct Table {
    var watches: [Int32: Watch] = [:]
    /// The wd each listed source is in.
    var wdOfSource: [ObjectIdentifier: Int32] = [:]
    /// Called with a duplicate's descriptor just before the reader `fstat`s it, outside the
    /// lock (for tests: lets a source leave while the reader translates).
    var beforeStat: (@Sendable (Int32) -> Void)?
  }

  let inotifyFD: Int32
  /// Protected by: its lock (see the type's notes).
  let table = LockedValue(Table())
  /// The internal read source on `inotifyFD`. Set once by `startSlow`, before the hub is
  /// published (under `shared`'s lock, which every later reader of it took first).
  private var reader: ReadSource?
  /// The reader's target queue. Set with `reader`.
  private var readerQueue: Queue?
  /// The read buffer, allocated once: the hub is never released (it is published for the
  /// process's life), so the memory is never freed. Only touched by the reader's handler,
  /// which runs on one serial queue, one run at a time.
  private let buffer = UnsafeMutableRawPointer.allocate(
    byteCount: Int(cls_inotify_buffer_size), alignment: 8)
  /// The reads that failed in a row (step 6): 0 after one that worked. Only touched by the
  /// reader's handler.
  private var readFailures = 0
  /// How many of the next reads fail with `EIO` without calling `read` (for tests). Atomic;
  /// the reader is the only one to decrement it.
  private let injectedReadFailures = Atomic<Int>(0)

  private init(inotifyFD: Int32) {
    self.inotifyFD = inotifyFD
  }

  /// Only a hub whose start failed goes away (a started one is kept for the process's life):
  /// its reader never registered, so nothing reads into the buffer.
  deinit {
    buffer.deallocate()
  }

  // MARK: Starting

  /// The hub once started; never replaced. Protected by: its lock, which also serialises
  /// starts (so two first sources never make two instances).
  private static let shared = LockedValue<FileWatchHub?>(nil)

  /// The hub, started on first use. A start the system refuses is an error for the source
  /// that asked (`fd` names it in the message), with nothing kept: the next source tries
  /// again. Any thread.
  static func start(for fd: Int32) throws(EventLoopError) -> FileWatchHub {
    let result = shared.withLock { hub -> Result<FileWatchHub, EventLoopError> in
      if let hub { return .success(hub) }
      let made = startSlow(for: fd)
      if case .success(let started) = made { hub = started }
      return made
    }
    return try result.get()
  }

  @inline(never)
  private static func startSlow(for fd: Int32) -> Result<FileWatchHub, EventLoopError> {
    let inotifyFD = cls_inotify_create()
    if inotifyFD < 0 { return .failure(.fileWatchFailed(fd, call: "inotify_init1", errno: errno)) }
    let hub = FileWatchHub(inotifyFD: inotifyFD)
    let queue = Queue(label: "ld.file-watch")
    let reader: ReadSource
    do throws(EventLoopError) {
      reader = try ReadSource(fd: inotifyFD, queue: queue, label: "file-watch")
    } catch {
      close(inotifyFD)
      return .failure(error)
    }
    // The handler holds the hub (which lives for the process's life anyway).
    reader.setEventHandler { hub.readEvents() }
    reader.activate()
    if let error = reader.registrationError {
      // The I/O driver could not start or refused the descriptor: nothing watches it. The
      // descriptor is closed once the cancel has removed whatever was registered.
      reader.setCancelHandler { close(inotifyFD) }
      reader.cancel()
      return .failure(error)
    }
    hub.reader = reader
    hub.readerQueue = queue
    return .success(hub)
  }

  // MARK: Joining and leaving

  /// The inotify events that report `events` (IN_UNMOUNT and IN_IGNORED always come).
  static func kernelMask(for events: FileSource.Events, directory: Bool) -> UInt32 {
    var mask: UInt32 = 0
    if !events.isDisjoint(with: [.write, .extend]) {
      mask |= cls_in_modify
      if directory { mask |= UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) }
    }
    if !events.isDisjoint(with: [.attrib, .link, .delete]) { mask |= cls_in_attrib }
    if events.contains(.delete) { mask |= cls_in_delete_self }
    if events.contains(.rename) { mask |= cls_in_move_self }
    return mask
  }

  /// Lists `core` in the watch of its file, adding the kernel watch (or widening its mask).
  /// Any thread.
  /// - Throws: ``EventLoopError/fileWatchFailed(_:call:errno:)`` if inotify refuses;
  ///   ``EventLoopError/registrationFailed(errno:)`` if no descriptor is left for the
  ///   duplicate.
  func join(_ core: FileSourceCore) throws(EventLoopError) {
    let fd = core.fd
    // Before the lock (no `fstat` under it); still before the kernel watch is added or
    // widened, so no event of a change after it is missed.
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw .closedDescriptor(fd) }
    let isDirectory = info.st_mode & S_IFMT == S_IFDIR
    let mask = Self.kernelMask(for: core.events, directory: isDirectory)
    let result = table.withLock { table -> Result<Void, EventLoopError> in
      let wd = cls_inotify_watch_descriptor(inotifyFD, fd, mask | cls_in_mask_add)
      if wd < 0 {
        return .failure(.fileWatchFailed(fd, call: "inotify_add_watch", errno: errno))
      }
      table.wdOfSource[ObjectIdentifier(core)] = wd
      if var watch = table.watches[wd] {
        // The file is watched already: the kernel or-ed the new mask in (IN_MASK_ADD).
        watch.widen(by: mask, now: FileState(info))
        watch.sources.append(core)
        table.watches[wd] = watch
        return .success(())
      }
      let duplicate = fcntl(fd, F_DUPFD_CLOEXEC, 0)
      if duplicate < 0 {
        let code = errno
        _ = cls_inotify_unwatch(inotifyFD, wd)
        table.wdOfSource[ObjectIdentifier(core)] = nil
        return .failure(.registrationFailed(errno: code))
      }
      table.watches[wd] = Watch(
        sources: [core], mask: mask, file: WatchedFile(fd: duplicate), state: FileState(info),
        isDirectory: isDirectory)
      return .success(())
    }
    try result.get()
  }

  /// Unlists `core`; the last source of a file removes the kernel watch. Any thread.
  func leave(_ core: FileSourceCore) {
    let released = table.withLock { table -> WatchedFile? in
      guard let wd = table.wdOfSource.removeValue(forKey: ObjectIdentifier(core)),
        var watch = table.watches[wd]
      else { return nil }
      watch.sources.removeAll { $0 === core }
      if !watch.sources.isEmpty {
        table.watches[wd] = watch
        return nil
      }
      table.watches[wd] = nil
      // EINVAL: the kernel dropped the watch already (its IN_IGNORED is still queued).
      _ = cls_inotify_unwatch(inotifyFD, wd)
      return watch.file
    }
    // The duplicate is closed here, after the lock, unless a reader still holds it.
    withExtendedLifetime(released) {}
  }

  // MARK: Reading events

  /// The reader's handler: reads and translates every queued event, then merges each
  /// source's events and schedules its handler. On the reader's serial queue.
  private func readEvents() {
    var merged: Merged = [:]
    reading: while true {
      switch readKernelQueue() {
      case .read(let length):
        readFailures = 0
        translate(Self.events(in: buffer, length: length), into: &merged)
      case .empty:
        readFailures = 0
        break reading  // All read (the read source re-arms after us).
      case .interrupted:
        continue
      case .failed(let code):
        readFailedSlow(code)
        break reading
      }
    }
    // Outside the lock: a handler that runs at once may cancel its source (`leave`).
    for (core, events) in merged.values {
      core.signal(events, mayRunInline: false)
    }
  }

  /// What one `read` of the inotify descriptor gave.
  private enum ReadOutcome {
    /// This many bytes of whole events.
    case read(Int)
    /// Nothing queued (`EAGAIN`).
    case empty
    case interrupted
    case failed(Int32)
  }

  /// One `read` of the kernel's queue into `buffer` (or a failure injected by a test).
  private func readKernelQueue() -> ReadOutcome {
    if injectedReadFailures.load(ordering: .relaxed) > 0 {
      // The reader alone decrements; a test may store a new count meanwhile, which the
      // compare-exchange sees (the count never goes below 0).
      var left = injectedReadFailures.load(ordering: .relaxed)
      while left > 0 {
        let (done, actual) = injectedReadFailures.compareExchange(
          expected: left, desired: left - 1, ordering: .relaxed)
        if done { return .failed(EIO) }
        left = actual
      }
    }
    let length = read(inotifyFD, buffer, Int(cls_inotify_buffer_size))
    if length > 0 { return .read(length) }
    // 0 cannot come from inotify (a buffer too small for the next event is EINVAL): take it
    // as nothing to read rather than loop on it.
    if length == 0 { return .empty }
    switch errno {
    case EAGAIN: return .empty
    case EINTR: return .interrupted
    case let code: return .failed(code)
    }
  }

  /// Step 6: a read failed. Says so (once per run of failures, which a read that works
  /// ends), and pauses the reader: the descriptor is still readable, so reading again at once
  /// would fail again at once, every turn of the driver. The pause doubles with each failure
  /// in a row, from 10 ms to at most 1 s; the events wait in the kernel's queue
  /// meanwhile (and a long run of failures may overflow it, which step 5 recovers from).
  /// Reader's queue.
  @inline(never)
  private func readFailedSlow(_ code: Int32) {
    readFailures += 1
    let pause = Duration.milliseconds(Swift.min(10 << Swift.min(readFailures - 1, 7), 1000))
    if readFailures == 1 {
      writeStandardError(
        "LoopDispatch: file sources: reading the inotify descriptor failed (errno \(code): "
          + "\(String(cString: strerror(code)))); retrying after a pause, doubling while it "
          + "fails: file events may arrive late\n")
    }
    guard let reader else { return }
    reader.suspend()
    // The hub lives for the process's life: the timer may hold the reader.
    _ = ServiceLoop.shared.schedule(after: pause) { reader.resume() }
  }

  // MARK: For tests

  /// The number of kernel watches.
  var watchCount: Int { table.withLock { $0.watches.count } }

  /// Stops reading events until `resumeReading` (lets the kernel's queue fill up and
  /// overflow). When it returns, no read is in progress and none starts. Any thread but the
  /// reader's queue.
  func suspendReading() {
    reader?.suspend()
    readerQueue?.sync {}  // Waits out a reader run that started before the suspend.
  }

  /// Undoes `suspendReading`. Any thread.
  func resumeReading() { reader?.resume() }

  /// The wd `core` is listed under, or nil.
  func watchDescriptor(of core: FileSourceCore) -> Int32? {
    table.withLock { $0.wdOfSource[ObjectIdentifier(core)] }
  }

  /// Handles one event as if it had been read from the kernel (the kernel sends
  /// `IN_UNMOUNT` and an unrequested `IN_IGNORED` only once a file system goes, which a
  /// source's open descriptor prevents). Any thread.
  func handleForTesting(mask: UInt32, wd: Int32) {
    var merged: Merged = [:]
    translate([KernelEvent(wd: wd, mask: mask)], into: &merged)
    for (core, events) in merged.values {
      core.signal(events, mayRunInline: false)
    }
  }

  /// Makes the next `count` reads of the kernel's queue fail with `EIO` (0: none). Any
  /// thread.
  func failReadsForTesting(_ count: Int) {
    injectedReadFailures.store(count, ordering: .relaxed)
  }

  /// Sets (or, with nil, clears) the hook called just before each `fstat` of the reader.
  /// Any thread.
  func setBeforeStatForTesting(_ hook: (@Sendable (Int32) -> Void)?) {
    table.withLock { $0.beforeStat = hook }
  }
}
