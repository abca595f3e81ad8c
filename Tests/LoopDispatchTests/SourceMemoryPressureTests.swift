import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// MemoryPressureSource. Real memory pressure cannot be caused on demand here (it would need
/// the whole machine, or a cgroup v2 the tests do not have, to stall on memory), so: the real
/// pressure file is opened, triggers written, registered and torn down (descriptors counted);
/// a missing pressure file fails creation; and delivery — levels, `normal` after the quiet
/// period, re-arming — is tested on descriptors the test controls that signal `EPOLLPRI` the
/// way a trigger does (TCP urgent data on loopback).
@Suite(.serialized) struct SourceMemoryPressureTests {
  @Test func aSourceOnTheRealPressureFileActivatesAndCancelsAndClosesItsDescriptors() throws {
    let path = MemoryPressureSource.defaultPressureFile
    guard access(path, F_OK) == 0 else {
      // No pressure stall information here: creation must say so.
      #expect(throws: EventLoopError.self) { try MemoryPressureSource() }
      return
    }
    for (levels, descriptors) in [
      (MemoryPressureSource.Levels.all, 2), ([.warning], 1), ([.critical], 1), ([.normal], 1),
    ] {
      let before = countDescriptors(linkingTo: path)
      let queue = Queue(label: "pressure")
      let source = try MemoryPressureSource(levels: levels, queue: queue, label: "real")
      #expect(source.mask == levels)
      #expect(countDescriptors(linkingTo: path) == before + descriptors)
      let registered = Latch()
      let cancelled = Latch()
      source.setRegistrationHandler { registered.open() }
      source.setCancelHandler { cancelled.open() }
      source.activate()
      #expect(registered.wait())
      #expect(source.registrationError == nil)
      source.cancel()
      #expect(cancelled.wait())
      #expect(countDescriptors(linkingTo: path) == before)
    }
  }

  @Test func aMissingPressureFileFailsCreationNamingTheFile() {
    let path = "/nonexistent/pressure/memory"
    do {
      _ = try MemoryPressureSource(
        levels: .all, pressureFile: path, queue: .global(), label: "absent")
      Issue.record("creation succeeded without a pressure file")
    } catch {
      guard case .unsupported(let feature, let reason) = error else {
        Issue.record("unexpected error \(error)")
        return
      }
      #expect(feature == "memory pressure notification")
      #expect(reason.hasPrefix("\(path) does not exist"))
      #expect("\(error)".contains(path))
    }
  }

  @Test func aFileThatRefusesTriggersFailsCreation() throws {
    // /dev/null takes any write: not a refusal. A directory cannot be opened for writing.
    #expect(throws: EventLoopError.self) {
      try MemoryPressureSource(levels: .all, pressureFile: "/proc", queue: .global(), label: "dir")
    }
  }

  /// A file that takes only part of the trigger (a regular file under a small
  /// RLIMIT_FSIZE, which cuts the write short; in a child process, the limit being the
  /// process's): creation fails as for a refused trigger, naming the short write, and closes
  /// the descriptor it opened.
  @Test func aShortTriggerWriteFailsCreation() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let file: TemporaryFile
      do { file = try TemporaryFile() } catch { exitWithVerdict("FAIL: \(error)") }
      let before = countDescriptors(linkingTo: file.path)
      signal(SIGXFSZ, SIG_IGN)  // A write at the limit would raise it; one across it is cut.
      let resource = __rlimit_resource_t(RLIMIT_FSIZE.rawValue)
      var saved = rlimit()
      if getrlimit(resource, &saved) != 0 { exitWithVerdict("FAIL: getrlimit: errno \(errno)") }
      var limit = saved
      limit.rlim_cur = 5
      if setrlimit(resource, &limit) != 0 { exitWithVerdict("FAIL: setrlimit: errno \(errno)") }
      let outcome: Result<MemoryPressureSource, EventLoopError>
      do throws(EventLoopError) {
        outcome = .success(
          try MemoryPressureSource(
            levels: .warning, pressureFile: file.path, queue: .global(), label: "short"))
      } catch {
        outcome = .failure(error)
      }
      if setrlimit(resource, &saved) != 0 { exitWithVerdict("FAIL: setrlimit: errno \(errno)") }
      switch outcome {
      case .success: exitWithVerdict("FAIL: creation succeeded after a short write of the trigger")
      case .failure(.unsupported(let feature, let reason)):
        let expected =
          "\(file.path) took only 5 of the 20 bytes of the trigger \"some 300000 2000000\" "
          + "(a short write, which sets no trigger)"
        if feature != "memory pressure notification" || reason != expected {
          exitWithVerdict("FAIL: \(feature): \(reason)")
        }
      case .failure(let error): exitWithVerdict("FAIL: \(error)")
      }
      if countDescriptors(linkingTo: file.path) != before {
        exitWithVerdict("FAIL: a descriptor was kept")
      }
      exitWithVerdict("VERDICT ok")
    }
    expectVerdictOK(result)
  }

  @Test func aWarningIsReportedThenNormalAfterTheQuietPeriod() throws {
    let (watched, peer) = try urgentDataPair()
    let queue = Queue(label: "pressure-events")
    let quiet = Duration.milliseconds(100)
    let source = MemoryPressureSource(
      levels: [.normal, .warning], descriptors: [(watched, .warning)], quietPeriod: quiet,
      queue: queue, label: "injected")
    let seen = Locked([UInt]())
    let normalSeen = Latch()
    let warningSeen = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let data = source.data
      consumeUrgentByte(watched)  // As polling a PSI trigger consumes its event.
      seen.withLock { $0.append(data) }
      if data & MemoryPressureSource.Levels.warning.rawValue != 0 { warningSeen.open() }
      if data & MemoryPressureSource.Levels.normal.rawValue != 0 { normalSeen.open() }
    }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    let sent = Deadline.now
    #expect(sendUrgentByte(peer))
    #expect(warningSeen.wait())
    #expect(normalSeen.wait())
    #expect(Deadline.now >= sent + quiet)  // Never before the quiet period.
    let runs = seen.value
    // Normally two runs, warning then normal; merged into one if the queue was held up for
    // the whole quiet period.
    #expect(runs.reduce(0, |) == 0x3)
    #expect(runs.first.map { $0 & 0x2 != 0 } == true)
    #expect(runs.last.map { $0 & 0x1 != 0 } == true)
    // A second episode after the first ended: the trigger was re-armed after the delivery.
    let second = Latch()
    source.setEventHandler { [unowned source] in
      consumeUrgentByte(watched)
      if source.data & 0x2 != 0 { second.open() }
    }
    #expect(sendUrgentByte(peer))
    #expect(second.wait())
    source.cancel()
    #expect(cancelled.wait())
    close(peer)
  }

  /// A warning whose delivery is held up on a busy queue past the quiet period: the episode
  /// is not over (no later report could have come while the trigger waited for its re-arm),
  /// so the quiet period starts again and the handler sees the warning alone, then normal.
  @Test func aWarningHeldUpOnABusyQueueIsNotFollowedByAnEarlyNormal() throws {
    let (watched, peer) = try urgentDataPair()
    let queue = Queue(label: "pressure-held")
    let quiet = Duration.milliseconds(50)
    let source = MemoryPressureSource(
      levels: [.normal, .warning], descriptors: [(watched, .warning)], quietPeriod: quiet,
      queue: queue, label: "held")
    let seen = Locked([UInt]())
    let normalSeen = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      let data = source.data
      consumeUrgentByte(watched)
      seen.withLock { $0.append(data) }
      if data & MemoryPressureSource.Levels.normal.rawValue != 0 { normalSeen.open() }
    }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    let release = Latch()
    queue.async { _ = release.wait() }  // The queue is busy: the delivery waits behind this.
    let restartsBefore = MemoryPressureSource.quietPeriodsRestarted.load(ordering: .relaxed)
    #expect(sendUrgentByte(peer))
    // The quiet period ends while the warning waits: it must start again, not report normal.
    let deadline = Deadline.now + .seconds(30)
    while MemoryPressureSource.quietPeriodsRestarted.load(ordering: .relaxed) == restartsBefore
      && Deadline.now < deadline
    {
      sched_yield()
    }
    #expect(MemoryPressureSource.quietPeriodsRestarted.load(ordering: .relaxed) > restartsBefore)
    release.open()
    #expect(normalSeen.wait())
    source.cancel()
    #expect(cancelled.wait())
    let runs = seen.value
    #expect(runs.first == MemoryPressureSource.Levels.warning.rawValue, "\(runs)")
    #expect(runs.last == MemoryPressureSource.Levels.normal.rawValue, "\(runs)")
    close(peer)
  }

  @Test func aCriticalTriggerReportsCritical() throws {
    let (criticalEnd, criticalPeer) = try urgentDataPair()
    let queue = Queue(label: "pressure-critical")
    let source = MemoryPressureSource(
      levels: [.critical], descriptors: [(criticalEnd, .critical)], quietPeriod: .seconds(3600),
      queue: queue, label: "critical-only")
    let seen = Locked([UInt]())
    let fired = Latch()
    let cancelled = Latch()
    source.setEventHandler { [unowned source] in
      consumeUrgentByte(criticalEnd)
      seen.withLock { $0.append(source.data) }
      fired.open()
    }
    source.setCancelHandler { cancelled.open() }
    source.activate()
    #expect(sendUrgentByte(criticalPeer))
    #expect(fired.wait())
    queue.sync {}
    source.cancel()
    #expect(cancelled.wait())
    // Critical only: no normal (not asked for), and the consumed trigger did not fire again.
    #expect(seen.value == [MemoryPressureSource.Levels.critical.rawValue])
    close(criticalPeer)
  }

  @Test func unknownLevelBitsAreAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? MemoryPressureSource(levels: .init(rawValue: 0x9), label: "odd")
    }
    expectMessage(result, "memory pressure source \"odd\" given unknown level bits 0x8")
  }

  @Test func noLevelAtAllIsAClientBug() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = try? MemoryPressureSource(levels: [], label: "none")
    }
    expectMessage(result, "memory pressure source \"none\" asks for no level")
  }
}

/// A connected loopback TCP pair: urgent data sent on the second makes the first report
/// `EPOLLPRI` until it is read with `MSG_OOB`.
private func urgentDataPair() throws -> (watched: Int32, peer: Int32) {
  let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  guard listener >= 0 else { throw SpawnError(code: errno) }
  defer { close(listener) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  // sockaddr_in viewed as sockaddr, as the socket calls take it.
  let bound = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
      bind(listener, pointer, length) == 0 && listen(listener, 1) == 0
        && getsockname(listener, pointer, &length) == 0
    }
  }
  guard bound else { throw SpawnError(code: errno) }
  let peer = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  guard peer >= 0 else { throw SpawnError(code: errno) }
  let connected = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(peer, $0, length) == 0 }
  }
  guard connected else {
    close(peer)
    throw SpawnError(code: errno)
  }
  let watched = accept(listener, nil, nil)
  guard watched >= 0 else {
    close(peer)
    throw SpawnError(code: errno)
  }
  return (watched, peer)
}

private func sendUrgentByte(_ fd: Int32) -> Bool {
  var byte: UInt8 = 1
  return send(fd, &byte, 1, Int32(MSG_OOB)) == 1
}

private func consumeUrgentByte(_ fd: Int32) {
  var byte: UInt8 = 0
  _ = recv(fd, &byte, 1, Int32(MSG_OOB) | Int32(MSG_DONTWAIT))
}
