import CLoopShims
import Glibc
import MainLoop
import TestSupport
import Testing

@testable import LoopDispatch

/// FileSource (inotify): each event kind, renames followed, several sources on one file,
/// filtering, cancel (the kernel watch removed, checked in /proc/self/fdinfo), errors and
/// misuse. The main-queue target runs in LoopDispatchTestHost (MainQueueSourceTests).
/// Every wait is on a semaphore with a generous timeout; none sleeps.
@Suite struct FileSourceTests {
  @Test func aWriteThatGrowsTheFileReportsWriteAndExtendAndAnOverwriteOnlyWrite() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.write, .extend])
    try file.append("hello")
    #expect(watcher.waitFor([.write, .extend]), "\(watcher.deliveries)")
    let before = watcher.deliveries.count
    #expect(pwrite(file.fd, "J", 1, 0) == 1)  // Same size: a write, no extension.
    #expect(watcher.waitFor(.write, after: before), "\(watcher.deliveries)")
    #expect(watcher.deliveries[before...].allSatisfy { $0 == .write }, "\(watcher.deliveries)")
    watcher.cancelAndWait()
  }

  @Test func chmodReportsAttrib() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.attrib])
    #expect(fchmod(file.fd, 0o600) == 0)
    #expect(watcher.waitFor(.attrib), "\(watcher.deliveries)")
    #expect(watcher.union == .attrib)
    watcher.cancelAndWait()
  }

  @Test func aHardLinkMadeAndRemovedReportsLink() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.link])
    let second = file.directory + "/second-name"
    #expect(link(file.path, second) == 0)
    #expect(watcher.waitFor(.link), "\(watcher.deliveries)")
    let before = watcher.deliveries.count
    #expect(unlink(second) == 0)
    #expect(watcher.waitFor(.link, after: before), "\(watcher.deliveries)")
    #expect(watcher.union == .link, "only LINK was asked for: \(watcher.deliveries)")
    watcher.cancelAndWait()
  }

  @Test func aRenameIsReportedAndTheSourceFollowsTheFile() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.rename, .write])
    let moved = file.directory + "/moved"
    #expect(rename(file.path, moved) == 0)
    #expect(watcher.waitFor(.rename), "\(watcher.deliveries)")
    let before = watcher.deliveries.count
    try file.append("after the rename")
    #expect(watcher.waitFor(.write, after: before), "\(watcher.deliveries)")
    watcher.cancelAndWait()
    unlink(moved)
  }

  @Test func unlinkingAnOpenFileReportsDeleteAtOnce() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.delete])
    #expect(unlink(file.path) == 0)  // The descriptor stays open: no IN_DELETE_SELF yet.
    #expect(watcher.waitFor(.delete), "\(watcher.deliveries)")
    #expect(watcher.union == .delete)
    watcher.cancelAndWait()
  }

  @Test func aFileDeletedBeforeTheSourceIsMadeIsWatchedThroughItsDescriptor() throws {
    let file = try TemporaryFile()
    #expect(unlink(file.path) == 0)
    let watcher = try Watcher(file, events: [.write, .delete])
    try file.append("still open")
    #expect(watcher.waitFor(.write), "\(watcher.deliveries)")
    #expect(watcher.union == .write, "no DELETE for a file deleted before: \(watcher.deliveries)")
    watcher.cancelAndWait()
  }

  @Test func anExcludedEventDoesNotFire() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.write])
    #expect(fchmod(file.fd, 0o600) == 0)  // ATTRIB, not asked for.
    try file.append("x")  // WRITE, asked for; read by the hub after the chmod.
    #expect(watcher.waitFor(.write), "\(watcher.deliveries)")
    // Every event before the write has been handled by now: only WRITE may have come.
    #expect(watcher.union == .write, "\(watcher.deliveries)")
    watcher.cancelAndWait()
  }

  @Test func twoSourcesOnOneFileShareAWatchAndOneSurvivesTheOthersCancel() throws {
    let file = try TemporaryFile()
    let first = try Watcher(file, events: [.write])
    let second = try Watcher(file, events: [.write, .attrib])
    #expect(inotifyWatchCount(inode: file.inode) == 1, "one kernel watch for both")
    try file.append("a")
    #expect(first.waitFor(.write), "\(first.deliveries)")
    #expect(second.waitFor(.write), "\(second.deliveries)")
    first.cancelAndWait()
    let firstCount = first.deliveries.count
    #expect(inotifyWatchCount(inode: file.inode) == 1, "the second source still watches")
    let before = second.deliveries.count
    try file.append("b")
    #expect(fchmod(file.fd, 0o640) == 0)
    #expect(second.waitFor([.write, .attrib], after: before), "\(second.deliveries)")
    #expect(first.deliveries.count == firstCount, "the cancelled source fired")
    second.cancelAndWait()
    #expect(inotifyWatchCount(inode: file.inode) == 0, "the kernel watch was not removed")
  }

  @Test func cancelRunsTheCancelHandlerOnceStopsEventsAndRemovesTheWatch() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: .all)
    let witness = try Watcher(file, events: [.write])
    try file.append("1")
    #expect(watcher.waitFor(.write), "\(watcher.deliveries)")
    watcher.cancelAndWait()
    let seen = watcher.deliveries.count
    let before = witness.deliveries.count
    try file.append("2")
    // The witness shares the watch: once it has the write, the hub has read it.
    #expect(witness.waitFor(.write, after: before), "\(witness.deliveries)")
    witness.cancelAndWait()
    #expect(watcher.deliveries.count == seen, "an event after cancel: \(watcher.deliveries)")
    #expect(watcher.cancels.value == 1)
    #expect(inotifyWatchCount(inode: file.inode) == 0, "the kernel watch was not removed")
  }

  @Test func aSourceDroppedWithoutCancelRemovesItsWatch() throws {
    let file = try TemporaryFile()
    do {
      let source = try FileSource(fd: file.fd, events: [.write])
      source.activate()
      #expect(inotifyWatchCount(inode: file.inode) == 1)
    }
    #expect(inotifyWatchCount(inode: file.inode) == 0)
  }

  @Test func aDirectoryReportsEntriesAddedAsWrite() throws {
    let file = try TemporaryFile()
    let directoryFD = open(file.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    #expect(directoryFD >= 0)
    defer { close(directoryFD) }
    let watcher = try Watcher(fd: directoryFD, events: [.write])
    let entry = open(file.directory + "/entry", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
    close(entry)
    #expect(watcher.waitFor(.write), "\(watcher.deliveries)")
    watcher.cancelAndWait()
    unlink(file.directory + "/entry")
  }

  @Test func eventsBeforeActivationAreNotReported() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.write, .attrib], activate: false)
    try file.append("early")
    // The witness sees the early write: once it has it, the hub has read it.
    let witness = try Watcher(file, events: [.attrib])
    #expect(fchmod(file.fd, 0o600) == 0)
    #expect(witness.waitFor(.attrib), "\(witness.deliveries)")
    watcher.source.activate()
    #expect(fchmod(file.fd, 0o640) == 0)
    #expect(watcher.waitFor(.attrib), "\(watcher.deliveries)")
    #expect(!watcher.union.contains(.write), "\(watcher.deliveries)")
    watcher.cancelAndWait()
    witness.cancelAndWait()
  }

  /// The kernel's queue overflows while the hub does not read (a child process: the overflow
  /// reaches every watch of the process). Another file's events fill the queue, so the
  /// watched file's append and link are lost from it, and only the overflow recovery (size and
  /// link count compared with those last seen) reports them.
  @Test func whatAQueueOverflowLostIsRecoveredFromTheFilesState() async {
    await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      do {
        let file = try TemporaryFile()
        let filler = try TemporaryFile()
        let watcher = try Watcher(file, events: [.write, .extend, .link])
        let fillerWatcher = try Watcher(filler, events: [.write, .attrib])
        let hub = try FileWatchHub.start(for: file.fd)
        hub.suspendReading()
        // Alternating events are not coalesced: each takes a slot of the kernel's queue.
        let limit = Int(readSmallFile("/proc/sys/fs/inotify/max_queued_events") ?? "") ?? 16384
        for round in 0...(limit / 2 + 8) {
          if fchmod(filler.fd, round % 2 == 0 ? 0o600 : 0o640) != 0 { failChild("fchmod") }
          if pwrite(filler.fd, "x", 1, 0) != 1 { failChild("pwrite") }
        }
        try file.append("lost from the queue")
        if link(file.path, file.directory + "/second-name") != 0 { failChild("link") }
        hub.resumeReading()
        if !watcher.waitFor([.write, .extend, .link]) { failChild("\(watcher.union)") }
        unlink(file.directory + "/second-name")
        watcher.cancelAndWait()
        fillerWatcher.cancelAndWait()
      } catch {
        failChild("\(error)")
      }
    }
  }

  /// O_PATH, Linux's nearest to macOS's O_EVTONLY (a descriptor that only names the file).
  @Test func anOPathDescriptorIsWatched() throws {
    let file = try TemporaryFile()
    let oPath: Int32 = 0o10_000_000  // O_PATH: Glibc's module hides it (a _GNU_SOURCE flag).
    let pathOnly = open(file.path, oPath | O_CLOEXEC)
    #expect(pathOnly >= 0)
    defer { close(pathOnly) }
    let watcher = try Watcher(fd: pathOnly, events: [.write, .extend])
    try file.append("through another descriptor")
    #expect(watcher.waitFor([.write, .extend]), "\(watcher.deliveries)")
    watcher.cancelAndWait()
  }

  /// Sources join and leave two files' watches from three threads while a fourth writes to
  /// both; a source on one file stays throughout. Every cancel handler runs once, the staying
  /// source still fires afterwards (no leave removed a kernel watch it still used), and the
  /// watches go with their last sources.
  @Test func joinAndLeaveChurnKeepsSharedWatchesRight() throws {
    let files = [try TemporaryFile(), try TemporaryFile()]
    let fds = files.map(\.fd)
    let stayer = try Watcher(files[0], events: [.write])
    let stop = Locked(false)
    let writer = startThread {
      var round = 0
      while !stop.value {
        _ = pwrite(fds[round % 2], "w", 1, off_t(round % 64))
        round += 1
      }
    }
    let perThread = scaled(150)
    let cancelled = Locked(0)
    let failures = Locked([String]())
    let churners = (0..<3).map { index in
      startThread {
        for round in 0..<perThread {
          let done = LoopDispatch.Semaphore(value: 0)
          do {
            let source = try FileSource(
              fd: fds[(index + round) % 2], events: [.write, .attrib],
              queue: Queue(label: "churn"))
            source.setEventHandler {}
            source.setCancelHandler {
              cancelled.withLock { $0 += 1 }
              done.signal()
            }
            source.activate()
            source.cancel()
          } catch {
            failures.withLock { $0.append("\(error)") }
            return
          }
          if done.wait(timeout: .seconds(30)) == .timedOut {
            failures.withLock { $0.append("a cancel handler never ran") }
            return
          }
        }
      }
    }
    for thread in churners { pthread_join(thread, nil) }
    stop.withLock { $0 = true }
    pthread_join(writer, nil)
    #expect(failures.value.isEmpty, "\(failures.value)")
    #expect(cancelled.value == 3 * perThread)
    #expect(inotifyWatchCount(inode: files[0].inode) == 1, "the staying source's watch")
    #expect(inotifyWatchCount(inode: files[1].inode) == 0, "a watch outlived its sources")
    let before = stayer.deliveries.count
    try files[0].append("after the churn")
    #expect(stayer.waitFor(.write, after: before), "the staying source no longer fires")
    stayer.cancelAndWait()
    #expect(inotifyWatchCount(inode: files[0].inode) == 0)
  }

  /// IN_UNMOUNT and the IN_IGNORED that follows it, injected (the kernel sends them only once
  /// the file system goes, which the open descriptor prevents): REVOKE, then the watch is
  /// forgotten, later events do not reach the source and its cancel still completes.
  @Test func anUnmountReportsRevokeAndEndsTheWatch() throws {
    let file = try TemporaryFile()
    let watcher = try Watcher(file, events: [.revoke, .write])
    let hub = try FileWatchHub.start(for: file.fd)
    let core = try #require(watcher.source.core as? FileSourceCore)
    let wd = try #require(hub.watchDescriptor(of: core))
    hub.handleForTesting(mask: cls_in_unmount, wd: wd)
    #expect(watcher.waitFor(.revoke), "\(watcher.deliveries)")
    hub.handleForTesting(mask: cls_in_ignored, wd: wd)
    #expect(hub.watchDescriptor(of: core) == nil, "the dropped watch is forgotten")
    #expect(watcher.waitFor(.revoke, after: 1), "\(watcher.deliveries)")  // The IN_IGNORED's.
    // The kernel still has the watch (the events were made up): writes reach the hub, and
    // must not reach the source. A second source's watch (a new entry for the same wd) sees
    // the write, so by then the hub has handled it.
    let witness = try Watcher(file, events: [.write])
    let before = watcher.deliveries.count
    try file.append("after the unmount")
    #expect(witness.waitFor(.write), "\(witness.deliveries)")
    witness.cancelAndWait()  // Removes the kernel watch.
    #expect(watcher.deliveries.count == before, "an event after REVOKE: \(watcher.deliveries)")
    watcher.cancelAndWait()
    #expect(inotifyWatchCount(inode: file.inode) == 0)
  }

  /// REVOKE alone maps to no inotify event bit (IN_UNMOUNT comes with any watch): the kernel
  /// must still accept the watch (Linux 6.18 does, with a mask of IN_MASK_ADD alone).
  @Test func aSourceForRevokeAloneIsWatched() throws {
    let file = try TemporaryFile()
    let source = try FileSource(fd: file.fd, events: [.revoke])
    source.activate()
    #expect(inotifyWatchCount(inode: file.inode) == 1)
    source.cancel()
  }

  @Test func aBadDescriptorThrows() throws {
    #expect(throws: EventLoopError.negativeDescriptor(-1)) {
      _ = try FileSource(fd: -1, events: [.write])
    }
    let closed = descriptorNobodyOpens()
    #expect(throws: EventLoopError.closedDescriptor(closed)) {
      _ = try FileSource(fd: closed, events: [.write])
    }
  }

  @Test func aLimitErrorNamesTheLimit() {
    let full = EventLoopError.fileWatchFailed(7, call: "inotify_add_watch", errno: ENOSPC)
    #expect(full.description.contains("/proc/sys/fs/inotify/max_user_watches"))
    #expect(full.description.contains("descriptor 7"))
    let instances = EventLoopError.fileWatchFailed(7, call: "inotify_init1", errno: EMFILE)
    #expect(instances.description.contains("/proc/sys/fs/inotify/max_user_instances"))
  }

  @Test func funlockIsAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? FileSource(fd: 0, events: FileSource.Events(rawValue: 0x100), label: "locks")
    }
    expectMessage(
      result,
      "FileSource \"locks\" asked for FUNLOCK (0x100), which Linux cannot watch: inotify "
        + "reports no lock releases; remove it from the events")
  }

  @Test func anUnknownEventBitIsAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? FileSource(fd: 0, events: [.write, FileSource.Events(rawValue: 0x80)])
    }
    expectMessage(
      result,
      "FileSource \"file-source\" asked for unknown file events 0x80; the events are DELETE, "
        + "WRITE, EXTEND, ATTRIB, LINK, RENAME and REVOKE (0x7f)")
  }
}

// MARK: Helpers

/// A file in a fresh directory under /tmp, open read-write; removed with its directory at
/// deinit.
final class TemporaryFile {
  let directory: String
  let path: String
  let fd: Int32

  init() throws {
    var template = Array("/tmp/loopdispatch-file-source-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw TestError("mkdtemp: errno \(errno)") }
    directory = String(cString: made)
    path = directory + "/watched"
    fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o644)
    if fd < 0 { throw TestError("open: errno \(errno)") }
  }

  deinit {
    close(fd)
    unlink(path)
    rmdir(directory)
  }

  var inode: UInt64 {
    var info = stat()
    fstat(fd, &info)
    return UInt64(info.st_ino)
  }

  func append(_ text: String) throws {
    let written = text.utf8CString.withUnsafeBytes { bytes in
      pwrite(fd, bytes.baseAddress!, bytes.count - 1, off_t(lseek(fd, 0, SEEK_END)))
    }
    if written != text.utf8.count { throw TestError("write: errno \(errno)") }
  }
}

struct TestError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

/// A FileSource on its own serial queue, recording each handler run's events.
final class Watcher: Sendable {
  let source: FileSource
  let recorded = Locked([FileSource.Events]())
  let cancels = Locked(0)
  private let delivered = LoopDispatch.Semaphore(value: 0)
  private let cancelled = LoopDispatch.Semaphore(value: 0)

  convenience init(_ file: TemporaryFile, events: FileSource.Events, activate: Bool = true)
    throws
  {
    try self.init(fd: file.fd, events: events, activate: activate)
  }

  init(fd: Int32, events: FileSource.Events, activate: Bool = true) throws {
    source = try FileSource(fd: fd, events: events, queue: Queue(label: "file-watcher"))
    source.setEventHandler { [unowned source, recorded, delivered] in
      let changes = source.changes
      recorded.withLock { $0.append(changes) }
      delivered.signal()
    }
    source.setCancelHandler { [cancels, cancelled] in
      cancels.withLock { $0 += 1 }
      cancelled.signal()
    }
    if activate { source.activate() }
  }

  var deliveries: [FileSource.Events] { recorded.value }
  var union: FileSource.Events { deliveries.reduce([]) { $0.union($1) } }

  /// Waits until the deliveries from index `after` on together contain `events`.
  func waitFor(_ events: FileSource.Events, after: Int = 0) -> Bool {
    while true {
      let seen = recorded.withLock { all in
        all.count > after ? all[after...].reduce([]) { $0.union($1) } : FileSource.Events()
      }
      if seen.isSuperset(of: events) { return true }
      if delivered.wait(timeout: .seconds(30)) == .timedOut { return false }
    }
  }

  func cancelAndWait() {
    source.cancel()
    #expect(cancelled.wait(timeout: .seconds(30)) == .success, "no cancel handler")
  }
}

/// The first line of a small file such as a /proc setting, or nil.
func readSmallFile(_ path: String) -> String? {
  guard let file = fopen(path, "r") else { return nil }
  defer { fclose(file) }
  var line = [CChar](repeating: 0, count: 128)
  guard fgets(&line, Int32(line.count), file) != nil else { return nil }
  let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  return text.hasSuffix("\n") ? String(text.dropLast()) : text
}

/// How many watches the process's inotify instances hold on `inode`, from
/// /proc/self/fdinfo (lines `inotify wd:N ino:<hex> ...`).
func inotifyWatchCount(inode: UInt64) -> Int {
  guard let directory = opendir("/proc/self/fd") else { return -1 }
  defer { closedir(directory) }
  var count = 0
  let wanted = "ino:" + String(inode, radix: 16) + " "
  while let entry = readdir(directory) {
    let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard Int32(name) != nil else { continue }
    var target = [CChar](repeating: 0, count: 256)
    let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
    guard length > 0,
      String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        == "anon_inode:inotify"
    else { continue }
    guard let info = fopen("/proc/self/fdinfo/" + name, "r") else { continue }
    defer { fclose(info) }
    var line = [CChar](repeating: 0, count: 1024)
    while fgets(&line, Int32(line.count), info) != nil {
      let text = String(
        decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      if text.hasPrefix("inotify ") && text.contains(wanted) { count += 1 }
    }
  }
  return count
}
