import CLoopShims
import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

@Suite struct SemaphoreTests {
  @Test func valueNLetsNWaitsThroughThenTheNextTimesOut() {
    let semaphore = Semaphore(value: 3)
    // A deadline of now cannot sleep: each of these must take a unit on the fast path.
    for _ in 0..<3 { #expect(semaphore.wait(timeout: .now) == .success) }
    let start = Deadline.now
    #expect(semaphore.wait(timeout: .milliseconds(20)) == .timedOut)
    #expect(Deadline.now - start >= .milliseconds(20))
    // The timed-out wait gave its unit back: one signal is one more wait, no more.
    #expect(semaphore.signal() == false)
    #expect(semaphore.wait(timeout: .now) == .success)
    #expect(semaphore.wait(timeout: .now) == .timedOut)
    for _ in 0..<3 { #expect(semaphore.signal() == false) }
  }

  @Test func twoThreadsPingPongInStrictAlternation() {
    let rounds = scaled(10_000)
    let ping = Semaphore(value: 0)
    let pong = Semaphore(value: 0)
    // Not atomic on purpose: only the semaphores order the two threads' accesses, so a
    // missing release/acquire shows up under ThreadSanitizer.
    let turn = Shared(0)
    let outOfTurn = Counter()
    let pinger = SyncTestThread.start {
      for round in 0..<rounds {
        if turn.value != 2 * round { outOfTurn.increment() }
        turn.value = 2 * round + 1
        pong.signal()
        ping.wait()
      }
    }
    let ponger = SyncTestThread.start {
      for round in 0..<rounds {
        pong.wait()
        if turn.value != 2 * round + 1 { outOfTurn.increment() }
        turn.value = 2 * round + 2
        ping.signal()
      }
    }
    #expect(pinger.join())
    #expect(ponger.join())
    #expect(outOfTurn.current == 0)
    #expect(turn.value == 2 * rounds)
  }

  @Test func valueTwoNeverLetsMoreThanTwoInside() {
    let semaphore = Semaphore(value: 2)
    let inside = Atomic<Int>(0)
    let most = Atomic<Int>(0)
    let entries = Counter()
    let go = Latch()
    let perThread = scaled(3_000)
    let threads = (0..<6).map { index in
      SyncTestThread.start {
        _ = go.wait()
        for _ in 0..<perThread {
          if index % 2 == 0 {
            semaphore.wait()
          } else {
            // Short timed waits race their give-up against signals.
            while semaphore.wait(timeout: .microseconds(20)) == .timedOut {}
          }
          let now = inside.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
          most.max(now, ordering: .sequentiallyConsistent)
          entries.increment()
          for _ in 0..<20 { spinHint() }
          inside.wrappingSubtract(1, ordering: .sequentiallyConsistent)
          semaphore.signal()
        }
      }
    }
    go.open()
    for thread in threads { #expect(thread.join(seconds: 120)) }
    #expect(entries.current == 6 * perThread)
    #expect(most.load(ordering: .sequentiallyConsistent) <= 2)
    // Exactly two units are left: none lost and none made up by the races.
    #expect(semaphore.wait(timeout: .now) == .success)
    #expect(semaphore.wait(timeout: .now) == .success)
    #expect(semaphore.wait(timeout: .now) == .timedOut)
    semaphore.signal()
    semaphore.signal()
  }

  @Test func timedWaitRacingASignalEitherTakesTheUnitOrLeavesIt() {
    let semaphore = Semaphore(value: 0)
    let rounds = scaled(2_000)
    let taken = Counter()
    let start = Semaphore(value: 0)
    let finished = Semaphore(value: 0)
    let waiter = SyncTestThread.start {
      for round in 0..<rounds {
        start.wait()
        if semaphore.wait(timeout: .microseconds(Int64(round % 50))) == .success {
          taken.increment()
        }
        finished.signal()
      }
    }
    var leftOver = 0
    for _ in 0..<rounds {
      start.signal()
      semaphore.signal()
      guard finished.wait(timeout: .seconds(30)) == .success else {
        Issue.record("the waiter stopped answering")
        return
      }
      // The waiter either took the unit or gave its decrement back and left the unit here.
      if semaphore.wait(timeout: .now) == .success { leftOver += 1 }
    }
    #expect(waiter.join())
    #expect(taken.current + leftOver == rounds)
    #expect(semaphore.wait(timeout: .now) == .timedOut)
  }

  @Test func aSerialQueueHeldByAWaitingItemRunsTheRestInOrderAfterTheSignal() {
    let queue = Queue(label: "held")
    let semaphore = Semaphore(value: 0)
    let items = scaled(1_000)
    let log = Locked([Int]())
    let firstStarted = Latch()
    let done = Latch()
    queue.async {
      firstStarted.open()
      semaphore.wait()
      log.withLock { $0.append(-1) }
    }
    for index in 0..<items {
      queue.async {
        log.withLock { $0.append(index) }
        if index == items - 1 { done.open() }
      }
    }
    #expect(firstStarted.wait())
    // Give a broken queue the chance to run later items early: none may run yet.
    let probe = Semaphore(value: 0)
    #expect(probe.wait(timeout: .milliseconds(20)) == .timedOut)
    #expect(log.value.isEmpty)
    let signaller = SyncTestThread.start { semaphore.signal() }
    #expect(signaller.join())
    #expect(done.wait())
    #expect(log.value == [-1] + Array(0..<items))
  }

  @Test func signalReportsWhetherItWokeAWaiter() {
    let semaphore = Semaphore(value: 0)
    // No waiter: each signal only adds a unit.
    #expect(semaphore.signal() == false)
    #expect(semaphore.signal() == false)
    #expect(semaphore.wait(timeout: .now) == .success)
    #expect(semaphore.wait(timeout: .now) == .success)
    // A waiter that timed out is no longer counted.
    #expect(semaphore.wait(timeout: .milliseconds(1)) == .timedOut)
    #expect(semaphore.signal() == false)
    #expect(semaphore.wait(timeout: .now) == .success)
    // A waiter asleep in the kernel is woken, and the signal says so.
    let result = Locked<WaitResult?>(nil)
    let waiter = SyncTestThread.start {
      let outcome = semaphore.wait(timeout: .seconds(60))
      result.withLock { $0 = outcome }
    }
    #expect(waiter.waitUntilSleeping())
    #expect(semaphore.signal() == true)
    #expect(waiter.join())
    #expect(result.value == .success)
    #expect(semaphore.signal() == false)
    #expect(semaphore.wait(timeout: .now) == .success)
  }

  #if DEBUG
    /// A signal whose unit goes to a waiter still in its spin makes no `futex_wake`; one to
    /// a waiter asleep in the kernel makes exactly one. (With a wake-up on every signal to a
    /// counted waiter, as before `sleepers`, the first count is 1.)
    @Test func onlyAnAnnouncedSleeperCostsTheSignalASystemCall() {
      let semaphore = Semaphore(value: 0)
      // Held in its spin: up to a minute, whatever preemptions the test machine deals it.
      semaphore.testSpinNanoseconds.store(60_000_000_000, ordering: .relaxed)
      let spinner = SyncTestThread.start { semaphore.wait() }
      // The waiter is counted once its decrement is done; it then spins.
      let counted = Deadline.now + .seconds(60)
      while semaphore.currentValue >= 0 && Deadline.now < counted { sched_yield() }
      #expect(semaphore.currentValue == -1)
      #expect(semaphore.signal() == true)
      #expect(spinner.join())
      #expect(semaphore.wakeCalls == 0)
      // Spin lengths back to normal: the next waiter sleeps, announced.
      semaphore.testSpinNanoseconds.store(0, ordering: .relaxed)
      let sleeper = SyncTestThread.start { semaphore.wait() }
      #expect(sleeper.waitUntilSleeping())
      #expect(semaphore.signal() == true)
      #expect(sleeper.join())
      #expect(semaphore.wakeCalls == 1)
    }
  #endif

  #if DEBUG
    /// A wait whose deadline has passed, on entry or during its spin, gives up without
    /// announcing a sleep: a signal racing it would otherwise pay a `futex_wake` for nobody.
    /// (Checked: a `sleepForToken` that announces before its deadline test fails the second
    /// count.)
    @Test func aWaitPastItsDeadlineAnnouncesNoSleep() {
      let semaphore = Semaphore(value: 0)
      #expect(semaphore.wait(timeout: .now) == .timedOut)
      #expect(semaphore.sleepsAnnounced == 0)
      // A spin longer than the wait (the test override): it ends at the deadline, and the
      // wait gives up without a sleep.
      semaphore.testSpinNanoseconds.store(60_000_000_000, ordering: .relaxed)
      #expect(semaphore.wait(timeout: .milliseconds(1)) == .timedOut)
      #expect(semaphore.sleepsAnnounced == 0)
      // A wait with time left after its (normal) spin does announce its sleep.
      semaphore.testSpinNanoseconds.store(0, ordering: .relaxed)
      #expect(semaphore.wait(timeout: .milliseconds(2)) == .timedOut)
      #expect(semaphore.sleepsAnnounced >= 1)
      #expect(semaphore.wakeCalls == 0)
    }
  #endif

  #if DEBUG
    /// Step 5 of `Semaphore`, in a child process whose threads are pinned to one CPU each:
    /// a wait whose last waking signal came from another thread on its CPU does not spin (it
    /// yields, step 6, then sleeps); one whose last waking signal was its own (a semaphore used as
    /// a lock), or came from another CPU, spins first. (Checked: with the spin never skipped, the
    /// first wait does not skip; with the thread not compared, the second does; with the CPU not
    /// compared, the third does.) On a machine that lets the process use one CPU only, the last
    /// part has no other CPU to signal from and is left out; where the CPU cannot be read, the rule
    /// never applies and there is nothing to test.
    @Test func aWaiterSkipsItsSpinWhenAnotherThreadOnItsCPUSignalledLast() async {
      await #expect(processExitsWith: .success) {
        let home = cls_current_cpu()
        guard home >= 0 else { exit(0) }
        guard cls_pin_calling_thread(home) == 0 else { exit(2) }
        /// Wakes a thread pinned to `cpu` that waits on `semaphore`, from a second thread
        /// pinned there too, or from the calling thread when `signaller` is nil.
        func wakeWaiter(
          of semaphore: LoopDispatch.Semaphore, on cpu: Int32, signalFrom signaller: Int32?
        ) {
          let waiter = SyncTestThread.start {
            if cls_pin_calling_thread(cpu) != 0 { exit(3) }
            semaphore.wait()
          }
          if !waiter.waitUntilSleeping() { exit(4) }
          if let signaller {
            let other = SyncTestThread.start {
              if cls_pin_calling_thread(signaller) != 0 { exit(5) }
              semaphore.signal()
            }
            if !other.join() { exit(6) }
          } else {
            semaphore.signal()
          }
          if !waiter.join() { exit(7) }
        }
        let semaphore = Semaphore(value: 0)
        /// Skipped spins of one timed-out wait of this thread (the helpers' waits skip too).
        func skipsOfOwnWait() -> Int {
          let before = semaphore.spinsSkippedOnSharedCPU
          // 50 ms: a deadline passed before the wait starts would skip step 5 altogether.
          if semaphore.wait(timeout: .milliseconds(50)) != .timedOut { exit(8) }
          return semaphore.spinsSkippedOnSharedCPU - before
        }
        // Another thread on this CPU signalled last: no spin.
        wakeWaiter(of: semaphore, on: home, signalFrom: home)
        if skipsOfOwnWait() != 1 { exit(9) }
        // This thread signalled last: it spins.
        wakeWaiter(of: semaphore, on: home, signalFrom: nil)
        if skipsOfOwnWait() != 0 { exit(10) }
        // Another CPU the process may run on, if there is one (the search moves this thread;
        // it goes back home after).
        guard
          let away = (Int32(0)..<1024).first(where: {
            $0 != home && cls_pin_calling_thread($0) == 0
          })
        else { exit(0) }
        if cls_pin_calling_thread(home) != 0 { exit(12) }
        // A thread on another CPU signalled last: this thread spins.
        wakeWaiter(of: semaphore, on: away, signalFrom: away)
        exit(skipsOfOwnWait() == 0 ? 0 : 13)
      }
    }
  #endif

  #if DEBUG
    /// Step 6 of `Semaphore`, in a child process whose two threads ping-pong pinned to one
    /// CPU, with `others` busy threads pinned there too. Exits 0 once `done` holds for the two
    /// semaphores, or fails after 10 s of round trips (exit 9), or when a wait takes 10 s
    /// (exit 10: a lost token). Where the CPU cannot be read, step 5 never applies, so
    /// there is nothing to test: exits 0.
    static func pingPongOnOneCPU(
      others: Int, until done: @escaping (LoopDispatch.Semaphore, LoopDispatch.Semaphore) -> Bool
    ) -> Never {
      let home = cls_current_cpu()
      guard home >= 0 else { exit(0) }
      guard cls_pin_calling_thread(home) == 0 else { exit(2) }
      let ping = Semaphore(value: 0)
      let pong = Semaphore(value: 0)
      /// Set once the round trips are over: the busy threads and the partner return.
      final class Flag: Sendable { let raised = Atomic<Bool>(false) }
      let stop = Flag()
      let busy = (0..<others).map { _ in
        SyncTestThread.start {
          if cls_pin_calling_thread(home) != 0 { exit(3) }
          while !stop.raised.load(ordering: .relaxed) {}
        }
      }
      let partner = SyncTestThread.start {
        if cls_pin_calling_thread(home) != 0 { exit(4) }
        while true {
          if ping.wait(timeout: .seconds(10)) != .success { exit(10) }
          if stop.raised.load(ordering: .relaxed) { return }
          pong.signal()
        }
      }
      let end = Deadline.now + .seconds(10)
      var reached = false
      while !reached && Deadline.now < end {
        for _ in 0..<100 {
          ping.signal()
          if pong.wait(timeout: .seconds(10)) != .success { exit(10) }
        }
        reached = done(ping, pong)
      }
      stop.raised.store(true, ordering: .relaxed)
      ping.signal()
      if !partner.join() { exit(5) }
      for thread in busy where !thread.join() { exit(6) }
      exit(reached ? 0 : 9)
    }

    /// Two threads that ping-pong on one CPU hand it to each other: a wait takes its token
    /// after a yield. (Checked: without step 6, no wait does, and this fails after 10 s.)
    @Test func aPingPongOnOneCPUTakesItsTokensAfterYields() async {
      await #expect(processExitsWith: .success) {
        Self.pingPongOnOneCPU(others: 0) { ping, pong in
          ping.handOff.handOffs + pong.handOff.handOffs > 0
        }
      }
    }

    /// Beside a busy thread on the same CPU, a yield hands that thread a time slice: the
    /// hand-off sees the slow yield and pauses its yields. (Checked: with the slow yield not
    /// noticed, no pause begins, and this fails after 10 s.)
    @Test func aBusyThreadOnTheSameCPUPausesTheYields() async {
      await #expect(processExitsWith: .success) {
        Self.pingPongOnOneCPU(others: 1) { ping, pong in
          ping.handOff.pauses + pong.handOff.pauses > 0
        }
      }
    }
  #endif

  @Test func oneSignalWakesOneOfSeveralSleepers() {
    let semaphore = Semaphore(value: 0)
    let through = Semaphore(value: 0)
    let sleepers = (0..<3).map { _ in
      SyncTestThread.start {
        semaphore.wait()
        through.signal()
      }
    }
    for sleeper in sleepers { #expect(sleeper.waitUntilSleeping()) }
    #expect(semaphore.signal() == true)
    #expect(through.wait(timeout: .seconds(30)) == .success)
    // Exactly one gets through per signal; the others stay asleep until theirs.
    #expect(through.wait(timeout: .milliseconds(20)) == .timedOut)
    #expect(semaphore.signal() == true)
    #expect(semaphore.signal() == true)
    for sleeper in sleepers { #expect(sleeper.join()) }
    #expect(through.wait(timeout: .now) == .success)
    #expect(through.wait(timeout: .now) == .success)
    #expect(semaphore.wait(timeout: .now) == .timedOut)
  }

  @Test func negativeInitialValueTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      _ = Semaphore(value: -1)
    }
    expectMessage(result, "Semaphore created with a negative value")
  }

  @Test func releasingWhileUnitsAreTakenTraps() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      do {
        let semaphore = Semaphore(value: 2)
        semaphore.wait()
      }
    }
    expectMessage(result, "Semaphore released while in use")
  }
}

/// A plain POSIX thread for tests that need a thread outside the worker pool, for example
/// one that blocks in a wait. `start` returns once the thread runs and its kernel id is known.
final class SyncTestThread: @unchecked Sendable {
  // @unchecked Sendable: `kernelID` is written by the thread before `known` opens and only
  // read after; `handle` is written by `pthread_create` and only read by `join`.
  private let body: @Sendable () -> Void
  private let known = Latch()
  private let finished = Latch()
  private var kernelID: Int32 = 0
  private var handle = pthread_t()
  private var joined = false

  private init(_ body: @escaping @Sendable () -> Void) { self.body = body }

  /// Starts a thread running `body`.
  static func start(_ body: @escaping @Sendable () -> Void) -> SyncTestThread {
    let thread = SyncTestThread(body)
    // Unmanaged: the retained reference is taken back by the thread itself.
    let context = Unmanaged.passRetained(thread).toOpaque()
    let created = pthread_create(
      &thread.handle, nil,
      { raw in
        let thread = Unmanaged<SyncTestThread>.fromOpaque(raw!).takeRetainedValue()
        thread.kernelID = currentKernelThreadID()
        thread.known.open()
        thread.body()
        thread.finished.open()
        return nil
      }, context)
    if created != 0 { fatalError("pthread_create failed: \(created)") }
    if !thread.known.wait() { fatalError("test thread did not start") }
    return thread
  }

  /// Waits up to `seconds` for the body to return and joins the thread; returns whether it
  /// returned. A thread that is still running (a failed test) is left as it is.
  func join(seconds: Int = 60) -> Bool {
    if joined { return true }
    guard finished.wait(seconds: seconds) else { return false }
    pthread_join(handle, nil)
    joined = true
    return true
  }

  /// Waits (up to `seconds`) until the thread sleeps in the kernel. Call it when the only
  /// blocking call left in the body before the awaited point is the wait under test.
  func waitUntilSleeping(seconds: Int = 30) -> Bool {
    let limit = Deadline.now + .seconds(seconds)
    while Deadline.now < limit {
      if schedulerState() == "S" { return true }
      sched_yield()
    }
    return false
  }

  /// The thread's state letter from `/proc/self/task/<tid>/stat` ("R", "S", ...).
  private func schedulerState() -> Character? {
    let fd = open("/proc/self/task/\(kernelID)/stat", O_RDONLY)
    if fd < 0 { return nil }
    defer { close(fd) }
    var bytes = [UInt8](repeating: 0, count: 512)
    let count = read(fd, &bytes, bytes.count)
    guard count > 0 else { return nil }
    let text = String(decoding: bytes[..<count], as: UTF8.self)
    // "tid (name) S ...": the state follows the last closing parenthesis.
    guard let close = text.lastIndex(of: ")") else { return nil }
    return text[text.index(after: close)...].first { $0 != " " }
  }
}

/// The calling thread's kernel id, read from the `/proc/thread-self` link ("pid/task/tid").
private func currentKernelThreadID() -> Int32 {
  var buffer = [CChar](repeating: 0, count: 64)
  let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
  guard count > 0 else { return 0 }
  let text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  return Int32(text.split(separator: "/").last ?? "") ?? 0
}
