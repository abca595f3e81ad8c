import CLoopShims
import Glibc
import LoopDispatch
import TestSupport
import Testing

/// Pool workers take the label of the custom queue they drain as their thread name, and their
/// own name (`ld.worker.N`) back for global-queue work and when they park.
@Suite struct ThreadNameTests {
  @Test func aSerialQueueItemRunsOnAThreadNamedAfterItsQueue() {
    let queue = Queue(label: "names.serial")
    let seen = Locked<String?>(nil)
    let done = Latch()
    queue.async {
      seen.withLock { $0 = currentThreadName() }
      done.open()
    }
    #expect(done.wait())
    #expect(seen.value == "names.serial")
  }

  @Test func longAndNonASCIILabelsAreCutToFifteenBytesAtACharacterBoundary() {
    #expect(nameSeen(on: Queue(label: "names.a-very-long-label")) == "names.a-very-lo")
    // "é" is two bytes: seven fit in 14 bytes, the eighth would split at byte 15.
    #expect(nameSeen(on: Queue(label: "ééééééééé")) == "ééééééé")
  }

  @Test func aConcurrentQueueItemRunsOnAThreadNamedAfterItsQueue() {
    #expect(nameSeen(on: Queue(label: "names.conc", attributes: .concurrent)) == "names.conc")
  }

  @Test func aParentQueueShowsItsOwnLabelAgainAfterAChildDrainedInsideIt() {
    let parent = Queue(label: "names.parent")
    let child = Queue(label: "names.child", target: parent)
    let seen = Locked<[String]>([])
    let done = Latch()
    parent.suspend()
    child.async { seen.withLock { $0.append(currentThreadName()) } }
    parent.async {
      seen.withLock { $0.append(currentThreadName()) }
      done.open()
    }
    parent.resume()
    #expect(done.wait())
    #expect(seen.value == ["names.child", "names.parent"])
  }

  @Test func globalQueueItemsRunUnderTheWorkersOwnName() {
    let queue = Queue(label: "names.mixed")
    let wrong = Counter()
    let done = Latch()
    let rounds = 200
    let finished = Counter()
    for _ in 0..<rounds {
      queue.async {}
      Queue.global().async {
        if !currentThreadName().hasPrefix("ld.worker.") { wrong.increment() }
        if finished.increment() == rounds { done.open() }
      }
    }
    #expect(done.wait())
    #expect(wrong.current == 0)
  }

  @Test func namesCanBeTurnedOffWithAnEnvironmentVariable() async {
    // In a child process: the switch is read when the first worker starts.
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_THREAD_NAMES", "0", 1)
      let name = nameSeen(on: Queue(label: "names.off"))
      exit(name?.hasPrefix("ld.worker.") == true ? 0 : 1)
    }
  }

  @Test func parkedWorkersShowTheirOwnNameAgain() {
    let label = "names.parked"
    let queue = Queue(label: label)
    queue.sync {}
    let done = Latch()
    queue.async { done.open() }
    #expect(done.wait())
    // Once the worker has finished and parked, no thread keeps the label.
    let deadline = Deadline.now + .seconds(30)
    while threadNames().contains(label) && Deadline.now < deadline { sched_yield() }
    #expect(!threadNames().contains(label))
  }
}

/// The calling thread's name as the kernel holds it.
private func currentThreadName() -> String {
  var buffer = [CChar](repeating: 0, count: 17)
  _ = buffer.withUnsafeMutableBufferPointer { cls_get_thread_name($0.baseAddress!) }
  return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// The name of the thread that runs an `async` item of `queue`.
private func nameSeen(on queue: Queue) -> String? {
  let seen = Locked<String?>(nil)
  let done = Latch()
  queue.async {
    seen.withLock { $0 = currentThreadName() }
    done.open()
  }
  return done.wait() ? seen.value : nil
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
