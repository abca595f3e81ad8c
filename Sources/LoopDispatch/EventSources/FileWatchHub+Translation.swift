import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// Translating the kernel's events into ``FileSource/Events`` (steps 3 to 5 of
/// `FileWatchHub`).
///
/// The events of one read are translated in three steps, so that no `fstat` (which may block
/// on a network or FUSE file system) runs under the table's lock, where it would hold up
/// every source joining or leaving:
/// 1. Under the lock: the `WatchedFile` of every watch the events name (of every watch, after
///    an overflow). Holding it keeps the duplicate open even if the watch goes meanwhile.
/// 2. No lock: one `fstat` per file whose events need its state (`IN_MODIFY`, `IN_ATTRIB`;
///    every file after an overflow). One per file and read is enough: every event of the
///    read was queued before it, so a later `fstat` would see the same state.
/// 3. Under the lock again: each event is applied to its watch only if the table still lists
///    the same `WatchedFile` under its wd. A watch removed meanwhile (its last source left)
///    gets nothing, as its sources are gone; a wd the kernel gave to a new watch meanwhile
///    names another file, and is skipped too (every event of the read predates that watch).
/// The files are let go after the lock: a removed watch's duplicate is closed then.
extension FileWatchHub {
  /// One event read from the kernel.
  struct KernelEvent {
    let wd: Int32
    let mask: UInt32
  }

  /// The events for each source, by source: the source and its `DISPATCH_VNODE_*` bits.
  typealias Merged = [ObjectIdentifier: (FileSourceCore, UInt)]

  /// The events whose translation needs the file's state.
  private static let statMask = cls_in_modify | cls_in_attrib

  /// The whole events in the first `length` bytes of `buffer`.
  static func events(in buffer: UnsafeMutableRawPointer, length: Int) -> [KernelEvent] {
    var events: [KernelEvent] = []
    var offset: Int32 = 0
    var wd: Int32 = 0
    var mask: UInt32 = 0
    while true {
      // Safe: `buffer` holds `length` bytes written by `read`; the shim reads within them.
      offset = cls_inotify_event_at(buffer, Int32(length), offset, &wd, &mask)
      if offset < 0 { break }
      events.append(KernelEvent(wd: wd, mask: mask))
    }
    return events
  }

  /// Translates one read's events (the three steps above) and merges them into the sources
  /// that asked for them. The reader's queue (or a test's thread); never under the lock.
  func translate(_ events: [KernelEvent], into merged: inout Merged) {
    let overflowed = events.contains { $0.mask & cls_in_q_overflow != 0 }
    // Step 1.
    let (files, beforeStat) = table.withLock {
      table -> ([Int32: WatchedFile], (@Sendable (Int32) -> Void)?) in
      if overflowed { return (table.watches.mapValues(\.file), table.beforeStat) }
      var files: [Int32: WatchedFile] = [:]
      for event in events {
        if let watch = table.watches[event.wd] { files[event.wd] = watch.file }
      }
      return (files, table.beforeStat)
    }
    // Step 2.
    var states: [Int32: FileState] = [:]
    for (wd, file) in files {
      guard overflowed || events.contains(where: { $0.wd == wd && $0.mask & Self.statMask != 0 })
      else { continue }
      beforeStat?(file.fd)
      states[wd] = file.state()
    }
    // Step 3.
    table.withLock { table in
      for event in events {
        if event.mask & cls_in_q_overflow != 0 {
          for (wd, file) in files {
            recoverOverflow(wd, file, now: states[wd], in: &table, into: &merged)
          }
        } else if let file = files[event.wd], table.watches[event.wd]?.file === file {
          apply(event.mask, event.wd, now: states[event.wd], in: &table, into: &merged)
        }
      }
    }
    // `files` goes here, after the lock: the last reference to a removed watch's duplicate
    // closes it.
  }

  /// Translates one event of `wd`, whose file's state is `now` (nil if not needed or not
  /// known), and merges it into the sources that asked for it. Under the lock.
  private func apply(
    _ mask: UInt32, _ wd: Int32, now: FileState?, in table: inout Table,
    into merged: inout Merged
  ) {
    guard var watch = table.watches[wd] else { return }
    var events: FileSource.Events = []
    if mask & Self.statMask != 0, let now {
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
      forget(wd, watch, in: &table)
      events.insert(.revoke)
    } else {
      table.watches[wd] = watch
    }
    Self.merge(events, into: watch.sources, &merged)
  }

  /// Events of `wd` may have been lost (the kernel's queue overflowed): checks that the
  /// kernel still has the watch, then reports what the file's state `now` shows changed
  /// since it was last seen. Under the lock.
  private func recoverOverflow(
    _ wd: Int32, _ file: WatchedFile, now: FileState?, in table: inout Table,
    into merged: inout Merged
  ) {
    guard let watch = table.watches[wd], watch.file === file else { return }  // Gone meanwhile.
    // The overflow may have cost the watch its IN_IGNORED. Adding the watch again with the
    // mask the kernel has changes nothing on a live watch, and returns its wd; any other
    // answer means the kernel dropped it.
    let probed = cls_inotify_watch_descriptor(inotifyFD, file.fd, watch.mask | cls_in_mask_add)
    guard probed == wd else {
      revokeDropped(wd, watch, probed: probed, now: now, in: &table, into: &merged)
      return
    }
    guard let now else { return }
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
    var updated = watch
    updated.state = now
    table.watches[wd] = updated
    Self.merge(events, into: watch.sources, &merged)
  }

  /// The kernel dropped the watch of `wd` and its IN_IGNORED was lost: as if it had come
  /// (REVOKE, the watch forgotten). `probed` is what adding the watch again returned: a new
  /// kernel watch is removed again (its IN_IGNORED names a wd not in the table, and is
  /// skipped); the watch of another entry (the file joined again after the drop, under a new
  /// wd) keeps the mask the probe or-ed into it. Under the lock.
  private func revokeDropped(
    _ wd: Int32, _ watch: Watch, probed: Int32, now: FileState?, in table: inout Table,
    into merged: inout Merged
  ) {
    if probed >= 0 {
      if var other = table.watches[probed] {
        if let now { other.widen(by: watch.mask, now: now) } else { other.mask |= watch.mask }
        table.watches[probed] = other
      } else {
        _ = cls_inotify_unwatch(inotifyFD, probed)
      }
    }
    forget(wd, watch, in: &table)
    Self.merge(.revoke, into: watch.sources, &merged)
  }

  /// Removes the watch of `wd`, which the kernel no longer has, and unlists its sources. Its
  /// duplicate is closed when the reader lets go of it, after the lock. Under the lock.
  private func forget(_ wd: Int32, _ watch: Watch, in table: inout Table) {
    table.watches[wd] = nil
    for core in watch.sources { table.wdOfSource[ObjectIdentifier(core)] = nil }
  }

  /// Or-s `events` into each activated source's share, filtered by what it asked for.
  private static func merge(
    _ events: FileSource.Events, into sources: [FileSourceCore], _ merged: inout Merged
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
