import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// Any number of read and write sources on one descriptor, each on its own target, as in
/// libdispatch (`Delivery/IOEntry.swift` gives the rules for sharing one registration).
/// Before, the I/O driver refused a second source of an interest with EEXIST and it never
/// fired.
@Suite struct SourceMultiplexTests {
  /// Three read sources on one pipe (a global, a serial and a concurrent target) all fire;
  /// cancelling one leaves the other two firing.
  @Test func threeReadSourcesOnOnePipeOnDifferentTargetsAllFire() throws {
    let pair = try makePipe()
    let targets: [Queue] = [
      .global(), Queue(label: "multiplex-serial"),
      Queue(label: "multiplex-concurrent", attributes: .concurrent),
    ]
    let probes = try targets.map { try FireProbe(reading: pair.read, on: $0) }
    for probe in probes {
      #expect(probe.source.registrationError == nil, "\(probe.source.queue.label)")
    }
    // Nobody reads: each source fires (again and again, while the byte stays unread).
    writeBytes(pair.write, 1)
    for probe in probes { #expect(probe.waitForFire(after: 0), "\(probe.source.queue.label)") }
    probes[1].cancelAndWait()
    drain(pair.read)
    let before = probes.map(\.fires)
    writeBytes(pair.write, 1)
    #expect(probes[0].waitForFire(after: before[0]), "the global source stopped")
    #expect(probes[2].waitForFire(after: before[2]), "the concurrent source stopped")
    for probe in [probes[0], probes[2]] { probe.cancelAndWait() }
    close(pair.read)
    close(pair.write)
  }

  /// Two readers and two writers on one end of a socketpair. Each writer suspends itself in
  /// its handler; resuming one makes it fire again (its interest is re-armed although the
  /// other writer stays suspended). A reader cancelled leaves the other reading.
  @Test func readersAndWritersShareASocket() throws {
    let (local, peer) = try makeSocketPair()
    let readers = try [Queue(label: "multiplex-reader"), .global()].map {
      try FireProbe(reading: local, on: $0)
    }
    let writers = try [Queue(label: "multiplex-writer"), .global(.high)].map {
      try FireProbe(writing: local, on: $0, suspendingOnFire: true)
    }
    for probe in readers + writers {
      #expect(probe.source.registrationError == nil, "\(probe.source.queue.label)")
    }
    for probe in writers { #expect(probe.waitForFire(after: 0), "a writer never fired") }
    writeBytes(peer, 1)
    for probe in readers { #expect(probe.waitForFire(after: 0), "a reader never fired") }
    let writerFires = writers[0].fires
    writers[0].resumeAfterHandlerSuspended()
    #expect(writers[0].waitForFire(after: writerFires), "a resumed writer did not fire again")
    readers[0].cancelAndWait()
    drain(local)
    let readerFires = readers[1].fires
    writeBytes(peer, 1)
    #expect(readers[1].waitForFire(after: readerFires), "the remaining reader stopped")
    readers[1].cancelAndWait()
    for probe in writers {
      probe.resumeAfterHandlerSuspended()
      probe.cancelAndWait()
    }
    close(local)
    close(peer)
  }

  /// A suspended source does not hold the others up: the active one keeps firing while the
  /// suspended one holds its data, and fires with it once resumed (rule 4 of `IOEntry.swift`).
  @Test func aSuspendedSourceDoesNotHoldUpTheOthers() throws {
    let pair = try makePipe()
    let active = try FireProbe(reading: pair.read, on: Queue(label: "multiplex-active"))
    let held = try FireProbe(reading: pair.read, on: Queue(label: "multiplex-held"))
    held.source.suspend()
    writeBytes(pair.write, 1)
    // Unread data: the active source fires again and again, each time re-armed by itself.
    #expect(active.waitForFire(after: 3), "the active source stalled behind a suspended one")
    #expect(held.fires == 0)
    held.source.resume()
    #expect(held.waitForFire(after: 0), "the resumed source never fired")
    for probe in [active, held] { probe.cancelAndWait() }
    close(pair.read)
    close(pair.write)
  }

  /// While one source's handler is still running, another source of the same interest that
  /// does not read is not fired again and again: the interest is re-armed only when the last
  /// handler handed the event has finished (rule 3 of `IOEntry.swift`). (A window for
  /// activity that must not happen, so nothing to wait for instead.)
  @Test func aSlowHandlerDoesNotMakeTheOthersSpin() throws {
    let pair = try makePipe()
    let release = Latch()
    let slowEntered = Latch()
    let slow = try ReadSource(fd: pair.read, queue: Queue(label: "multiplex-slow"))
    slow.setEventHandler { [unowned slow] in
      slowEntered.open()
      _ = release.wait(seconds: 30)
      _ = drain(slow.fd)
    }
    let slowCancelled = Latch()
    slow.setCancelHandler { slowCancelled.open() }
    slow.activate()
    let fast = try FireProbe(reading: pair.read, on: .global())
    writeBytes(pair.write, 1)
    #expect(slowEntered.wait())
    #expect(fast.waitForFire(after: 0))
    _ = poll(nil, 0, 100)
    let firesWhileBlocked = fast.fires
    release.open()
    #expect(firesWhileBlocked == 1, "the other source fired \(firesWhileBlocked) times")
    slow.cancel()
    #expect(slowCancelled.wait())
    fast.cancelAndWait()
    close(pair.read)
    close(pair.write)
  }

  /// Stress: while sources on various targets join, suspend, resume and leave one
  /// descriptor, a permanent reader keeps getting every byte. A lost re-arm (a mark never
  /// released, a leaver's owed delivery never replaced) would stall it. Small by default;
  /// `LOOPDISPATCH_TEST_SCALE` scales it.
  @Test func churnOfOtherSourcesNeverStallsAReader() throws {
    let pair = try makePipe()
    let reader = try ReadSource(fd: pair.read, queue: Queue(label: "multiplex-churn-reader"))
    let got = LoopDispatch.Semaphore(value: 0)
    reader.setEventHandler { [unowned reader] in
      if drain(reader.fd) > 0 { got.signal() }
    }
    let readerCancelled = Latch()
    reader.setCancelHandler { readerCancelled.open() }
    reader.activate()
    let targets: [Queue] = [
      .global(), Queue(label: "multiplex-churn-serial"),
      Queue(label: "multiplex-churn-concurrent", attributes: .concurrent),
    ]
    var others: [(source: Source, suspended: Bool)] = []
    let othersCancelled = Counter()
    let allCancelled = Latch()
    let rounds = scaled(300)
    for round in 0..<rounds {
      let other = try ReadSource(fd: pair.read, queue: targets[round % targets.count])
      other.setEventHandler {}
      other.setCancelHandler { if othersCancelled.increment() == rounds { allCancelled.open() } }
      let suspended = round % 4 == 1
      if suspended { other.suspend() }
      other.activate()
      others.append((other, suspended))
      writeBytes(pair.write, 1)
      if got.wait(timeout: .seconds(30)) == .timedOut {
        Issue.record("round \(round): the reader stalled")
        break
      }
      // Leave in another order than joining; resume the suspended ones now and then.
      if round % 3 == 2 { others.removeFirst().source.cancel() }
      if round % 5 == 4 {
        for index in others.indices where others[index].suspended {
          others[index].source.resume()
          others[index].suspended = false
        }
      }
    }
    for other in others { other.source.cancel() }
    others.removeAll()
    #expect(allCancelled.wait(), "\(othersCancelled.current) of \(rounds) cancel handlers ran")
    reader.cancel()
    #expect(readerCancelled.wait())
    close(pair.read)
    close(pair.write)
  }

  /// Sources on one descriptor with targets on the main loop and on the I/O driver: two
  /// main-queue sources, a serial queue targeting main, a serial queue and a global queue
  /// (the `source-multiplex-main` scenario of LoopDispatchTestHost).
  @Test func mainAndDriverSourcesShareADescriptor() {
    let result = runProgram("LoopDispatchTestHost", ["source-multiplex-main"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok source-multiplex-main"), "\(result.output)")
  }
}

/// A read or write source that counts its fires (it does not read or write).
private final class FireProbe: Sendable {
  let source: Source
  private let count = Counter()
  /// Resumes made by `resumeAfterHandlerSuspended` (test thread only).
  private let resumes = Counter()
  private let fired = LoopDispatch.Semaphore(value: 0)
  private let cancelled = Latch()
  /// Whether the handler suspends the source on each fire (set once, before activation).
  private let suspends = Atomic<Bool>(false)

  init(reading fd: Int32, on queue: Queue) throws {
    source = try ReadSource(fd: fd, queue: queue, label: "probe-\(queue.label)")
    start(suspendingOnFire: false)
  }

  init(writing fd: Int32, on queue: Queue, suspendingOnFire: Bool) throws {
    source = try WriteSource(fd: fd, queue: queue, label: "probe-\(queue.label)")
    start(suspendingOnFire: suspendingOnFire)
  }

  private func start(suspendingOnFire: Bool) {
    suspends.store(suspendingOnFire, ordering: .relaxed)
    source.setEventHandler { [unowned self] in
      if suspendingOnFire { source.suspend() }
      count.increment()
      fired.signal()
    }
    source.setCancelHandler { [cancelled] in cancelled.open() }
    source.activate()
  }

  var fires: Int { count.current }

  /// Resumes the source if its handler suspended it and it was not resumed since (a source
  /// that never fired is not suspended: resuming it would be an over-resume).
  func resumeAfterHandlerSuspended() {
    guard count.current > resumes.current else { return }
    resumes.increment()
    source.resume()
  }

  /// Waits (up to 30 s) until the source has fired more than `earlier` times.
  func waitForFire(after earlier: Int) -> Bool {
    while count.current <= earlier {
      if fired.wait(timeout: .seconds(30)) == .timedOut { return count.current > earlier }
    }
    return true
  }

  func cancelAndWait() {
    source.cancel()
    // As in GCD, the cancel handler waits while the source is suspended: resume the one
    // suspension a handler may have left. Checked again after each short wait, since a
    // delivery in flight at the cancel may still suspend the source after the first check.
    for _ in 0..<30 {
      if suspends.load(ordering: .relaxed) { resumeAfterHandlerSuspended() }
      if cancelled.wait(seconds: 1) { return }
    }
    Issue.record("the cancel handler of \(source.queue.label) never ran")
  }
}
