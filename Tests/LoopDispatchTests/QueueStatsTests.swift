import CLoopShims
import Glibc
import LoopDispatch
import TestSupport
import Testing

/// Per-queue counters, wait times, label folding and their renderings. Each test uses
/// labels of its own, since other suites run in the same process at the same time.
@Suite struct QueueStatsTests {
  @Test func serialQueueCountsSubmittedCompletedAndDepth() throws {
    let queue = Queue(label: "stats.serial.counts")
    queue.suspend()
    for _ in 0..<5 { queue.async {} }
    let held = try #require(stats(of: queue.label))
    #expect(held.kind == .serial)
    #expect(held.queues == 1)
    #expect(held.submitted == 5)
    #expect(held.completed == 0)
    #expect(held.depth == 5)
    queue.resume()
    queue.sync {}  // Runs after the five: submitted 6.
    let drained = try #require(eventually(label: queue.label) { $0.completed == 6 })
    #expect(drained.submitted == 6)
    #expect(drained.depth == 0)
  }

  /// A `sync` onto an idle serial queue runs inline and its holder counts it alone (no
  /// atomic add to the shared submission count): the figures still add up with enqueued
  /// items, and the `sync` running is in the depth, also through a serial target chain.
  @Test func inlineSyncsAddUpWithEnqueuedItems() throws {
    let queue = Queue(label: "stats.serial.inline")
    for _ in 0..<3 { queue.sync {} }
    let during = queue.sync { stats(of: queue.label) }  // The 4th, seen from inside.
    #expect(during?.submitted == 4)
    #expect(during?.completed == 3)
    #expect(during?.depth == 1)
    let ran = Latch()
    queue.async { ran.open() }
    #expect(ran.wait())
    queue.sync {}  // The 6th: inline again once the drain is over, or queued behind it.
    let mixed = try #require(eventually(label: queue.label) { $0.completed == 6 })
    #expect(mixed.submitted == 6)
    #expect(mixed.depth == 0)
    // Through a serial target (both locked together): counted on the queue synced onto.
    let inner = Queue(label: "stats.serial.inline.inner", target: queue)
    let innerDuring = inner.sync { stats(of: inner.label) }
    #expect(innerDuring?.submitted == 1)
    #expect(innerDuring?.depth == 1)
    let innerDone = try #require(eventually(label: inner.label) { $0.completed == 1 })
    #expect(innerDone.submitted == 1)
    #expect(try #require(stats(of: queue.label)).submitted == 6)
  }

  @Test func concurrentQueueCountsItemsBarriersAndSyncs() throws {
    let queue = Queue(label: "stats.concurrent.counts", attributes: .concurrent)
    queue.suspend()
    for index in 0..<10 { queue.async(flags: index == 4 ? .barrier : []) {} }
    let held = try #require(stats(of: queue.label))
    #expect(held.kind == .concurrent)
    #expect(held.submitted == 10)
    #expect(held.depth == 10)
    queue.resume()
    queue.sync(flags: .barrier) {}
    let drained = try #require(eventually(label: queue.label) { $0.completed == 11 })
    #expect(drained.submitted == 11)
    #expect(drained.depth == 0)
  }

  @Test func waitFromSubmissionToStartIsMeasured() throws {
    let queue = Queue(label: "stats.serial.wait")
    // 200 items held by the suspension: each carries a stamp with a chance of one in eight
    // (`Queue+Serial.swift`, step 5 (a)), so none does with a chance of (7/8)^200, 3e-12.
    let heldFor = heldWhileSuspended(queue, milliseconds: 30) {
      for _ in 0..<200 { queue.async {} }
    }
    let drained = try #require(eventually(label: queue.label) { $0.completed == 200 })
    // 1% slack: wait times are cycle counts converted at a calibrated rate.
    #expect(drained.maxWait >= heldFor * 0.99)
    #expect(drained.maxWait < .seconds(60))
    // Every timed wait was at least W (but the first item's, if (b) timed it from the
    // resume), and one wait of W after any others gives a recent average of W/8 or more.
    #expect(drained.recentWait >= heldFor * 0.99 / 8)
    #expect(drained.recentWait <= drained.maxWait)
  }

  /// `Queue+Serial.swift`, step 5 (b): an item submitted to an idle queue is timed from the
  /// instant its submission scheduled the drain, stamped or not. Eight idle queues get one
  /// item each while their drains wait behind a suspended target: every one of them shows
  /// the whole wait. (Without (b), only those whose item drew a stamp, one in eight on
  /// average, show any.)
  @Test func anItemThatWaitedAloneIsAlwaysTimed() throws {
    let target = Queue(label: "stats.serial.alone.target")
    let labels = (0..<8).map { "stats.serial.alone.\($0)" }
    let queues = labels.map { Queue(label: $0, target: target) }
    let heldFor = heldWhileSuspended(target, milliseconds: 10) {
      for queue in queues { queue.async {} }
    }
    for label in labels {
      let drained = try #require(eventually(label: label) { $0.completed == 1 })
      #expect(drained.maxWait >= heldFor * 0.99, "\(label)")
    }
    // Alive until here: a released queue's figures leave `RuntimeStats.queues` for
    // `releasedQueues` (an optimised build released them after the last submission).
    withExtendedLifetime(queues) {}
  }

  /// `Queue+Serial.swift`, step 5 (a): of 296 items held by a suspension, the drains time
  /// exactly those that drew a stamp (counted by the submitting thread), plus the first if
  /// it drew none (b): not every item (as before the sampling), and not none (a chance of
  /// (7/8)^296, 7e-18). The held items' wait is still measured in full.
  #if DEBUG
    @Test func aSerialQueueTimesItsStampedItemsAndTheFirstOfADrain() throws {
      let queue = Queue(label: "stats.serial.sampled")
      let (heldFor, stamps) = heldCountingStamps(queue, items: 296)
      let drained = try #require(eventually(label: queue.label) { $0.completed == 296 })
      #expect(drained.maxWait >= heldFor * 0.99)
      #expect(stamps > 0 && stamps < 296)
      #expect((stamps...stamps + 1).contains(queue.timedStarts))
    }
  #endif

  @Test func concurrentQueueWaitIsMeasured() throws {
    let queue = Queue(label: "stats.concurrent.wait", attributes: .concurrent)
    // 200 items, all held: some are timed (each with a chance of one in eight; none with a
    // chance of 3e-12).
    let heldFor = heldWhileSuspended(queue, milliseconds: 20) {
      for _ in 0..<200 { queue.async {} }
    }
    let drained = try #require(eventually(label: queue.label) { $0.completed == 200 })
    #expect(drained.maxWait >= heldFor * 0.99)
    #expect(drained.recentWait >= heldFor * 0.99 / 8)
  }

  #if DEBUG
    /// A concurrent queue times exactly the items whose submission drew a stamp
    /// (`Ticks.sampledStamp`, counted by the submitting thread), and the starts of the
    /// others read no clock: not all 296 (as before the sampling), and not none (a chance of
    /// (7/8)^296, 7e-18).
    @Test func aConcurrentQueueTimesExactlyItsStampedItems() throws {
      let queue = Queue(label: "stats.concurrent.sampled", attributes: .concurrent)
      let (heldFor, stamps) = heldCountingStamps(queue, items: 296)
      let drained = try #require(eventually(label: queue.label) { $0.completed == 296 })
      #expect(drained.submitted == 296)
      #expect(drained.maxWait >= heldFor * 0.99)
      #expect(stamps > 0 && stamps < 296)
      #expect(queue.timedStarts == stamps)
    }
  #endif

  @Test func releasedQueuesFoldIntoTheirLabelSoCountersNeverDecrease() throws {
    let label = "stats.fold.\(getpid())"
    do {
      let queues = (0..<3).map { _ in Queue(label: label) }
      for queue in queues {
        queue.async {}
        queue.sync {}
      }
      let live = RuntimeStats.current.queuesByLabel.first { $0.label == label }
      #expect(live?.queues == 3)
      #expect(live?.submitted == 6)
      withExtendedLifetime(queues) {}
    }
    // A worker that just finished a drain may hold a queue a moment longer: wait for the
    // last one to go.
    var after = RuntimeStats.current
    let deadline = Deadline.now + .seconds(30)
    while after.queues.contains(where: { $0.label == label }) && Deadline.now < deadline {
      sched_yield()
      after = RuntimeStats.current
    }
    #expect(!after.queues.contains { $0.label == label })
    let released = try #require(after.releasedQueues.first { $0.label == label })
    #expect(released.queues == 0)
    #expect(released.submitted == 6)
    #expect(released.completed == 6)
    let folded = try #require(after.queuesByLabel.first { $0.label == label })
    #expect(folded.submitted == 6)
  }

  /// A snapshot taken while other threads drop the last reference to queues must never be
  /// the one that releases a queue (its deinit unregisters under the lock the snapshot
  /// holds): that deadlocked the server once, so this runs both sides against each other.
  @Test(.timeLimit(.minutes(1))) func snapshotsRaceWithQueuesBeingReleased() {
    let stop = Counter()
    let snapshotter = startThread {
      while stop.current == 0 { _ = RuntimeStats.current.queues.count }
    }
    let threads = (0..<2).map { thread in
      startThread {
        for index in 0..<scaled(3_000) {
          let queue = Queue(label: "stats.race.\(thread).\(index % 50)")
          let done = Latch()
          queue.async { done.open() }
          _ = done.wait()
        }
      }
    }
    for thread in threads { pthread_join(thread, nil) }
    stop.increment()
    pthread_join(snapshotter, nil)
    // The worker that ran a thread's last item counts its completion just after the item
    // opened the latch (and may be preempted in between): wait for the counts to settle.
    func busyRaceQueues() -> Bool {
      RuntimeStats.current.queues.contains { $0.label.hasPrefix("stats.race.") && $0.depth > 0 }
    }
    let deadline = Deadline.now + .seconds(30)
    while busyRaceQueues() && Deadline.now < deadline { sched_yield() }
    #expect(!busyRaceQueues())
  }

  @Test func aQueueThatNeverRanAnythingIsNotListed() {
    let idle = Queue(label: "stats.never.used")
    #expect(!RuntimeStats.current.queues.contains { $0.label == idle.label })
    idle.sync {}
    #expect(RuntimeStats.current.queues.contains { $0.label == idle.label })
  }

  @Test func releasedLabelsPastTheLimitFoldIntoOneEntry() async {
    // In a child process: filling the table of released labels would change what other
    // tests in this process see.
    await #expect(processExitsWith: .success) {
      for index in 0..<300 {
        let queue = Queue(label: "stats.cap.\(index)")
        queue.sync {}
      }
      let released = RuntimeStats.current.releasedQueues
      let other = released.first { $0.label == "(other labels)" }
      // 256 labels are remembered; the rest (at least 300 - 256 of ours) share one entry,
      // and no count is lost: every one of the 300 syncs is in some entry.
      let ours = released.filter { $0.label.hasPrefix("stats.cap.") }
      let total = ours.reduce(0) { $0 + $1.submitted } + (other?.submitted ?? 0)
      exit(released.count <= 257 && (other?.submitted ?? 0) >= 44 && total >= 300 ? 0 : 1)
    }
  }

  @Test func globalAndMainQueuesAreListed() {
    let stats = RuntimeStats.current
    #expect(stats.queues.contains { $0.kind == .main && $0.label == Queue.main.label })
    for priority in Priority.allCases {
      #expect(
        stats.queues.contains { $0.kind == .global && $0.label == Queue.global(priority).label })
    }
  }

  @Test func globalQueuesCountTheirItems() throws {
    // Other suites use the global queues at the same time: check growth, not exact values.
    let label = Queue.global(.background).label
    let before = try #require(stats(of: label))
    let count = 100
    let done = Latch()
    let ran = Counter()
    for _ in 0..<count {
      Queue.global(.background).async { if ran.increment() == count { done.open() } }
    }
    #expect(done.wait())
    let after = try #require(
      eventually(label: label) { $0.completed >= before.completed + UInt64(count) })
    #expect(after.kind == .global)
    #expect(after.submitted >= before.submitted + UInt64(count))
    #expect(after.maxWait > .zero)
  }

  @Test func metricsAndStatusTextCarryEachLabelEscaped() {
    let queue = Queue(label: "stats \"quoted\" \\ label")
    queue.sync {}
    let stats = RuntimeStats.current
    let metrics = stats.prometheusText
    #expect(metrics.contains("# TYPE loopdispatch_queue_submitted_total counter\n"))
    #expect(
      metrics.contains(
        "loopdispatch_queue_submitted_total{queue=\"stats \\\"quoted\\\" \\\\ label\"} 1\n"))
    #expect(
      metrics.contains("loopdispatch_queue_depth{queue=\"stats \\\"quoted\\\" \\\\ label\"} 0\n"))
    #expect(metrics.contains("# TYPE loopdispatch_main_loop_events_total counter\n"))
    #expect(metrics.contains("# TYPE loopdispatch_service_loop_timers_fired_total counter\n"))
    #expect(
      stats.description.contains(
        "queue \"stats \\\"quoted\\\" \\\\ label\" kind serial queues 1 submitted 1 completed 1 depth 0"
      ))
    withExtendedLifetime(queue) {}
  }

  @Test func labelsWithLineBreaksAndCombiningMarksCannotBreakTheExposition() {
    // "\r\n" is one Character, and so is a quote followed by a combining accent.
    let queue = Queue(label: "stats.a\r\nb\"\u{301}c\\\u{301}")
    queue.sync {}
    let metrics = RuntimeStats.current.prometheusText
    #expect(
      metrics.contains(
        "loopdispatch_queue_submitted_total{queue=\"stats.a\\r\\nb\\\"\u{301}c\\\\\u{301}\"} 1\n"))
    // No raw carriage return, and every line (split on the byte, not on Characters, which
    // would keep "\r\n" whole) is a comment or a sample.
    #expect(!metrics.utf8.contains(UInt8(ascii: "\r")))
    for line in metrics.utf8.split(separator: UInt8(ascii: "\n")) {
      let text = String(decoding: line, as: UTF8.self)
      #expect(text.hasPrefix("#") || text.hasPrefix("loopdispatch_"), "\(text)")
    }
    withExtendedLifetime(queue) {}
  }

  @Test func serviceLoopCountsTimersAndEvents() throws {
    let beforeAll = RuntimeStats.current
    let before = beforeAll.serviceLoop
    // An `after` whose deadline has passed by the time it is filed runs at once, not as a
    // driver timer: a scheduler preempted for the whole delay (seen under TSan with a 1 ms
    // delay) files nothing. So try a 20 ms delay up to five times, until one was fired by
    // the driver; a counter that never moves still fails below. (The count is the
    // process's: another suite's timer may move it too, which can only make this pass, not
    // fail; the driver-timer suites count their own timers.)
    for _ in 0..<5 {
      let fired = Latch()
      Queue.global().after(.milliseconds(20)) { fired.open() }
      #expect(fired.wait())
      if RuntimeStats.current.ioTimersFired > beforeAll.ioTimersFired { break }
    }
    // Timer sources of non-main queues are the service loop's.
    let ticked = Latch()
    let timer = TimerSource(queue: Queue(label: "stats.timer"))
    timer.setEventHandler { ticked.open() }
    timer.schedule(deadline: .now + .milliseconds(1))
    timer.activate()
    #expect(ticked.wait())
    timer.cancel()
    var fds: [Int32] = [0, 0]
    #expect(cls_pipe2(&fds, O_CLOEXEC) == 0)
    defer { close(fds[1]) }
    let readable = Latch()
    let source = try ReadSource(fd: fds[0], queue: Queue(label: "stats.events"))
    source.setEventHandler { readable.open() }
    let readEnd = fds[0]
    source.setCancelHandler { close(readEnd) }
    source.activate()
    #expect(write(fds[1], "x", 1) == 1)
    #expect(readable.wait())
    source.cancel()
    let afterAll = RuntimeStats.current
    let after = afterAll.serviceLoop
    #expect(after.timersFired > before.timersFired)
    // `after` timers of non-main queues are the I/O driver's.
    #expect(afterAll.ioTimersFired > beforeAll.ioTimersFired)
    // fd readiness of non-main sources is seen by the I/O driver, not the service loop.
    #expect(afterAll.ioEvents > beforeAll.ioEvents)
    #expect(after.turns > before.turns)
  }
}

/// The live figures of the queue labelled `label`, if exactly one is alive.
private func stats(of label: String) -> QueueStats? {
  let matches = RuntimeStats.current.queues.filter { $0.label == label }
  return matches.count == 1 ? matches[0] : nil
}

/// Polls the queue's figures until `condition` holds (completion is counted just after an
/// item returns, so a caller that saw the item's effect may still be a moment ahead).
/// Suspends `queue`, runs `submit`, keeps the queue suspended for `milliseconds` and resumes
/// it. Returns how long the items were held at least (the clock is read after `submit`).
private func heldWhileSuspended(_ queue: Queue, milliseconds: Int, _ submit: () -> Void)
  -> Duration
{
  queue.suspend()
  submit()
  let submitted = Deadline.now
  // A measured pause (not synchronisation): the items are held at least this long.
  var pause = timespec(tv_sec: 0, tv_nsec: milliseconds * 1_000_000)
  nanosleep(&pause, nil)
  let heldFor = Deadline.now - submitted
  queue.resume()
  return heldFor
}

/// `heldWhileSuspended` for `items` empty items submitted from this thread, with the
/// stamps those submissions drew (`Ticks.sampledStamp`; the resume's own submissions, a
/// drain's or a started item's, come after the count).
private func heldCountingStamps(_ queue: Queue, items: Int) -> (Duration, UInt64) {
  var stamps: UInt64 = 0
  let heldFor = heldWhileSuspended(queue, milliseconds: 10) {
    let before = Ticks.stampsTakenOnThisThread
    for _ in 0..<items { queue.async {} }
    stamps = Ticks.stampsTakenOnThisThread - before
  }
  return (heldFor, stamps)
}

private func eventually(
  label: String, seconds: Int64 = 30, _ condition: (QueueStats) -> Bool
) -> QueueStats? {
  let deadline = Deadline.now + .seconds(seconds)
  while Deadline.now < deadline {
    if let figures = stats(of: label), condition(figures) { return figures }
    sched_yield()
  }
  return nil
}
