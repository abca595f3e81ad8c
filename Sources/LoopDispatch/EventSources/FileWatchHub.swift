import CLoopShims
import Glibc
import MainLoop

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
///    descriptor of the file (to `fstat` it at each event) and the file's state last seen.
/// 3. The reader reads every queued event, translates each into ``FileSource/Events`` with
///    one `fstat` of the watch's duplicate (EXTEND: the size grew; LINK: the link count
///    changed; DELETE: it dropped to 0, see ``FileSource``), and or-s the events each
///    activated source asked for into its data, then schedules each source's handler on its
///    target queue (never inline: one hop from the reader).
/// 4. A source leaving (cancel) is removed from its watch; the last one removes the kernel
///    watch (`inotify_rm_watch`) and closes the duplicate. The `IN_IGNORED` the removal
///    queues names a wd no longer in the table and is skipped (the kernel hands out wds
///    cyclically, so the number is not reused by the next watch). An `IN_IGNORED` for a wd
///    still in the table means the kernel dropped the watch itself (the file system was
///    unmounted): its sources get REVOKE and the watch is forgotten.
///
/// Who may touch what: `table` is behind its lock, which also serialises every
/// `inotify_add_watch` and `inotify_rm_watch` with the table, so a joining source and the
/// last leaving one always agree on whether the kernel watch exists. `inotifyFD` is
/// immutable and `reader` is set once before the hub is published; `buffer` is touched only
/// by the reader's handler (on its serial queue).
final class FileWatchHub: @unchecked Sendable {
  // @unchecked Sendable: `table` is behind its lock; `buffer` is confined to the reader's
  // serial queue; `reader` is written once before publication; the rest is immutable.

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

  /// One kernel watch: every source of one file.
  struct Watch {
    var sources: [FileSourceCore]
    /// The inotify mask the kernel has for the file.
    var mask: UInt32
    /// A duplicate of the first source's descriptor (closed when the watch is removed).
    let statFD: Int32
    var state: FileState
    /// Whether the file is a directory (entries changing count as WRITE).
    let isDirectory: Bool
  }

  struct Table {
    var watches: [Int32: Watch] = [:]
    /// The wd each listed source is in.
    var wdOfSource: [ObjectIdentifier: Int32] = [:]
  }

  let inotifyFD: Int32
  /// Protected by: its lock (see the type's notes).
  let table = LockedValue(Table())
  /// The internal read source on `inotifyFD`. Set once by `startSlow`, before the hub is
  /// published (under `shared`'s lock, which every later reader of it took first).
  private var reader: ReadSource?
  /// The read buffer, allocated once: the hub is never released (it is published for the
  /// process's life), so the memory is never freed. Only touched by the reader's handler,
  /// which runs on one serial queue, one run at a time.
  private let buffer = UnsafeMutableRawPointer.allocate(
    byteCount: Int(cls_inotify_buffer_size), alignment: 8)

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
    let reader: ReadSource
    do throws(EventLoopError) {
      reader = try ReadSource(
        fd: inotifyFD, queue: Queue(label: "ld.file-watch"), label: "file-watch")
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
    let result = table.withLock { table -> Result<Void, EventLoopError> in
      var info = stat()
      guard fstat(fd, &info) == 0 else { return .failure(.closedDescriptor(fd)) }
      let isDirectory = info.st_mode & S_IFMT == S_IFDIR
      let mask = Self.kernelMask(for: core.events, directory: isDirectory)
      let wd = cls_inotify_watch_descriptor(inotifyFD, fd, mask | cls_in_mask_add)
      if wd < 0 {
        return .failure(.fileWatchFailed(fd, call: "inotify_add_watch", errno: errno))
      }
      table.wdOfSource[ObjectIdentifier(core)] = wd
      if var watch = table.watches[wd] {
        // The file is watched already: the kernel or-ed the new mask in (IN_MASK_ADD).
        let gained = mask & ~watch.mask
        if gained != 0 {
          // Start tracking from now what the watch did not see before (without losing a
          // change of what it did see that the reader has not taken yet).
          let now = FileState(info)
          if gained & cls_in_modify != 0 { watch.state.size = now.size }
          if gained & cls_in_attrib != 0 { watch.state.links = now.links }
        }
        watch.mask |= mask
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
        sources: [core], mask: mask, statFD: duplicate, state: FileState(info),
        isDirectory: isDirectory)
      return .success(())
    }
    try result.get()
  }

  /// Unlists `core`; the last source of a file removes the kernel watch. Any thread.
  func leave(_ core: FileSourceCore) {
    table.withLock { table in
      guard let wd = table.wdOfSource.removeValue(forKey: ObjectIdentifier(core)),
        var watch = table.watches[wd]
      else { return }
      watch.sources.removeAll { $0 === core }
      if !watch.sources.isEmpty {
        table.watches[wd] = watch
        return
      }
      table.watches[wd] = nil
      // EINVAL: the kernel dropped the watch already (its IN_IGNORED is still queued).
      _ = cls_inotify_unwatch(inotifyFD, wd)
      close(watch.statFD)
    }
  }

  /// The number of kernel watches (for tests).
  var watchCount: Int { table.withLock { $0.watches.count } }

  /// Stops reading events until `resumeReading` (for tests: lets the kernel's queue fill up
  /// and overflow). Any thread.
  func suspendReading() { reader?.suspend() }

  /// Undoes `suspendReading`. Any thread.
  func resumeReading() { reader?.resume() }

  /// The wd `core` is listed under, or nil (for tests).
  func watchDescriptor(of core: FileSourceCore) -> Int32? {
    table.withLock { $0.wdOfSource[ObjectIdentifier(core)] }
  }

  /// Handles one event as if it had been read from the kernel (for tests: the kernel sends
  /// `IN_UNMOUNT` and an unrequested `IN_IGNORED` only once a file system goes, which a
  /// source's open descriptor prevents). Any thread.
  func handleForTesting(mask: UInt32, wd: Int32) {
    var merged: [ObjectIdentifier: (FileSourceCore, UInt)] = [:]
    table.withLock { translate(mask, wd, in: &$0, into: &merged) }
    for (core, events) in merged.values {
      core.signal(events, mayRunInline: false)
    }
  }

  // MARK: Reading events

  /// The reader's handler: reads and translates every queued event, then merges each
  /// source's events and schedules its handler. On the reader's serial queue.
  private func readEvents() {
    var merged: [ObjectIdentifier: (FileSourceCore, UInt)] = [:]
    while true {
      let length = read(inotifyFD, buffer, Int(cls_inotify_buffer_size))
      if length <= 0 { break }  // EAGAIN: all read (the read source re-arms after us).
      table.withLock { table in
        var offset: Int32 = 0
        var wd: Int32 = 0
        var mask: UInt32 = 0
        while true {
          offset = cls_inotify_event_at(buffer, Int32(length), offset, &wd, &mask)
          if offset < 0 { break }
          if mask & cls_in_q_overflow != 0 {
            for wd in Array(table.watches.keys) {
              translateOverflow(wd, in: &table, into: &merged)
            }
          } else {
            translate(mask, wd, in: &table, into: &merged)
          }
        }
      }
    }
    // Outside the lock: a handler that runs at once may cancel its source (`leave`).
    for (core, events) in merged.values {
      core.signal(events, mayRunInline: false)
    }
  }

  /// Translates one event of `wd` and merges it into the sources that asked for it. Under
  /// the lock.
  private func translate(
    _ mask: UInt32, _ wd: Int32, in table: inout Table,
    into merged: inout [ObjectIdentifier: (FileSourceCore, UInt)]
  ) {
    guard var watch = table.watches[wd] else { return }  // Removed by `leave`.
    var events: FileSource.Events = []
    if mask & (cls_in_modify | cls_in_attrib) != 0 {
      var info = stat()
      if fstat(watch.statFD, &info) == 0 {
        let now = FileState(info)
        if mask & cls_in_modify != 0 {
          events.insert(.write)
          if now.size > watch.state.size { events.insert(.extend) }
          watch.state.size = now.size
        }
        if mask & cls_in_attrib != 0 {
          events.insert(.attrib)
          if now.links != watch.state.links { events.insert(.link) }
          // The unlink of the last name while the file is open (IN_DELETE_SELF waits for
          // the last close, and the duplicate holds the file open).
          if now.links == 0 && watch.state.links != 0 { events.insert(.delete) }
          watch.state.links = now.links
        }
        watch.state.modified = now.modified
        watch.state.changed = now.changed
      }
    }
    if watch.isDirectory
      && mask & UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) != 0
    {
      events.insert(.write)
    }
    if mask & cls_in_delete_self != 0 { events.insert(.delete) }
    if mask & cls_in_move_self != 0 { events.insert(.rename) }
    if mask & cls_in_unmount != 0 { events.insert(.revoke) }
    if mask & cls_in_ignored != 0 {
      // Not our removal (that unlisted the wd first): the kernel dropped the watch.
      events.insert(.revoke)
      table.watches[wd] = nil
      for core in watch.sources { table.wdOfSource[ObjectIdentifier(core)] = nil }
      close(watch.statFD)
    } else {
      table.watches[wd] = watch
    }
    Self.merge(events, into: watch.sources, &merged)
  }

  /// Events of `wd` may have been lost (the kernel's queue overflowed): reports what the
  /// file's state shows changed since it was last seen. Under the lock.
  private func translateOverflow(
    _ wd: Int32, in table: inout Table,
    into merged: inout [ObjectIdentifier: (FileSourceCore, UInt)]
  ) {
    guard var watch = table.watches[wd] else { return }
    var info = stat()
    guard fstat(watch.statFD, &info) == 0 else { return }
    let now = FileState(info)
    var events: FileSource.Events = []
    if now.size != watch.state.size
      || now.modified.tv_sec != watch.state.modified.tv_sec
      || now.modified.tv_nsec != watch.state.modified.tv_nsec
    {
      events.insert(.write)
      if now.size > watch.state.size { events.insert(.extend) }
    }
    if now.changed.tv_sec != watch.state.changed.tv_sec
      || now.changed.tv_nsec != watch.state.changed.tv_nsec
    {
      events.insert(.attrib)
    }
    if now.links != watch.state.links {
      events.insert(.link)
      if now.links == 0 { events.insert(.delete) }
    }
    watch.state = now
    table.watches[wd] = watch
    Self.merge(events, into: watch.sources, &merged)
  }

  /// Or-s `events` into each activated source's share, filtered by what it asked for.
  private static func merge(
    _ events: FileSource.Events, into sources: [FileSourceCore],
    _ merged: inout [ObjectIdentifier: (FileSourceCore, UInt)]
  ) {
    guard !events.isEmpty else { return }
    for core in sources where core.isActivated {
      let wanted = events.rawValue & core.events.rawValue
      guard wanted != 0 else { continue }
      let key = ObjectIdentifier(core)
      merged[key] = (core, (merged[key]?.1 ?? 0) | wanted)
    }
  }
}
