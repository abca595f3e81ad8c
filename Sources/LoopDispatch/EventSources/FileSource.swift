import Glibc
import MainLoop

/// Delivers changes to a file to a queue — written, extended, its attributes or link count
/// changed, renamed, deleted, its file system unmounted: GCD's `DISPATCH_SOURCE_TYPE_VNODE`,
/// built on Linux's inotify (which libdispatch on Linux does not provide).
///
/// The source watches the file that a descriptor you opened names; it follows that file
/// through renames (inotify watches the file, not its name). ``Source/data`` (and
/// ``changes``, the same bits as ``Events``) is the set of events seen since the last
/// handler run, or-ed together; only the events in ``watchedEvents`` are reported. Events
/// that happen before ``Source/activate()`` are not reported.
///
/// How each event is recognised (one inotify instance serves the whole process; the handler
/// runs on the target queue one thread hop after the I/O driver reads the event):
///
/// | Event | inotify event | Notes |
/// | ----- | ------------- | ----- |
/// | ``Events/write`` | `IN_MODIFY` | any write or truncation |
/// | ``Events/extend`` | `IN_MODIFY` when the size grew | the size (`fstat`) when the event is read, compared with the size last seen: a write followed by a truncation before the event is read shows as ``Events/write`` alone |
/// | ``Events/attrib`` | `IN_ATTRIB` | mode, owner, times, extended attributes; also every link count change (the change time moves) |
/// | ``Events/link`` | `IN_ATTRIB` when the link count changed | a hard link made or removed |
/// | ``Events/rename`` | `IN_MOVE_SELF` | the file moved; later events still arrive |
/// | ``Events/delete`` | `IN_ATTRIB` with the link count now 0, or `IN_DELETE_SELF` | see below |
/// | ``Events/revoke`` | `IN_UNMOUNT`, or the kernel dropping the watch (`IN_IGNORED`) | the source fires no more after it; rare on Linux, see below |
///
/// For a directory, ``Events/write`` also reports entries created, deleted or moved in or
/// out (`IN_CREATE`, `IN_DELETE`, `IN_MOVED_FROM`, `IN_MOVED_TO`), as a kqueue vnode source
/// does.
///
/// Differences from GCD on BSD and macOS, and limits:
/// - **Deleting a file that is still open.** inotify reports `IN_DELETE_SELF` only when the
///   last reference to the file goes, and the source's descriptor is one; so an unlink is
///   recognised by its `IN_ATTRIB` with the link count dropping to 0, which arrives at once.
///   The file itself stays until every descriptor on it is closed: writes through an open
///   descriptor still report ``Events/write``.
/// - **Removing a directory that is still open** (`rmdir`) reports nothing to its source:
///   the kernel sends the directory no `IN_ATTRIB` for it (only its parent gets `IN_DELETE`),
///   and `IN_DELETE_SELF` waits for the last descriptor. Watch the parent directory's
///   ``Events/write`` to learn of it. (From the code of Linux's `vfs_rmdir`; not yet tested.)
/// - **A file already deleted** (its descriptor open, its last name unlinked) can be watched:
///   `inotify_add_watch` on `/proc/self/fd/N` follows the descriptor to the file, so writes
///   through any descriptor still report ``Events/write``; ``Events/delete`` does not come
///   (the link count is 0 already).
/// - **REVOKE.** Linux refuses to unmount a file system with open files (`EBUSY`), and a lazy
///   unmount (`umount -l`) detaches it at once but ends it, and sends `IN_UNMOUNT`, only when
///   the last descriptor on it closes, the source's own duplicate included (measured on
///   Linux 6.18). So ``Events/revoke`` comes only if the kernel drops the watch for another
///   reason, unlike BSD's forced unmount, which revokes open files.
/// - **`FUNLOCK`** (`DISPATCH_VNODE_FUNLOCK`, 0x100) has no inotify equivalent: asking for it,
///   or any bit outside ``Events/all``, is a client bug and traps.
/// - **Limits.** Each watched file takes one inotify watch of the per-user limit
///   `/proc/sys/fs/inotify/max_user_watches` (several sources on one file share it); the
///   first source makes the process's inotify instance, one of
///   `/proc/sys/fs/inotify/max_user_instances`. Creation throws
///   ``EventLoopError/fileWatchFailed(_:call:errno:)``, naming the limit, when either is
///   reached.
/// - **Files inotify cannot see.** inotify reports changes made through this machine's
///   kernel. Files on network file systems (NFS, SMB) changed by other machines, on most
///   FUSE file systems, and in `/proc` and `/sys` are accepted but their changes are mostly
///   never reported.
/// - The source keeps a private duplicate of the descriptor until it is cancelled (one per
///   watched file, shared by its sources), so closing your descriptor early does not confuse
///   it. The duplicate keeps the file alive: a deleted file's space is freed only after the
///   cancel.
/// - If the kernel's event queue overflows (`/proc/sys/fs/inotify/max_queued_events`), what
///   was lost is recovered by comparing each file's size, link count and times with those
///   last seen: writes, attribute changes, links and deletions are reported, renames are not.
///   Each file's watch is also checked with the kernel: one it dropped meanwhile (its notice
///   lost with the rest) reports ``Events/revoke``, as it would have.
/// - If reading the kernel's events fails (other than for want of events), a line on
///   standard error says so, and the reading pauses (10 ms, doubling up to 1 s while it keeps
///   failing) before trying again: events then arrive late, merged, but are not lost unless
///   the queue overflows meanwhile (see above).
///
/// Cancel the source before closing the descriptor, and close it in the cancel handler.
/// Thread-safety: every method may be called from any thread.
public final class FileSource: Source, @unchecked Sendable {
  // @unchecked Sendable: immutable; the base documents the rest.

  /// Kinds of change to a file, with the values of libdispatch's `DISPATCH_VNODE_*` flags.
  public struct Events: OptionSet, Sendable, Hashable {
    /// The `DISPATCH_VNODE_*` bits of the set.
    public let rawValue: UInt

    /// Creates a set from libdispatch's `DISPATCH_VNODE_*` bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// The file was deleted (its last name unlinked): `DISPATCH_VNODE_DELETE`.
    public static let delete = Events(rawValue: 0x1)
    /// The file's contents were written or truncated: `DISPATCH_VNODE_WRITE`.
    public static let write = Events(rawValue: 0x2)
    /// The file grew: `DISPATCH_VNODE_EXTEND`.
    public static let extend = Events(rawValue: 0x4)
    /// The file's attributes (mode, owner, times, link count) changed:
    /// `DISPATCH_VNODE_ATTRIB`.
    public static let attrib = Events(rawValue: 0x8)
    /// The file's link count changed: `DISPATCH_VNODE_LINK`.
    public static let link = Events(rawValue: 0x10)
    /// The file was renamed or moved: `DISPATCH_VNODE_RENAME`.
    public static let rename = Events(rawValue: 0x20)
    /// The file system holding the file was unmounted (or the kernel stopped watching the
    /// file): `DISPATCH_VNODE_REVOKE`. The source reports nothing after it.
    public static let revoke = Events(rawValue: 0x40)

    /// Every event LoopDispatch can watch (0x7f; `DISPATCH_VNODE_FUNLOCK`, 0x100, is not one).
    public static let all: Events = [.delete, .write, .extend, .attrib, .link, .rename, .revoke]
  }

  /// The descriptor whose file is watched.
  public let fd: Int32
  /// The events this source reports.
  public let watchedEvents: Events

  /// Creates an inactive source reporting `events` on the file `fd` names, whose handler
  /// runs on `queue`.
  ///
  /// The file is watched from now on (so a refusal is thrown here); events are reported
  /// once the source is activated.
  /// - Parameters:
  ///   - fd: an open descriptor of the file, in any access mode (`O_PATH`, the nearest to
  ///     macOS's `O_EVTONLY`, included; inotify needs read permission on the file); the
  ///     source does not close it.
  ///   - events: the events to report. An empty set makes a source that never fires.
  ///     `DISPATCH_VNODE_FUNLOCK` (0x100), or any bit outside ``Events/all``, is a client
  ///     bug and traps.
  ///   - queue: the target queue of the handlers.
  ///   - label: a name for diagnostics.
  /// - Throws: ``EventLoopError/negativeDescriptor(_:)`` or
  ///   ``EventLoopError/closedDescriptor(_:)`` for a descriptor that is not open;
  ///   ``EventLoopError/fileWatchFailed(_:call:errno:)`` when inotify refuses (its limits
  ///   reached, or a file it cannot watch).
  /// Thread-safety: any thread.
  public init(
    fd: Int32, events: Events, queue: Queue = .global(), label: String = "file-source"
  ) throws(EventLoopError) {
    FileSourceCore.checkEvents(events.rawValue, owner: "FileSource \"\(label)\"")
    self.fd = fd
    watchedEvents = events
    let core = try FileSourceCore(fd: fd, events: events, queue: queue)
    super.init(core: core, label: label)
  }

  /// The events seen since the last handler run: ``Source/data`` as ``Events``. Read it in
  /// the event handler.
  public var changes: Events { Events(rawValue: data) }
}

/// The engine of a ``FileSource``: joins the process's inotify watch of its file
/// (`FileWatchHub.swift`) at creation and leaves it on cancel; the hub or-s the events it
/// recognises into the data.
final class FileSourceCore: SourceCore, @unchecked Sendable {
  // @unchecked Sendable: immutable; the base documents the rest.
  let fd: Int32
  let events: FileSource.Events
  /// The hub this source joined, nil for an empty event set (nothing to watch).
  private let hub: FileWatchHub?

  init(fd: Int32, events: FileSource.Events, queue: Queue) throws(EventLoopError) {
    if fd < 0 { throw .negativeDescriptor(fd) }
    var info = stat()
    if fstat(fd, &info) != 0 {
      throw errno == EBADF ? .closedDescriptor(fd) : .registrationFailed(errno: errno)
    }
    self.fd = fd
    self.events = events
    hub = events.isEmpty ? nil : try FileWatchHub.start(for: fd)
    super.init(queue: queue, merge: .or)
    // Joined last: the hub may report to this core as soon as it is listed (it skips cores
    // not yet activated). A throw here deinitialises the core without it being listed.
    try hub?.join(self)
  }

  /// Whether the source has been activated (the hub reports only to activated sources, as
  /// GCD registers a source at activation).
  var isActivated: Bool { status.load(ordering: .acquiring) & Self.activated != 0 }

  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    // Once this returns the hub no longer lists the core: no later event reaches it (one the
    // hub's reader took before may still be merged, but the core is cancelled by then).
    hub?.leave(self)
    completion()
  }

  /// Traps on bits that name no event inotify can report. `owner` names the caller in the
  /// message.
  static func checkEvents(_ bits: UInt, owner: String) {
    let unknown = bits & ~FileSource.Events.all.rawValue
    guard unknown != 0 else { return }
    if unknown & 0x100 != 0 {
      clientBug(
        "\(owner) asked for FUNLOCK (0x100), which Linux cannot watch: inotify reports no "
          + "lock releases; remove it from the events")
    }
    clientBug(
      "\(owner) asked for unknown file events 0x\(String(unknown, radix: 16)); the events are "
        + "DELETE, WRITE, EXTEND, ATTRIB, LINK, RENAME and REVOKE (0x7f)")
  }
}
