/// A model of the pool's wake-up protocol (Sources/LoopDispatch/Pool/WorkerPool+Parking.swift),
/// explored over every interleaving (`PoolProtocolModelTests`). Pure: it runs no pool code,
/// so it finds in two seconds a race that the real pool shows once in thousands of runs. Its
/// test target is compiled with -O in every build (Package.swift): six million states.
///
/// Threads: three workers, one submitter off the pool (E), the supervisor. Two lanes (0 the
/// higher). Four jobs: E submits S (lane 1) and then J3 (lane 0); S, on a worker, submits J1
/// to its own lane (the worker's local queue) and J2 to lane 0 (the injection queue), then
/// blocks in the kernel until J1 has run; J2 blocks the same way. So one worker submits while
/// others spin or park, and two jobs block in the kernel.
///
/// Each step is one atomic operation of the code (or, where marked, a retry loop of one that
/// ends the same way whatever the retries saw):
/// | model step            | code                                                            |
/// |-----------------------|-----------------------------------------------------------------|
/// | `take(k)`             | `WorkerPool.takeJob`: one local `pop` or injection `take`, lanes from 0 |
/// | chained notify        | `takeFromInjection`'s `notifyWork` when jobs are left behind    |
/// | `steal(k)`            | `WorkerPool.steal`: one victim's `LocalQueue.steal` (half, at least one); its `notifyWork` |
/// | `spinEnter`           | `Worker.spinForWork`: `searching.wrappingAdd(1)`, the `maximumSearchers` gate |
/// | `scan(k)`             | `WorkerPool.hasQueuedWork`: one queue's count (injection lanes, then each worker's lanes) |
/// | `spinAgain`/`spinLeave` | the spin loop's next pass, or the end of its budget; the deferred `wrappingSubtract` |
/// | `announce`            | `Worker.park`: `parkWord = 1` then `announceIdle` (only the worker reads its word before the bit is set) |
/// | `withdraw`            | `withdrawIdle` after the re-check or after waking                |
/// | `sleep`               | `FutexWord.wait` while the word is 1 (enabled once a waker stored 0) |
/// | `notifyLoad`          | `notifyWork`: the load of `searching`                           |
/// | `claim`               | `wakeIdleWorker`: load and CAS of the lowest set bit (a failed CAS retries on the new value) |
/// | `unpark`              | `Worker.unpark`: `parkWord = 0` and the futex wake              |
/// | `noteSupervisor`      | `PoolSupervisor.noteWorkWaiting`: load and exchange of its word |
/// | `passOn`              | `WorkerPool.passOnWake` (the fix; absent in `.original`)        |
/// | `push`                | `LocalQueue.push` / `InjectionQueue.push` (the publishing store) |
/// | supervisor steps      | `PoolSupervisor.run`: the sleep's store and re-check, the sleep, a tick's rescue of a blocked worker's local queue (`rescueStrandedLocalQueues`) and its `wakeIdleWorker` |
///
/// Abstractions (each one gives the protocol more help than the code has, never less, except
/// where noted): the run-next slot, the periodic injection check and retirement are left out;
/// a tick rescues the local queue of a worker blocked in the kernel (the code: of a worker that
/// started no job for a whole tick); a tick's wake is tried whenever work is queued (the code:
/// also only when no job started during the tick). A worker whose turn found counted work and
/// took none skips its spin and waits up to 200 µs in its park's re-check (`Worker.park`):
/// the model's jobs are linked when counted, so that path is never taken here, and its wait is
/// bounded, so it cannot strand anything. Queues are FIFO lists of job numbers.
struct PoolModel {
  /// Which protocol: the code before issue 30's fix, the code with its passing on of
  /// wake-ups, or the fixed code with one rule broken on purpose (to show that the checks
  /// that guard that rule can fail).
  enum Version {
    case original, fixed
    /// A waker claims a bit and never stores 0 in the worker's word.
    case fixedWithoutUnpark
    /// Workers spin whatever `searching` says.
    case fixedWithoutSearcherLimit
    /// A worker that leaves a park (woken, or its re-check found work) owes nothing: only a
    /// spin that found work passes the wake on.
    case fixedOnlyAfterSpins
    /// The fixed code where E, off the pool, may defer the wake-up of its last push, J3's
    /// (`WorkerPool+DeferredWake.swift`): after it, E either runs `notifyWork` or only tells
    /// the supervisor, as the model chooses (the code's condition picks some of these paths).
    /// The last push's: with nothing submitted after it, its wake-up is nobody else's to
    /// pass on. (Choosing at both pushes grows the space past the explorer's bound.)
    case fixedDeferring
    /// `fixedDeferring` whose deferral forgets to tell the supervisor.
    case fixedDeferringSilently
  }

  static let workers = 3
  static let lanes = 2
  static let jobs = 4
  static let maximumSearchers = 1
  // Jobs.
  static let jobS: UInt8 = 0
  static let jobJ1: UInt8 = 1
  static let jobJ2: UInt8 = 2
  static let jobJ3: UInt8 = 3
  static let laneOfJob: [Int] = [1, 1, 0, 0]
  // Threads: workers 0..<3, then E, then the supervisor.
  static let submitterE = 3
  static let supervisor = 4
  static let threads = 5

  let protocolVersion: Version
}

/// One state of the model, packed into four words (hashable, copied without allocating: the
/// search keeps millions of them).
///
/// Fields, in order (none crosses a word): the queues (2 injection, then 3 workers × 2 lanes
/// local), 4 slots each of 3 bits (job + 1, 0 empty, oldest first); per thread `pc` (6 bits),
/// `ret` (6: where `notifyWork` returns), `arg` (2: the worker being woken), `job` (3: the
/// running job + 1, 0 none), `flags` (bit 0: the take notified, bit 1: may owe a wake); then
/// `searching` (2), the idle bits, the park words, the supervisor's word, and the jobs that
/// have run.
struct ModelState: Hashable {
  private var words = SIMD4<UInt64>()

  static let queueCount = 2 + PoolModel.workers * PoolModel.lanes
  static let slots = 4

  /// Where each field lives: (word, shift, width), in the order above.
  private struct Field {
    var word: Int
    var shift: UInt64
    var mask: UInt64
  }
  private static let layout: [Field] = {
    var widths: [Int] = Array(repeating: 3, count: queueCount * slots)
    for _ in 0..<PoolModel.threads { widths += [6, 6, 2, 3, 2] }
    widths += [2]
    widths += Array(repeating: 1, count: 2 * PoolModel.workers + 1 + PoolModel.jobs)
    var fields: [Field] = []
    var word = 0
    var used = 0
    for width in widths {
      if used + width > 64 {
        word += 1
        used = 0
      }
      precondition(word < 4, "the model's state does not fit in four words")
      fields.append(Field(word: word, shift: UInt64(used), mask: (1 << UInt64(width)) - 1))
      used += width
    }
    return fields
  }()
  private static let threadBase = queueCount * slots
  private static let searchingAt = threadBase + PoolModel.threads * 5
  private static let idleAt = searchingAt + 1
  private static let parkAt = idleAt + PoolModel.workers
  private static let supervisorWordAt = parkAt + PoolModel.workers
  private static let doneAt = supervisorWordAt + 1

  private func get(_ index: Int) -> UInt64 {
    let field = Self.layout[index]
    return (words[field.word] >> field.shift) & field.mask
  }
  private mutating func set(_ index: Int, _ value: UInt64) {
    let field = Self.layout[index]
    precondition(value <= field.mask, "model field \(index) overflows")
    words[field.word] = words[field.word] & ~(field.mask << field.shift) | value << field.shift
  }

  static func injection(_ lane: Int) -> Int { lane }
  static func local(_ worker: Int, _ lane: Int) -> Int { 2 + worker * PoolModel.lanes + lane }

  // Queues.
  /// Slot `slot` of `queue`: the job there, or nil.
  func job(in queue: Int, slot: Int) -> UInt8? {
    let value = get(queue * Self.slots + slot)
    return value == 0 ? nil : UInt8(value - 1)
  }
  func isEmpty(_ queue: Int) -> Bool { get(queue * Self.slots) == 0 }
  func count(_ queue: Int) -> Int {
    var count = 0
    for slot in 0..<Self.slots where get(queue * Self.slots + slot) != 0 { count += 1 }
    return count
  }
  mutating func push(_ job: UInt8, _ queue: Int) {
    for slot in 0..<Self.slots where get(queue * Self.slots + slot) == 0 {
      set(queue * Self.slots + slot, UInt64(job) + 1)
      return
    }
    preconditionFailure("model queue \(queue) full")
  }
  mutating func pop(_ queue: Int) -> UInt8 {
    let base = queue * Self.slots
    let job = UInt8(get(base) - 1)
    for slot in 0..<(Self.slots - 1) { set(base + slot, get(base + slot + 1)) }
    set(base + Self.slots - 1, 0)
    return job
  }
  var anyQueued: Bool {
    for queue in 0..<Self.queueCount where !isEmpty(queue) { return true }
    return false
  }

  // Threads.
  private static func threadField(_ thread: Int, _ offset: Int) -> Int {
    threadBase + thread * 5 + offset
  }
  func pc(_ thread: Int) -> UInt8 { UInt8(get(Self.threadField(thread, 0))) }
  mutating func setPC(_ thread: Int, _ value: UInt8) {
    set(Self.threadField(thread, 0), UInt64(value))
  }
  func ret(_ thread: Int) -> UInt8 { UInt8(get(Self.threadField(thread, 1))) }
  mutating func setRet(_ thread: Int, _ value: UInt8) {
    set(Self.threadField(thread, 1), UInt64(value))
  }
  func arg(_ thread: Int) -> Int { Int(get(Self.threadField(thread, 2))) }
  mutating func setArg(_ thread: Int, _ value: Int) {
    set(Self.threadField(thread, 2), UInt64(value))
  }
  /// The job `thread` runs, or 255.
  func job(_ thread: Int) -> UInt8 {
    let value = get(Self.threadField(thread, 3))
    return value == 0 ? 255 : UInt8(value - 1)
  }
  mutating func setJob(_ thread: Int, _ value: UInt8) {
    set(Self.threadField(thread, 3), value == 255 ? 0 : UInt64(value) + 1)
  }
  func flag(_ thread: Int, _ bit: UInt8) -> Bool {
    get(Self.threadField(thread, 4)) & UInt64(bit) != 0
  }
  mutating func setFlag(_ thread: Int, _ bit: UInt8, _ on: Bool) {
    let flags = get(Self.threadField(thread, 4))
    set(Self.threadField(thread, 4), on ? flags | UInt64(bit) : flags & ~UInt64(bit))
  }
  static let notifiedInTake: UInt8 = 1
  static let mayOweWake: UInt8 = 2

  // Shared words.
  var searching: Int {
    get { Int(get(Self.searchingAt)) }
    set { set(Self.searchingAt, UInt64(newValue)) }
  }
  func idle(_ worker: Int) -> Bool { get(Self.idleAt + worker) != 0 }
  mutating func setIdle(_ worker: Int, _ on: Bool) { set(Self.idleAt + worker, on ? 1 : 0) }
  func parkWord(_ worker: Int) -> UInt8 { UInt8(get(Self.parkAt + worker)) }
  mutating func setParkWord(_ worker: Int, _ value: UInt8) {
    set(Self.parkAt + worker, UInt64(value))
  }
  var supervisorWord: UInt8 {
    get { UInt8(get(Self.supervisorWordAt)) }
    set { set(Self.supervisorWordAt, UInt64(newValue)) }
  }
  func done(_ job: UInt8) -> Bool { get(Self.doneAt + Int(job)) != 0 }
  mutating func setDone(_ job: UInt8) { set(Self.doneAt + Int(job), 1) }
  var allDone: Bool {
    for job in 0..<PoolModel.jobs where get(Self.doneAt + job) == 0 { return false }
    return true
  }
}

/// Program counters: where each thread of the model stands.
enum ModelPC: UInt8 {
  // Workers (`Worker.main`).
  case take, steal, spinEnter, spinScan, spinLeaveFound, spinGiveUp, spinBail
  case announce, parkScan, withdrawEarly, sleep, withdrawLate
  case got, run, sPushJ2, blocked
  // `notifyWork` (any thread).
  case notifyLoad, claim, unpark, noteSupervisor
  // The submitter off the pool.
  case ePushS, ePushJ3, eDone
  // The supervisor.
  case supTop, supStore, supRecheck, supSleep, supRescue, supWake
}

extension PoolModel {
  var initialState: ModelState {
    var state = ModelState()
    for thread in 0..<Self.threads { state.setJob(thread, 255) }
    // A quiet pool: every worker parked, the supervisor asleep; E about to submit.
    for worker in 0..<Self.workers {
      state.setPC(worker, ModelPC.sleep.rawValue)
      state.setIdle(worker, true)
      state.setParkWord(worker, 1)
    }
    state.setPC(Self.submitterE, ModelPC.ePushS.rawValue)
    state.setPC(Self.supervisor, ModelPC.supSleep.rawValue)
    state.supervisorWord = 1
    return state
  }

  /// Whether `worker` is spinning: past the `maximumSearchers` gate, before its decrement.
  func isSpinning(_ state: ModelState, _ worker: Int) -> Bool {
    switch ModelPC(rawValue: state.pc(worker))! {
    case .spinScan, .spinLeaveFound, .spinGiveUp: return true
    default: return false
    }
  }

  /// Every step `thread` can take from `state` (none: it waits; two: the spin's choice).
  func steps(of thread: Int, from state: ModelState) -> [ModelState] {
    var next = state
    let pc = ModelPC(rawValue: state.pc(thread))!
    func goto(_ target: ModelPC) { next.setPC(thread, target.rawValue) }
    /// Back from `notifyWork` (its scratch fields cleared, so equal states compare equal).
    func returnFromNotify() {
      next.setPC(thread, state.ret(thread))
      next.setRet(thread, 0)
      next.setArg(thread, 0)
    }
    /// `notifyWork`, then `target`.
    func notify(then target: ModelPC) {
      next.setRet(thread, target.rawValue)
      next.setPC(thread, ModelPC.notifyLoad.rawValue)
    }
    /// The job ends: marked run, and the worker looks for the next.
    func finish() {
      next.setDone(state.job(thread))
      next.setJob(thread, 255)
      goto(.take)
    }
    /// A take or steal got its job; with work left behind it runs `notifyWork` first.
    func took(leavingWork: Bool) {
      if leavingWork {
        next.setFlag(thread, ModelState.notifiedInTake, true)
        notify(then: .got)
      } else {
        goto(.got)
      }
    }
    switch pc {
    case .take:
      // `takeJob`: for each lane from 0, the local queue, then the injection queue.
      for lane in 0..<Self.lanes {
        let local = ModelState.local(thread, lane)
        let shared = ModelState.injection(lane)
        if !state.isEmpty(local) {
          next.setJob(thread, next.pop(local))
          goto(.got)
          return [next]
        }
        if !state.isEmpty(shared) {
          next.setJob(thread, next.pop(shared))
          // `takeFromInjection`'s chained wake when jobs are left behind.
          took(leavingWork: !next.isEmpty(shared))
          return [next]
        }
      }
      goto(.steal)
    case .steal:
      // `steal`: highest lane first, victims after the thief in table order; half (at least
      // one), and a wake when more is left on either side.
      for lane in 0..<Self.lanes {
        for offset in 1..<Self.workers {
          let from = ModelState.local((thread + offset) % Self.workers, lane)
          guard !state.isEmpty(from) else { continue }
          let into = ModelState.local(thread, lane)
          let taking = (state.count(from) + 1) / 2
          next.setJob(thread, next.pop(from))
          for _ in 1..<taking { next.push(next.pop(from), into) }
          took(leavingWork: !next.isEmpty(into) || !next.isEmpty(from))
          return [next]
        }
      }
      goto(.spinEnter)
    case .spinEnter:
      next.searching += 1
      let gated = protocolVersion != .fixedWithoutSearcherLimit
      goto(gated && next.searching > Self.maximumSearchers ? .spinBail : .spinScan)
    case .spinScan:
      if state.anyQueued {
        goto(.spinLeaveFound)
      } else {
        // The budget: another pass (this state again), or the end of the spin.
        goto(.spinGiveUp)
        return [state, next]
      }
    case .spinLeaveFound:
      next.searching -= 1
      next.setFlag(thread, ModelState.mayOweWake, true)
      goto(.take)
    case .spinGiveUp, .spinBail:
      next.searching -= 1
      goto(.announce)
    case .announce:
      next.setParkWord(thread, 1)
      next.setIdle(thread, true)
      goto(.parkScan)
    case .parkScan:
      goto(state.anyQueued ? .withdrawEarly : .sleep)
    case .withdrawEarly, .withdrawLate:
      next.setIdle(thread, false)
      // Not read again before the next `announce` stores 1 (a waker's late store of 0 is
      // still possible and still modelled): 0 here only makes equal states compare equal.
      next.setParkWord(thread, 0)
      next.setFlag(thread, ModelState.mayOweWake, protocolVersion != .fixedOnlyAfterSpins)
      goto(.take)
    case .sleep:
      guard state.parkWord(thread) == 0 else { return [] }
      goto(.withdrawLate)
    case .got:
      // `passOnWake` (fixed protocol): the scan, and `notifyWork` if it found work, unless
      // the take made its own `notifyWork`.
      let owes = state.flag(thread, ModelState.mayOweWake)
      let notified = state.flag(thread, ModelState.notifiedInTake)
      next.setFlag(thread, ModelState.mayOweWake, false)
      next.setFlag(thread, ModelState.notifiedInTake, false)
      if protocolVersion != .original && owes && !notified && state.anyQueued {
        notify(then: .run)
      } else {
        goto(.run)
      }
    case .run:
      // The job's first step: S pushes J1 onto its own lane (the local queue), J2 blocks,
      // J1 and J3 end.
      switch state.job(thread) {
      case Self.jobS:
        next.push(Self.jobJ1, ModelState.local(thread, 1))
        notify(then: .sPushJ2)
      case Self.jobJ2:
        goto(.blocked)
      default:
        finish()
      }
    case .sPushJ2:
      // Lane 0 is higher than S's: the injection queue.
      next.push(Self.jobJ2, ModelState.injection(0))
      notify(then: .blocked)
    case .blocked:
      // In the kernel until J1 has run.
      guard state.done(Self.jobJ1) else { return [] }
      finish()
    case .notifyLoad:
      if state.searching > 0 {
        returnFromNotify()
      } else {
        goto(.claim)
      }
    case .claim:
      if let worker = (0..<Self.workers).first(where: { state.idle($0) }) {
        next.setIdle(worker, false)
        next.setArg(thread, worker)
        goto(.unpark)
      } else {
        goto(.noteSupervisor)
      }
    case .unpark:
      if protocolVersion != .fixedWithoutUnpark { next.setParkWord(state.arg(thread), 0) }
      returnFromNotify()
    case .noteSupervisor:
      if state.supervisorWord == 1 { next.supervisorWord = 0 }
      returnFromNotify()
    case .ePushS, .ePushJ3:
      let isS = pc == .ePushS
      next.push(isS ? Self.jobS : Self.jobJ3, ModelState.injection(isS ? 1 : 0))
      let after: ModelPC = isS ? .ePushJ3 : .eDone
      guard !isS, protocolVersion == .fixedDeferring || protocolVersion == .fixedDeferringSilently
      else {
        notify(then: after)
        break
      }
      // Deferred: no `notifyWork`; `noteWorkWaiting` (or, broken on purpose, nothing). The
      // debt E keeps is paid only if it blocks in LoopDispatch, which E never does here: the
      // supervisor alone must cover it.
      var deferred = next
      if protocolVersion == .fixedDeferring {
        deferred.setRet(thread, after.rawValue)
        deferred.setPC(thread, ModelPC.noteSupervisor.rawValue)
      } else {
        deferred.setPC(thread, after.rawValue)
      }
      notify(then: after)
      return [next, deferred]
    case .eDone:
      return []
    case .supTop:
      // `hasWaitingWork`: awake while work waits, else the sleep's Dekker pair.
      goto(state.anyQueued ? .supRescue : .supStore)
    case .supStore:
      next.supervisorWord = 1
      goto(.supRecheck)
    case .supRecheck:
      if state.anyQueued {
        next.supervisorWord = 0
        goto(.supRescue)
      } else {
        goto(.supSleep)
      }
    case .supSleep:
      guard state.supervisorWord == 0 else { return [] }
      goto(.supTop)
    case .supRescue:
      // A tick: the local queues of workers blocked in the kernel go to the injection
      // queues, with a `notifyWork` if any moved.
      var moved = 0
      for worker in 0..<Self.workers where state.pc(worker) == ModelPC.blocked.rawValue {
        for lane in 0..<Self.lanes {
          while !next.isEmpty(ModelState.local(worker, lane)) {
            next.push(next.pop(ModelState.local(worker, lane)), ModelState.injection(lane))
            moved += 1
          }
        }
      }
      if moved > 0 { notify(then: .supWake) } else { goto(.supWake) }
    case .supWake:
      // The tick's `wakeIdleWorker` when jobs are queued.
      if state.anyQueued, let worker = (0..<Self.workers).first(where: { state.idle($0) }) {
        next.setIdle(worker, false)
        next.setArg(thread, worker)
        next.setRet(thread, ModelPC.supTop.rawValue)
        goto(.unpark)
      } else {
        goto(.supTop)
      }
    }
    return [next]
  }
}
