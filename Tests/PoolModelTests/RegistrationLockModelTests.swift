import Testing

/// The I/O driver's two locks (`IODriver+Registration.swift`) as a model: the tables' lock and
/// an entry's own lock, with every `epoll_ctl` for the entry made under the entry's lock after
/// checking the entry is not gone. Every interleaving of four threads is explored, with the
/// kernel's epoll registrations as part of the state:
///
/// - a worker re-arming entry A (`rearm`: entry lock; not gone? `MOD` with A's token);
/// - the poller holding a report for A's token (`dispatch` then `fire`: the tables' lock for
///   the lookup alone, then the entry lock; not gone? `MOD` re-enabling the other interests);
/// - the client, misusing the API: it closes A's descriptor while watched, opens another file
///   B on the same number and registers it (`register`: tables' lock; A is in the tables with
///   another identity, so evict it under its own lock; `ADD` with B's token);
/// - a canceller unregistering A's last source (`unregister`: both locks; not gone? remove it
///   and `DEL`).
///
/// The kernel keys a registration by (file, number), as epoll does: `MOD` and `DEL` reach the
/// registration of the file the number names now, or fail with `ENOENT`; closing A's last
/// descriptor drops A's registration. The property: B's registration never carries A's token
/// (its readiness would be skipped as stale, and B's source would never fire), B's
/// registration is never deleted, and no interleaving deadlocks (980 states; a changed model
/// changes the count, which the test pins so a step lost in an edit shows).
@Suite struct RegistrationLockModelTests {
  @Test func anEntryLockKeepsEveryEpollCtlOffAReusedNumber() {
    var states = 0
    #expect(misdirected(RegistrationModel(), states: &states) == nil)
    #expect(states == 980, "the model explored \(states) states, not the 980 it had")
  }

  /// The checker has teeth: a re-arm that checks the entry under its lock but makes its
  /// `epoll_ctl` after releasing it (to keep the system call out of every lock) re-targets
  /// B's registration with A's token.
  @Test func aReArmOutsideTheEntryLockMisdirectsTheReusedNumber() {
    let trace = misdirected(RegistrationModel(rearmCallsOutsideLock: true))
    #expect(trace?.last == "worker: MOD number with token A -> B's registration")
  }

  /// A poller that fires the entry it looked up without checking that it is still there
  /// (the lookup and the firing are under different locks now) does the same.
  @Test func aFiringThatDoesNotCheckTheEntryMisdirectsTheReusedNumber() {
    let trace = misdirected(RegistrationModel(pollerChecksGone: false))
    #expect(trace?.last == "poller: MOD number with token A -> B's registration")
  }

  /// An eviction that marks the entry without taking its lock lets a re-arm or a firing that
  /// already checked the entry make its `epoll_ctl` after B's registration exists.
  @Test func anEvictionWithoutTheEntryLockMisdirectsTheReusedNumber() {
    let trace = misdirected(RegistrationModel(evictionTakesEntryLock: false))
    #expect(trace?.last?.hasSuffix(": MOD number with token A -> B's registration") == true)
  }
}

/// The model's variants (the defaults are the code's).
private struct RegistrationModel {
  var rearmCallsOutsideLock = false
  var pollerChecksGone = true
  var evictionTakesEntryLock = true
}

/// One step of a thread's program.
private enum Op {
  case lockTables, unlockTables, lockEntry, unlockEntry
  /// Jumps to the index if entry A is gone (evicted or removed).
  case jumpIfGone(Int)
  /// Jumps to the index if the thread's `found` is false.
  case jumpIfNotFound(Int)
  /// Sets the thread's `found`: whether A is in the tables.
  case lookUpA
  /// `epoll_ctl` on the number, with A's token (MOD) or B's (ADD); A's (DEL).
  case modifyWithA, addB, deleteNumber
  case evictA, removeA, insertB
  case closeA, openB
  case jump(Int)
}

/// The threads: worker, poller, client, canceller.
private let threadNames = ["worker", "poller", "client", "canceller"]

private func programs(_ model: RegistrationModel) -> [[Op]] {
  let worker: [Op] =
    model.rearmCallsOutsideLock
    ? [.lockEntry, .jumpIfGone(5), .unlockEntry, .modifyWithA, .jump(6), .unlockEntry]
    : [.lockEntry, .jumpIfGone(3), .modifyWithA, .unlockEntry]
  let poller: [Op] =
    model.pollerChecksGone
    ? [
      .lockTables, .lookUpA, .unlockTables, .jumpIfNotFound(8), .lockEntry, .jumpIfGone(7),
      .modifyWithA, .unlockEntry,
    ]
    : [
      .lockTables, .lookUpA, .unlockTables, .jumpIfNotFound(7), .lockEntry, .modifyWithA,
      .unlockEntry,
    ]
  let eviction: [Op] =
    model.evictionTakesEntryLock ? [.lockEntry, .evictA, .unlockEntry] : [.evictA]
  // register(B): the tables' lock; A in the tables (another identity) is evicted; ADD.
  let client: [Op] =
    [.closeA, .openB, .lockTables, .lookUpA, .jumpIfNotFound(5 + eviction.count)]
    + eviction + [.removeA, .addB, .insertB, .unlockTables]
  let canceller: [Op] = [
    .lockTables, .lockEntry, .jumpIfGone(5), .removeA, .deleteNumber, .unlockEntry, .unlockTables,
  ]
  return [worker, poller, client, canceller]
}

/// Locks, tables, entry A's flag, the kernel, and each thread's place.
private struct RegistrationState: Hashable {
  var pcs = [0, 0, 0, 0]
  var found = [false, false, false, false]
  var tablesHolder = -1
  var entryHolder = -1
  var aGone = false
  var aInTables = true
  var bInTables = false
  /// Which file the number names: 1 A, 2 B, 0 none.
  var numberNames = 1
  /// The token on each file's registration (1 A's, 2 B's), 0 for none.
  var registrationOfA = 1
  var registrationOfB = 0
  var bWasAdded = false

  /// An `epoll_ctl` on the number: sets the token of the registration of the file the
  /// number names now (0 deletes it); says which one it reached, or `ENOENT`.
  mutating func reachRegistration(settingTokenTo token: Int) -> String {
    if numberNames == 1 && registrationOfA != 0 {
      registrationOfA = token
      return "A's registration"
    }
    if numberNames == 2 && registrationOfB != 0 {
      registrationOfB = token
      return "B's registration"
    }
    return "ENOENT"
  }
}

/// Explores every interleaving; returns the steps to the first misdirected or lost
/// registration, or to a deadlock, or nil.
private func misdirected(_ model: RegistrationModel, states: inout Int) -> [String]? {
  let code = programs(model)
  var seen: Set<RegistrationState> = []

  /// The state after thread `t` runs its next step and what happened, or nil if the step
  /// waits for a lock.
  func step(_ state: RegistrationState, _ t: Int) -> (String, RegistrationState)? {
    var next = state
    let name = threadNames[t]
    let op = code[t][state.pcs[t]]
    next.pcs[t] += 1
    switch op {
    case .lockTables:
      guard state.tablesHolder == -1 else { return nil }
      next.tablesHolder = t
      return ("\(name): lock tables", next)
    case .unlockTables:
      next.tablesHolder = -1
      return ("\(name): unlock tables", next)
    case .lockEntry:
      guard state.entryHolder == -1 else { return nil }
      next.entryHolder = t
      return ("\(name): lock entry A", next)
    case .unlockEntry:
      next.entryHolder = -1
      return ("\(name): unlock entry A", next)
    case .jumpIfGone(let target):
      if state.aGone { next.pcs[t] = target }
      return ("\(name): A gone = \(state.aGone)", next)
    case .jumpIfNotFound(let target):
      if !state.found[t] { next.pcs[t] = target }
      return ("\(name): found = \(state.found[t])", next)
    case .lookUpA:
      next.found[t] = state.aInTables
      return ("\(name): A in tables = \(state.aInTables)", next)
    case .modifyWithA:
      // epoll keys a registration by (file, number): the call reaches the registration of
      // the file the number names now, if it has one.
      let reached = next.reachRegistration(settingTokenTo: 1)
      return ("\(name): MOD number with token A -> \(reached)", next)
    case .addB:
      next.registrationOfB = 2
      next.bWasAdded = true
      return ("\(name): ADD number with token B", next)
    case .deleteNumber:
      let reached = next.reachRegistration(settingTokenTo: 0)
      return ("\(name): DEL number -> \(reached)", next)
    case .evictA:
      next.aGone = true
      return ("\(name): evict A", next)
    case .removeA:
      if name == "canceller" { next.aGone = true }  // unregister marks it removed
      next.aInTables = false
      return ("\(name): A out of the tables", next)
    case .insertB:
      next.bInTables = true
      return ("\(name): B into the tables", next)
    case .closeA:
      next.numberNames = 0
      next.registrationOfA = 0  // the last descriptor of A: epoll drops its registration
      return ("\(name): close A's number", next)
    case .openB:
      next.numberNames = 2
      return ("\(name): open B on the same number", next)
    case .jump(let target):
      next.pcs[t] = target
      return ("\(name): jump", next)
    }
  }

  func search(_ state: RegistrationState, _ path: [String]) -> [String]? {
    guard seen.insert(state).inserted else { return nil }
    if state.registrationOfB == 1 { return path }
    if state.bWasAdded && state.registrationOfB == 0 { return path + ["B's registration lost"] }
    var anyRunnable = false
    for t in code.indices where state.pcs[t] < code[t].count {
      guard let (label, next) = step(state, t) else { continue }
      anyRunnable = true
      if let found = search(next, path + [label]) { return found }
    }
    let done = code.indices.allSatisfy { state.pcs[$0] >= code[$0].count }
    if !anyRunnable && !done { return path + ["deadlock"] }
    return nil
  }
  let trace = search(RegistrationState(), [])
  states = seen.count
  return trace
}

private func misdirected(_ model: RegistrationModel) -> [String]? {
  var states = 0
  return misdirected(model, states: &states)
}
