import CLoopShims
import Glibc
import MainLoop
import TestSupport
import Testing

@testable import LoopDispatch

/// The process's inotify hub (`FileWatchHub`) when things go wrong around it: a source
/// leaving while the reader translates, a kernel watch dropped with its IN_IGNORED lost in an
/// overflow, reads that fail. Each runs in a child process: the hub is the process's, and
/// the seams these tests use (a hook before each `fstat`, failing reads, a suspended reader)
/// would disturb every other file source test running beside them. Every wait is on a
/// semaphore with a generous timeout; none sleeps. A child always exits 0 and writes its
/// verdict to standard error, so that a failure says what went wrong (a failed exit test
/// shows no output).
@Suite struct FileWatchHubTests {
  /// A source leaves, and another joins, while the reader is between its `fstat` of the
  /// file's duplicate and applying what it saw (the hook runs there): neither waits for the
  /// reader (the `fstat` runs outside the table's lock), the duplicate the reader stats stays
  /// open and names the same file although its watch is gone, the gone watch's event reaches
  /// nobody, and the events that follow reach the newcomer and another file's source right.
  @Test func aSourceLeavesAndJoinsWhileTheReaderStatsTheFile() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      do {
        let file = try TemporaryFile()
        let other = try TemporaryFile()
        let leaving = try Watcher(file, events: [.write, .extend])
        let witness = try Watcher(other, events: [.write, .extend])
        let hub = try FileWatchHub.start(for: file.fd)
        let inode = file.inode
        let fired = Locked(false)
        let newcomer = Locked<Watcher?>(nil)
        let hookRan = LoopDispatch.Semaphore(value: 0)
        let fd = file.fd
        hub.setBeforeStatForTesting { duplicate in
          guard !fired.withLock({ $0 }) else { return }
          fired.withLock { $0 = true }
          let done = LoopDispatch.Semaphore(value: 0)
          let failure = Locked<String?>(nil)
          let thread = startThread {
            leaving.source.cancel()  // The last source of the file: removes its watch.
            do {
              let joined = try Watcher(fd: fd, events: [.write, .extend])
              newcomer.withLock { $0 = joined }
            } catch {
              failure.withLock { $0 = "\(error)" }
            }
            done.signal()
          }
          if done.wait(timeout: .seconds(20)) == .timedOut {
            exitWithVerdict("FAIL: a source leaving or joining waited for the reader's fstat")
          }
          pthread_join(thread, nil)  // Joined (ThreadSanitizer reports a thread left behind).
          if let failure = failure.value { exitWithVerdict("FAIL: \(failure)") }
          var info = stat()
          if fstat(duplicate, &info) != 0 || UInt64(info.st_ino) != inode {
            exitWithVerdict(
              "FAIL: the duplicate was closed under the reader (its watch went meanwhile)")
          }
          hookRan.signal()
        }
        try file.append("while the watch goes")
        if hookRan.wait(timeout: .seconds(30)) == .timedOut {
          exitWithVerdict("FAIL: the hook never ran")
        }
        guard let joined = newcomer.value else { exitWithVerdict("FAIL: no newcomer") }
        if inotifyWatchCount(inode: inode) != 1 { exitWithVerdict("FAIL: not one kernel watch") }
        try other.append("after the hook")
        if !witness.waitFor([.write, .extend]) {
          exitWithVerdict("FAIL: witness: \(witness.deliveries)")
        }
        try file.append("to the newcomer")
        if !joined.waitFor([.write, .extend]) {
          exitWithVerdict("FAIL: newcomer: \(joined.deliveries)")
        }
        if !leaving.deliveries.isEmpty {
          exitWithVerdict("FAIL: the source that left: \(leaving.deliveries)")
        }
        hub.setBeforeStatForTesting(nil)
        // The reader let go of the removed watch's duplicate: only the newcomer's and the
        // test's own descriptors name the file.
        if countDescriptors(linkingTo: file.path) != 2 {
          exitWithVerdict(
            "FAIL: descriptors on the file: \(countDescriptors(linkingTo: file.path))")
        }
        joined.cancelAndWait()
        witness.cancelAndWait()
        if inotifyWatchCount(inode: inode) != 0 { exitWithVerdict("FAIL: a kernel watch was left") }
        exitWithVerdict("VERDICT ok")
      } catch {
        exitWithVerdict("FAIL: \(error)")
      }
    }
    expectVerdictOK(result)
  }

  /// The kernel drops a watch (made here with `inotify_rm_watch` behind the hub's back, as an
  /// unmount would) and its IN_IGNORED is lost (the queue is drained unread, as an overflow
  /// drops it), then an overflow is reported: the hub finds the watch gone, reports REVOKE
  /// and forgets it (removing the kernel watch its check made), while a live watch stays
  /// and still reports.
  @Test func anOverflowThatLostAnIgnoredEventRevokesTheDroppedWatch() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      do {
        let file = try TemporaryFile()
        let other = try TemporaryFile()
        let dropped = try Watcher(file, events: [.revoke, .write])
        let kept = try Watcher(other, events: [.write, .extend])
        let hub = try FileWatchHub.start(for: file.fd)
        guard let droppedCore = dropped.source.core as? FileSourceCore,
          let keptCore = kept.source.core as? FileSourceCore,
          let wd = hub.watchDescriptor(of: droppedCore),
          let keptWD = hub.watchDescriptor(of: keptCore)
        else { exitWithVerdict("FAIL: no watch descriptors") }
        hub.suspendReading()
        if cls_inotify_unwatch(hub.inotifyFD, wd) != 0 { exitWithVerdict("FAIL: inotify_rm_watch") }
        var lost = [UInt8](repeating: 0, count: Int(cls_inotify_buffer_size))
        while read(hub.inotifyFD, &lost, lost.count) > 0 {}  // The IN_IGNORED, lost.
        hub.handleForTesting(mask: cls_in_q_overflow, wd: -1)
        if hub.watchDescriptor(of: droppedCore) != nil {
          exitWithVerdict("FAIL: the dead watch is kept")
        }
        if hub.watchDescriptor(of: keptCore) != keptWD {
          exitWithVerdict("FAIL: the live watch changed")
        }
        if inotifyWatchCount(inode: file.inode) != 0 {
          exitWithVerdict("FAIL: the check's watch was left")
        }
        hub.resumeReading()
        if !dropped.waitFor(.revoke) { exitWithVerdict("FAIL: no REVOKE: \(dropped.deliveries)") }
        try other.append("after the overflow")
        if !kept.waitFor([.write, .extend]) { exitWithVerdict("FAIL: kept: \(kept.deliveries)") }
        dropped.cancelAndWait()
        kept.cancelAndWait()
        if hub.watchCount != 0 { exitWithVerdict("FAIL: \(hub.watchCount) watches left") }
        exitWithVerdict("VERDICT ok")
      } catch {
        exitWithVerdict("FAIL: \(error)")
      }
    }
    expectVerdictOK(result)
  }

  /// Four reads of the inotify descriptor fail (injected `EIO`) while a change waits: one
  /// line on standard error names the error, the reader pauses between tries (10, 20, 40 and
  /// 80 ms: so the change arrives no earlier than 150 ms later, where a reader retrying at
  /// once would take microseconds), and the change then arrives.
  @Test func failingReadsAreReportedOnceAndRetriedAfterAPause() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      do {
        let file = try TemporaryFile()
        let watcher = try Watcher(file, events: [.write, .extend])
        let hub = try FileWatchHub.start(for: file.fd)
        hub.failReadsForTesting(4)
        let start = Deadline.now
        try file.append("behind failing reads")
        if !watcher.waitFor([.write, .extend]) { exitWithVerdict("FAIL: \(watcher.deliveries)") }
        let waited = Deadline.now - start
        if waited < .milliseconds(150) {
          exitWithVerdict("FAIL: the reader did not pause: \(waited)")
        }
        let before = watcher.deliveries.count
        try file.append("once reads work")
        if !watcher.waitFor(.write, after: before) {
          exitWithVerdict("FAIL: \(watcher.deliveries)")
        }
        watcher.cancelAndWait()
        exitWithVerdict("VERDICT ok")
      } catch {
        exitWithVerdict("FAIL: \(error)")
      }
    }
    expectVerdictOK(result)
    let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    let lines = text.split(separator: "\n").filter { $0.hasPrefix("LoopDispatch:") }
    #expect(lines.count == 1, "stderr: \(text)")
    #expect(
      lines.first?.hasPrefix(
        "LoopDispatch: file sources: reading the inotify descriptor failed (errno 5: ") == true,
      "stderr: \(text)")
  }
}

/// Ends an exit test's child with `text` (`VERDICT ok`, or `FAIL: ` and why) on standard
/// error, and status 0, so the parent sees it whatever it says.
func exitWithVerdict(_ text: String) -> Never {
  let line = Array("\(text)\n".utf8)
  line.withUnsafeBytes { _ = write(2, $0.baseAddress!, $0.count) }
  exit(0)
}

/// Checks that an exit test's child ended with `exitWithVerdict("VERDICT ok")`.
func expectVerdictOK(
  _ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation
) {
  let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
  #expect(text.contains("VERDICT ok"), "stderr: \(text)", sourceLocation: sourceLocation)
}
