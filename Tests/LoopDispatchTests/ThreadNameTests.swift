import CLoopShims
import Glibc
import LoopDispatch
import TestSupport
import Testing

/// Pool workers take the label of the custom queue they drain as their thread name, and their
/// own name (`ld.worker.N`) back for global-queue work and when they park. Names are lazy: the
/// supervisor shows a name the worker has wanted for a tick or more, so these tests hold an
/// item running (blocked on a latch) and wait for the name to appear (`ThreadName.swift`).
@Suite struct ThreadNameTests {
  @Test func aSerialQueueItemThatRunsForAWhileShowsItsQueuesLabel() {
    #expect(nameShown(whileBlockedOn: Queue(label: "names.serial"), expecting: "names.serial"))
  }

  @Test func longAndNonASCIILabelsAreCutToFifteenBytesAtACharacterBoundary() {
    #expect(
      nameShown(
        whileBlockedOn: Queue(label: "names.a-very-long-label"), expecting: "names.a-very-lo"))
    // "é" is two bytes: seven fit in 14 bytes, the eighth would split at byte 15.
    #expect(nameShown(whileBlockedOn: Queue(label: "ééééééééé"), expecting: "ééééééé"))
  }

  @Test func aConcurrentQueueItemThatRunsForAWhileShowsItsQueuesLabel() {
    #expect(
      nameShown(
        whileBlockedOn: Queue(label: "names.conc", attributes: .concurrent),
        expecting: "names.conc"))
  }

  @Test func aParentQueueShowsItsOwnLabelAgainAfterAChildDrainedInsideIt() {
    let parent = Queue(label: "names.parent")
    let child = Queue(label: "names.child", target: parent)
    let childItem = BlockedItem()
    let parentItem = BlockedItem()
    parent.suspend()
    child.async { childItem.run() }
    parent.async { parentItem.run() }
    parent.resume()
    #expect(childItem.showsName("names.child"))
    childItem.release()
    #expect(parentItem.showsName("names.parent"))
    parentItem.release()
  }

  @Test func aGlobalQueueItemAfterQueueDrainsShowsTheWorkersOwnName() {
    let queue = Queue(label: "names.mixed")
    let drained = Latch()
    let held = BlockedItem()
    queue.async { held.run() }
    #expect(held.showsName("names.mixed"))
    held.release()
    queue.async { drained.open() }
    #expect(drained.wait())
    // Every worker may just have drained the queue; a global item that runs for a while shows
    // its worker's own name, whichever worker runs it.
    let global = BlockedItem()
    Queue.global().async { global.run() }
    #expect(global.showsName(prefix: "ld.worker."))
    global.release()
  }

  @Test func parkedWorkersShowTheirOwnNameAgain() {
    let label = "names.parked"
    #expect(nameShown(whileBlockedOn: Queue(label: label), expecting: label))
    // Once the worker has finished and parked, no thread keeps the label.
    let deadline = Deadline.now + .seconds(30)
    while threadNames().contains(label) && Deadline.now < deadline { sched_yield() }
    #expect(!threadNames().contains(label))
  }
}

/// An item that runs until released, reporting the thread it runs on.
private final class BlockedItem: @unchecked Sendable {
  // @unchecked Sendable: `tid` is published before `started` opens and read after.
  private var tid: pid_t = 0
  private let started = Latch()
  private let released = Latch()

  /// The item's body: records its thread, then blocks until `release`.
  func run() {
    tid = cls_gettid()
    started.open()
    _ = released.wait()
  }

  func release() { released.open() }

  /// Whether the item's thread comes to show `name` (or a name starting with `prefix`)
  /// within 30 seconds.
  func showsName(_ name: String? = nil, prefix: String? = nil) -> Bool {
    guard started.wait() else { return false }
    let deadline = Deadline.now + .seconds(30)
    while Deadline.now < deadline {
      let shown = nameOfThread(tid)
      if let name, shown == name { return true }
      if let prefix, shown.hasPrefix(prefix) { return true }
      sched_yield()
    }
    return false
  }
}

/// Whether an item of `queue` that keeps running comes to show `expected` as its thread name.
private func nameShown(whileBlockedOn queue: Queue, expecting expected: String) -> Bool {
  let item = BlockedItem()
  queue.async { item.run() }
  defer { item.release() }
  return item.showsName(expected)
}

/// The name of thread `tid` of this process, from /proc (also used by
/// `ThreadNameInternalTests`).
func nameOfThread(_ tid: pid_t) -> String {
  let fd = open("/proc/self/task/\(tid)/comm", O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return "" }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 32)
  let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
  guard count > 0 else { return "" }
  return String(decoding: buffer[..<count], as: UTF8.self).trimmingNewline
}

/// Every thread name of this process, from /proc.
private func threadNames() -> [String] {
  guard let directory = opendir("/proc/self/task") else { return [] }
  defer { closedir(directory) }
  var names: [String] = []
  while let entry = readdir(directory) {
    let tid = withUnsafeBytes(of: entry.pointee.d_name) {
      String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard tid.first?.isNumber == true else { continue }
    let fd = open("/proc/self/task/\(tid)/comm", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { continue }
    var buffer = [UInt8](repeating: 0, count: 32)
    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    close(fd)
    if count > 0 {
      names.append(String(decoding: buffer[..<count], as: UTF8.self).trimmingNewline)
    }
  }
  return names
}

extension String {
  fileprivate var trimmingNewline: String { hasSuffix("\n") ? String(dropLast()) : self }
}
