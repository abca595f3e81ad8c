import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// `setWidth` on a queue created serial (libdispatch's old `dispatch_queue_set_width` idiom):
/// the queue becomes wide at a barrier, keeps submission order and barriers, and honours
/// suspension; `Queue+Wide.swift` has the design.
@Suite struct WideQueueTests {
  /// `count` participants each arrive and wait for all: true only if they ran side by side.
  final class Meeting: Sendable {
    let count: Int
    let arrived = Counter()
    let all = Latch()
    init(_ count: Int) { self.count = count }
    func arriveAndWait() -> Bool {
      if arrived.increment() == count { all.open() }
      return all.wait(seconds: 30)
    }
  }

  final class Flag: Sendable {
    let value: Atomic<Bool>
    init(_ initial: Bool = false) { value = Atomic(initial) }
    func set(_ newValue: Bool = true) { value.store(newValue, ordering: .sequentiallyConsistent) }
    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
  }

  /// Running-at-once bookkeeping: the most items seen inside at the same time.
  final class Occupancy: Sendable {
    let inside = Atomic<Int>(0)
    let most = Atomic<Int>(0)
    func enter() {
      let now = inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
      most.max(now, ordering: .sequentiallyConsistent)
    }
    func leave() { inside.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
  }

  /// Items submitted before `setWidth` run alone and first; those after it run side by side.
  @Test func theWidthAppliesToWorkSubmittedAfterTheCallAtABarrier() {
    let queue = Queue(label: "made-wide")
    let gate = Latch()
    let firstDone = Flag()
    let meeting = Meeting(3)
    let met = Counter()
    let sawFirstDone = Counter()
    let group = Group()
    queue.async(group: group) {
      _ = gate.wait(seconds: 30)
      firstDone.set()
    }
    queue.setWidth(3)
    #expect(queue.width == 1)  // Not yet: the change waits behind the first item.
    for _ in 0..<3 {
      queue.async(group: group) {
        if firstDone.isSet { _ = sawFirstDone.increment() }
        if meeting.arriveAndWait() { _ = met.increment() }
      }
    }
    gate.open()
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(sawFirstDone.increment() == 4)  // All three started after the first item ended.
    #expect(met.increment() == 4)  // And all three were inside at once.
    #expect(queue.width == 3)
  }

  /// A barrier on a wide queue waits for the readers before it and holds back those after it.
  @Test func barriersStillRunAloneInSubmissionOrder() {
    let queue = Queue(label: "wide-barriers")
    queue.setWidth(4)
    let occupancy = Occupancy()
    let log = Locked<[String]>([])
    let barrierAlone = Flag(true)
    let group = Group()
    for round in 0..<20 {
      for reader in 0..<3 {
        queue.async(group: group) {
          occupancy.enter()
          log.withLock { $0.append("r\(round).\(reader)") }
          occupancy.leave()
        }
      }
      queue.async(group: group, flags: .barrier) {
        occupancy.enter()
        if occupancy.inside.load(ordering: .sequentiallyConsistent) != 1 {
          barrierAlone.set(false)
        }
        log.withLock { $0.append("b\(round)") }
        occupancy.leave()
      }
    }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(barrierAlone.isSet)
    let entries = log.withLock { $0 }
    #expect(entries.count == 80)
    // Each barrier comes after its round's three readers and before the next round's.
    for round in 0..<20 {
      let barrier = entries.firstIndex(of: "b\(round)")!
      for reader in 0..<3 {
        #expect(entries.firstIndex(of: "r\(round).\(reader)")! < barrier)
        if round < 19 { #expect(entries.firstIndex(of: "r\(round + 1).\(reader)")! > barrier) }
      }
    }
  }

  /// `setWidth(1)` on a wide queue makes it run one item at a time again, in order.
  @Test func widthOneRunsItemsOneAtATimeInOrder() {
    let queue = Queue(label: "wide-then-one")
    queue.setWidth(4)
    queue.setWidth(1)
    let occupancy = Occupancy()
    let order = Locked<[Int]>([])
    let group = Group()
    for index in 0..<200 {
      queue.async(group: group) {
        occupancy.enter()
        order.withLock { $0.append(index) }
        occupancy.leave()
      }
    }
    #expect(group.wait(timeout: .seconds(60)) == .success)
    #expect(occupancy.most.load(ordering: .sequentiallyConsistent) == 1)
    #expect(order.withLock { $0 } == Array(0..<200))
    #expect(queue.width == 1)
  }

  /// A `sync` onto a wide queue runs beside its async items (it takes a slot, not the queue),
  /// and a barrier `sync` waits for them.
  @Test func syncRunsBesideAsyncItemsAndBarrierSyncWaits() {
    let queue = Queue(label: "wide-sync")
    queue.setWidth(2)
    queue.sync(flags: .barrier) {}  // The width has applied.
    let meeting = Meeting(2)
    let asyncMet = Latch()
    queue.async { if meeting.arriveAndWait() { asyncMet.open() } }
    let syncMet = queue.sync { meeting.arriveAndWait() }
    #expect(syncMet)
    #expect(asyncMet.wait(seconds: 30))
    let readerDone = Flag()
    let gate = Latch()
    queue.async {
      _ = gate.wait(seconds: 30)
      readerDone.set()
    }
    gate.open()
    let sawReaderDone = queue.sync(flags: .barrier) { readerDone.isSet }
    #expect(sawReaderDone)
  }

  /// `apply` on a wide queue spreads its iterations like a concurrent queue's.
  @Test func applySpreadsOverAWideQueue() {
    let queue = Queue(label: "wide-apply")
    queue.setWidth(2)
    let meeting = Meeting(2)
    let met = Counter()
    queue.apply(iterations: 2) { _ in if meeting.arriveAndWait() { _ = met.increment() } }
    #expect(met.increment() == 3)
  }

  /// A suspended wide queue starts nothing, including items already handed to its back and
  /// waiting there for width; `resume` lets them go.
  @Test func suspensionHoldsItemsWaitingForWidth() {
    let queue = Queue(label: "wide-suspend")
    queue.setWidth(2)
    queue.setWidth(1)
    queue.sync(flags: .barrier) {}
    let gate = Latch()
    let firstIn = Latch()
    let secondRan = Latch()
    let firstOut = Latch()
    queue.async {
      firstIn.open()
      _ = gate.wait(seconds: 30)
      firstOut.open()
    }
    #expect(firstIn.wait(seconds: 30))
    queue.async { secondRan.open() }
    // Until the front has handed the second item to the back, where it waits for width.
    while queue.serialHasPendingItems
      || queue.state.load(ordering: .acquiring) & SerialState.scheduled != 0
    {
      sched_yield()
    }
    queue.suspend()
    gate.open()
    #expect(firstOut.wait(seconds: 30))
    // The first item's end would start the second at once; a second is ample to see it.
    #expect(!secondRan.wait(seconds: 1))
    queue.resume()
    #expect(secondRan.wait(seconds: 30))
  }

  /// An actor whose executor is made wide still runs one job at a time (actor jobs are
  /// barrier items), also for jobs queued before the switch.
  @Test func anActorOnAQueueMadeWideRunsOneJobAtATime() async {
    actor OnQueue {
      let queue: Queue
      let occupancy = Occupancy()
      init(_ queue: Queue) { self.queue = queue }
      nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
      func touch() {
        occupancy.enter()
        for _ in 0..<2000 { _ = occupancy.inside.load(ordering: .relaxed) }
        occupancy.leave()
      }
    }
    let queue = Queue(label: "wide-actor")
    let actor = OnQueue(queue)
    await withTaskGroup(of: Void.self) { group in
      for index in 0..<400 {
        if index == 50 { queue.setWidth(8) }
        group.addTask { await actor.touch() }
      }
    }
    #expect(queue.width == 8)
    #expect(actor.occupancy.most.load(ordering: .sequentiallyConsistent) == 1)
  }

  /// A serial queue that targets a wide one holds one shared slot of it while it drains: a
  /// `sync` from its work onto the wide queue is legal (no false deadlock trap), and does not
  /// count as holding the wide queue alone.
  @Test func syncOntoAWideTargetFromItsChildIsNotADeadlock() async {
    await #expect(processExitsWith: .success) {
      let wide = Queue(label: "wide-parent")
      wide.setWidth(4)
      wide.sync(flags: .barrier) {}
      let child = Queue(label: "child", target: wide)
      var ran = false
      child.sync {
        precondition(!wide.isHeldExclusivelyByCurrentThread)
        wide.sync { ran = true }
      }
      precondition(ran)
    }
  }

  /// An I/O channel's handlers for a queue on which `setWidth` was called still run one at a
  /// time, in the order of the bytes.
  @Test func ioHandlersOnAWideQueueRunInOrder() throws {
    var ends: [Int32] = [-1, -1]
    #expect(pipe(&ends) == 0)
    defer { close(ends[0]) }
    let queue = Queue(label: "wide-io")
    queue.setWidth(8)
    let occupancy = Occupancy()
    let received = Locked<[UInt8]>([])
    let ended = Latch()
    // The descriptor is closed (deferred) only after the cleanup: the channel gives its flags
    // back then, and a number closed earlier may belong to another test by that time.
    let cleaned = Latch()
    let channel = IOChannel(kind: .stream, fd: ends[0]) { _ in cleaned.open() }
    channel.setLowWater(1)
    channel.read(length: Int.max, queue: queue) { done, data, _ in
      occupancy.enter()
      let bytes = data.array
      for _ in 0..<20_000 { _ = occupancy.inside.load(ordering: .relaxed) }
      received.withLock { $0.append(contentsOf: bytes) }
      occupancy.leave()
      if done { ended.open() }
    }
    let writer = ends[1]
    let chunks = 64
    var expected: [UInt8] = []
    for index in 0..<chunks {
      let chunk = [UInt8](repeating: UInt8(index), count: 512)
      expected += chunk
      #expect(chunk.withUnsafeBytes { Glibc.write(writer, $0.baseAddress, 512) } == 512)
    }
    close(writer)
    #expect(ended.wait(seconds: 30))
    #expect(received.withLock { $0 } == expected)
    #expect(occupancy.most.load(ordering: .sequentiallyConsistent) == 1)
    channel.close()
    #expect(cleaned.wait(seconds: 30))
  }

  /// `setWidth(1)` on a queue never made wide changes nothing (it keeps the lock-free `sync`).
  @Test func widthOneOnASerialQueueChangesNothing() {
    let queue = Queue(label: "still-serial")
    queue.setWidth(1)
    #expect(!queue.widthRequested)
    #expect(queue.state.load(ordering: .acquiring) == 0)
    #expect(queue.sync { 7 } == 7)
  }

  /// A queue released while inactive with a width change still queued is freed, and says so
  /// like any queue released with work queued.
  @Test func aQueueReleasedWithAWidthChangeQueuedIsFreed() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      do {
        let queue = Queue(label: "pending-width", attributes: .initiallyInactive)
        queue.setWidth(2)
      }
    }
    expectMessage(
      result,
      "queue \"pending-width\" was released while suspended or inactive with work still queued")
  }

  @Test func setWidthOnTheMainQueueTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Queue.main.setWidth(2)
    }
    expectMessage(
      result, "setWidth(2) on queue \"loopdispatch.main\", the main queue or a global queue")
  }

  @Test func aWidthBelowOneTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      Queue(label: "narrow").setWidth(0)
    }
    expectMessage(result, "queue width must be at least 1, got 0 (queue \"narrow\")")
  }
}
