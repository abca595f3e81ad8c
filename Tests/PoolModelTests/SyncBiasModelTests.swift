import Testing

/// A serial queue's `sync` lock biased to one thread (`Queue+SyncBias.swift`) as a model under
/// x86's memory model (TSO: each thread's plain stores wait in its store buffer and reach
/// memory later, in order; a locked instruction, every operation on `state` and a push onto the
/// list, drains the thread's buffer first and then acts on memory at once; loads read the
/// thread's own buffer, else memory), with Linux's `membarrier(PRIVATE_EXPEDITED)` as one step
/// that drains every thread's buffer (each CPU running one of the process's threads executes a
/// full barrier). Every interleaving of the threads and of the buffers' draining is explored.
///
/// Words: `state` (LOCKED, BIASED, REVOKING, SCHEDULED; BIASED and REVOKING only beside
/// LOCKED), `busy` (the owner's, plain stores), `verdict` (the revoker's, a plain store:
/// handedToOwner or releasedByRevoker), and the list as a count of items pushed and not taken.
///
/// - Owner, two or three `sync`s. Biased: store busy = 1, load state; BIASED without REVOKING: run the
///   body, store busy = 0, load state; BIASED without REVOKING again: done, still biased; else
///   resolve. At the entry, anything else: store busy = 0, resolve, then the plain path.
///   Resolve: wait while REVOKING; with BIASED still set, CAS it out and release the LOCKED
///   that is now a plain lock; else read the verdict and release if handed. Either way the
///   owner has left the bias, for good (its own knowledge), and never reads the verdict again.
///   Plain path: wait for neither LOCKED nor SCHEDULED, CAS LOCKED in, body, subtract LOCKED,
///   load the list, `wakeUp` if not empty.
/// - Submitters push one item each, then `wakeUp`: while the state has neither LOCKED nor
///   SCHEDULED, CAS SCHEDULED in (a drain starts); else, with BIASED, revoke. Revoke: BIASED
///   gone, `wakeUp` again; REVOKING set, return (that revoker's release, or the owner's, sees
///   the item); else CAS REVOKING in, membarrier, load busy: 0, store the verdict "released",
///   subtract BIASED, REVOKING and LOCKED, load the list and `wakeUp` if not empty; 1, store
///   "handed", subtract BIASED and REVOKING (LOCKED stays, the owner's).
/// - A drain takes items until the list is empty, subtracts SCHEDULED, loads the list, and
///   `wakeUp`s if not empty (going on draining if that schedules it again). Drain threads
///   appear when a `wakeUp` schedules one.
///
/// Checked in every state: an item never runs during the owner's body, nor the body during
/// an item; LOCKED and SCHEDULED are never subtracted when not set, SCHEDULED never set twice;
/// BIASED and REVOKING only beside LOCKED, never LOCKED beside SCHEDULED. In every state where
/// nothing can move (so every buffer has drained): every thread finished (a spin that would
/// only load the same value again is no move: a thread left spinning is "stuck"), every item
/// ran and the state is 0 (else "stranded").
///
/// Scope: one bias, never granted again after it ends (as in the code); suspension, inactivity
/// and width, which the owner's entry check also looks at, are left out; the plain `sync`
/// spins for the lock instead of queueing a waiter, and takes it even with items queued.
@Suite struct SyncBiasModelTests {
  /// The protocol as built, in four runs of three `sync`s by the owner and one push by each of
  /// two submitters: the bias granted before the first `sync`; granted by the release of a
  /// plain `sync` the owner is in at the start (the grant then checks the list, as a release
  /// does: a submitter that saw the plain lock before the grant left its item to that
  /// release); and the owner pushing an item of its own from inside its first or its last
  /// `sync`'s body, if biased (its `wakeUp` finds BIASED and it revokes its own bias: `busy`
  /// is 1 in its own buffer or, after the membarrier, in memory, so it hands the lock to
  /// itself and releases it at its exit). Distinct states: 28,921, 45,684, 44,145 and 30,356
  /// (a search cut short, or moves the model stopped offering, would see far fewer). Three
  /// submitters (two `sync`s) pass too, at 256,763, 503,597 and 313,549 states: seconds, too
  /// slow to run every time.
  @Test func theBiasedOwnerAndItsRevokersNeverOverlapAndNothingIsStranded() {
    let runs = [
      (BiasModel(syncs: 3), 28_000),
      (BiasModel(start: .grantedAtRelease, syncs: 3), 45_000),
      (BiasModel(ownerPushesInSync: 1, syncs: 3), 44_000),
      (BiasModel(ownerPushesInSync: 3, syncs: 3), 30_000),
    ]
    for (model, atLeast) in runs {
      let result = model.explore()
      #expect(result.violations.isEmpty, "\(model): \(result.violations)")
      #expect(result.states > atLeast, "\(model): \(result.states) states")
      print("sync bias model, \(model): \(result.states) states")
    }
  }

  /// The checker has teeth (these run two `sync`s): without the membarrier, the revoker's load
  /// of `busy` and the owner's load of `state` may each pass its thread's buffered store
  /// (Dekker's pattern without a fence), and all three failures follow. At the entry: the
  /// owner's busy = 1 waits in its buffer, the owner loads the state before REVOKING and runs
  /// its body, the revoker sets REVOKING and loads 0 from memory, releases, and the drain it
  /// schedules runs an item during the body (the trace below), or before the body starts and
  /// then beside it. At the exit, the mirror image: the owner's busy = 0 waits in its buffer,
  /// the owner loads BIASED without REVOKING and returns still biased, the revoker loads the
  /// stale 1 and hands the lock to an owner who has gone (its last `sync`): stranded.
  @Test func withoutTheMembarrierAnItemRunsDuringTheOwnersBodyOrTheLockIsStranded() {
    let result = BiasModel(variant: .noMembarrier).explore()
    #expect(result.kinds == BiasExploration.allThreeFailures, "\(result.violations)")
    let overlap = result.violations["item ran during the owner's body"]
    print("sync bias model without the membarrier: \(String(describing: overlap))")
    #expect(
      overlap?.trace == [
        "owner: store busy = 1 (buffered)",
        "owner: load state = LOCKED|BIASED (enters biased)",
        "owner: body starts",
        "submitter 1: push (list 0 -> 1)",
        "submitter 1: wakeUp loads state = LOCKED|BIASED",
        "submitter 1: revoke loads state = LOCKED|BIASED",
        "submitter 1: CAS state LOCKED|BIASED -> +REVOKING (revokes)",
        "submitter 1: load busy = 0",
        "submitter 1: store verdict = releasedByRevoker (buffered)",
        "submitter 1: buffer drains verdict = 2",
        "submitter 1: subtract LOCKED|BIASED|REVOKING from LOCKED|BIASED|REVOKING",
        "submitter 1: load list = 1",
        "submitter 1: wakeUp loads state = 0",
        "submitter 1: CAS state 0 -> +SCHEDULED (schedules)",
        "drainer: takes an item, runs it",
      ])
  }

  /// A membarrier before the load of `busy` is no better than none: the owner's store may
  /// still wait in its buffer at the load, and may drain (or be made) just after it, so the
  /// same three failures follow. The membarrier must come between the CAS that sets
  /// REVOKING and the load.
  @Test func aRevokerThatReadsBusyBeforeTheMembarrierFailsTheSameWays() {
    let result = BiasModel(variant: .busyReadBeforeMembarrier).explore()
    #expect(result.kinds == BiasExploration.allThreeFailures, "\(result.violations)")
  }

  /// An owner whose exit returns still biased on BIASED alone, not checking REVOKING: a
  /// revoker that set REVOKING and, after the membarrier, read busy = 1 (the owner in its
  /// body) hands it the lock after the owner has looked and returned. The owner's next `sync`
  /// would see BIASED gone and release it, but after its last one the queue stays locked and
  /// the items never run.
  @Test func anOwnerThatIgnoresARevocationAtExitStrandsTheHandedLock() {
    let result = BiasModel(variant: .exitIgnoresRevoking).explore()
    #expect(result.kinds == ["stranded"], "\(result.violations)")
  }

  /// Likewise an owner whose exit stores busy = 0 and returns without looking at the state: a
  /// lock handed to it during its last body is never released. Alone, with one `sync` whose
  /// body pushes an item (`sync { queue.async {} }`): its `wakeUp` revokes the bias and hands
  /// the lock to the owner, whose exit then returns, and its own item is stranded.
  @Test func anOwnerThatNeverResolvesAtExitStrandsTheHandedLock() {
    let result = BiasModel(variant: .exitNeverResolves).explore()
    #expect(result.kinds == ["stranded"], "\(result.violations)")
    let alone = BiasModel(
      variant: .exitNeverResolves, submitters: 0, ownerPushesInSync: 1, syncs: 1
    ).explore()
    let stranded = alone.violations["stranded"]
    print("sync bias model, an exit that never resolves: \(String(describing: stranded))")
    #expect(stranded?.reason == "stranded: state LOCKED, 0 of 1 items ran, every thread finished")
  }

  /// An owner that releases the lock after a revocation without reading the verdict releases
  /// one the revoker released already (the double-release check has teeth).
  @Test func anOwnerThatReleasesWithoutReadingTheVerdictReleasesTwice() {
    let result = BiasModel(variant: .resolveIgnoresVerdict).explore()
    #expect(
      result.kinds == ["LOCKED subtracted when not set (a double release)"],
      "\(result.violations)")
  }

  /// A grant that does not check the list after adding BIASED: a submitter that loaded the
  /// state before the grant (a plain lock, so its item is left to the holder's release) is
  /// never seen by that release, and nobody revokes a bias that nobody else finds.
  @Test func aGrantThatDoesNotCheckTheListStrandsTheItemsPushedBeforeIt() {
    let result = BiasModel(variant: .grantSkipsListCheck, start: .grantedAtRelease).explore()
    #expect(result.kinds == ["stranded"], "\(result.violations)")
  }

  /// A revoker that finds busy = 1 and leaves BIASED and REVOKING set for the owner to clear
  /// leaves the owner's resolve waiting for REVOKING to clear, forever (a spin that could only
  /// load the same value again is no move: the state is reported as stuck, and the search
  /// ends).
  @Test func aRevokerThatLeavesTheRevocationToTheOwnerLeavesItSpinning() {
    let result = BiasModel(variant: .handedLeavesRevoking).explore()
    #expect(result.kinds == ["stuck"], "\(result.violations)")
  }

  /// A `wakeUp` that ORs SCHEDULED in after a load that found the queue free, instead of a CAS
  /// from the value it loaded, schedules a second drain beside the first (the check of
  /// SCHEDULED set twice has teeth).
  @Test func aWakeUpThatSetsScheduledWithoutACASSetsItTwice() {
    let result = BiasModel(variant: .wakeUpWithoutCAS).explore()
    #expect(result.kinds.contains("SCHEDULED set twice"), "\(result.violations)")
  }
}

/// The protocol as built, or with one step changed (the checker's teeth).
private enum BiasVariant {
  case asBuilt
  /// The revoker loads `busy` right after setting REVOKING, with no membarrier.
  case noMembarrier
  /// The revoker loads `busy` before the membarrier instead of after it.
  case busyReadBeforeMembarrier
  /// The owner's exit stays biased whenever BIASED is set, REVOKING or not.
  case exitIgnoresRevoking
  /// The owner's exit never resolves.
  case exitNeverResolves
  /// The owner's resolve releases LOCKED whatever the verdict.
  case resolveIgnoresVerdict
  /// `wakeUp` ORs SCHEDULED in after a load that found the queue free, no CAS.
  case wakeUpWithoutCAS
  /// A revoker that read busy = 1 leaves BIASED and REVOKING set for the owner to clear.
  case handedLeavesRevoking
  /// The release that grants the bias does not check the list.
  case grantSkipsListCheck
}

/// Where the run begins.
private enum BiasStart {
  /// The bias was granted before: the state is LOCKED | BIASED, the owner outside any sync.
  case granted
  /// The owner is in a plain sync's body (the state is LOCKED), and its release grants the
  /// bias: add BIASED (a locked instruction), load the list, resolve if not empty.
  case grantedAtRelease
}

private struct BiasModel {
  var variant = BiasVariant.asBuilt
  var start = BiasStart.granted
  var submitters = 2
  /// The owner pushes one item from inside the body of its `sync` number `ownerPushesInSync`
  /// (from 1), if that `sync` runs biased (0: it pushes nothing).
  var ownerPushesInSync = 0
  /// The owner's `sync`s (after the one it is in at the start, for `grantedAtRelease`).
  var syncs = 2
}

extension BiasModel: CustomStringConvertible {
  var description: String {
    let pushes = ownerPushesInSync > 0 ? ", the owner pushing in sync \(ownerPushesInSync)" : ""
    return "\(variant), \(start), \(syncs) syncs, \(submitters) submitters\(pushes)"
  }
}

/// The model's state bits (not the queue's values).
private enum BiasBits {
  static let locked = 1
  static let biased = 2
  static let revoking = 4
  static let scheduled = 8
  static let blocking = locked | scheduled

  static func describe(_ bits: Int) -> String {
    let names = [
      (locked, "LOCKED"), (biased, "BIASED"), (revoking, "REVOKING"), (scheduled, "SCHEDULED"),
    ]
    let set = names.filter { bits & $0.0 != 0 }.map(\.1)
    return set.isEmpty ? "0" : set.joined(separator: "|")
  }
}

/// `verdict`'s values.
private enum BiasVerdict {
  static let none = 0
  static let handedToOwner = 1
  static let releasedByRevoker = 2
}

/// The two words written with plain stores (through the store buffer).
private enum BiasAddress: Hashable {
  case busy
  case verdict
}

private struct BiasStore: Hashable {
  var address: BiasAddress
  var value: Int
}

private enum BiasRole: Hashable {
  case owner
  case submitter
  case drainer
}

/// A thread's next step.
private enum BiasStep: Hashable {
  // The owner's sync.
  case enterStoreBusy, enterLoadState, enterStepAside
  case bodyStart, bodyEnd
  case exitStoreBusy, exitLoadState
  case plainLoad, plainCAS
  case resolveLoad, resolveCAS, resolveLoadVerdict
  case releaseSubtract, releaseLoadList
  case grantAdd, grantLoadList
  // A push (a submitter's, or the owner's from its body).
  case push
  // `wakeUp` and `revoke`, on any thread.
  case wakeLoad, wakeCAS
  case revokeLoad, revokeCAS, membarrier, revokeLoadBusy, revokeStoreVerdict, revokeSubtract
  case revokeLoadList
  // A drain.
  case drainCheck, itemEnd, drainRelease, drainLoadList
  case finished

  /// Steps that use the state value the thread loaded (a CAS's expected value).
  var usesSeen: Bool {
    switch self {
    case .plainCAS, .resolveCAS, .wakeCAS, .revokeCAS: return true
    default: return false
    }
  }

  /// Steps that use the verdict the revoker chose.
  var usesChosenVerdict: Bool {
    switch self {
    case .membarrier, .revokeStoreVerdict, .revokeSubtract: return true
    default: return false
    }
  }

  /// Locked instructions: they wait for the thread's buffer to drain.
  var isLocked: Bool {
    switch self {
    case .plainCAS, .resolveCAS, .releaseSubtract, .grantAdd, .push, .wakeCAS, .revokeCAS,
      .revokeSubtract, .drainRelease:
      return true
    default: return false
    }
  }

  /// A drain holds SCHEDULED at these steps.
  var holdsScheduled: Bool { self == .drainCheck || self == .itemEnd || self == .drainRelease }
}

/// Where the owner goes once a resolve (and the release it may end with), or a `wakeUp` from
/// its body, is done.
private enum BiasOwnerThen: Hashable {
  case nextSync
  case thisSyncPlainly
  case endBody
}

private struct BiasThread: Hashable {
  var role: BiasRole
  var step: BiasStep
  var buffer: [BiasStore] = []
  /// The state value last loaded, which a CAS expects.
  var seen = 0
  /// The verdict a revoker chose from `busy`.
  var chosenVerdict = BiasVerdict.none
  // The owner's own: its bias token, the syncs still to do, whether the current sync entered
  // biased, whether its release grants the bias, pushes still to do from a biased body, and
  // where it goes after a resolve or a `wakeUp`.
  var biased = false
  var syncsLeft = 0
  var inBiasedSync = false
  var grantsAtRelease = false
  var pushesLeft = 0
  var then = BiasOwnerThen.nextSync
}

/// Memory, the ghosts the checks read, and the threads (owner, submitters, then drains).
private struct BiasState: Hashable {
  var state = 0
  var busy = 0
  var verdict = BiasVerdict.none
  /// Items pushed and not yet taken.
  var list = 0
  var pushed = 0
  var ran = 0
  var ownerInBody = false
  var itemRunning = false
  var threads: [BiasThread] = []

  /// A load: the thread's own newest buffered store to the address, else memory.
  func load(_ address: BiasAddress, by index: Int) -> Int {
    if let store = threads[index].buffer.last(where: { $0.address == address }) {
      return store.value
    }
    return address == .busy ? busy : verdict
  }

  mutating func drainOldest(of index: Int) {
    let store = threads[index].buffer.removeFirst()
    switch store.address {
    case .busy: busy = store.value
    case .verdict: verdict = store.value
    }
  }

  /// An atomic subtract of `bits`; a violation if any of them is not set.
  mutating func subtract(_ bits: Int) -> String? {
    if bits & BiasBits.locked != 0 && state & BiasBits.locked == 0 {
      return "LOCKED subtracted when not set (a double release)"
    }
    if bits & ~state != 0 { return "\(BiasBits.describe(bits & ~state)) subtracted when not set" }
    state &= ~bits
    return nil
  }

  /// SCHEDULED set by a `wakeUp`: a drain starts (the calling drain goes on, any other thread
  /// schedules a new one).
  mutating func schedule(by index: Int) -> String? {
    if state & BiasBits.scheduled != 0 || threads.contains(where: \.step.holdsScheduled) {
      return "SCHEDULED set twice"
    }
    state |= BiasBits.scheduled
    if threads[index].role == .drainer {
      threads[index].step = .drainCheck
    } else {
      threads.append(BiasThread(role: .drainer, step: .drainCheck))
      wakeUpReturns(index)
    }
    return nil
  }

  mutating func beginSync(_ index: Int) {
    threads[index].then = .nextSync
    if threads[index].syncsLeft == 0 {
      threads[index].step = .finished
      return
    }
    threads[index].syncsLeft -= 1
    threads[index].step = threads[index].biased ? .enterStoreBusy : .plainLoad
  }

  /// The owner after a resolve (and the release it may end with), or a `wakeUp`.
  mutating func ownerContinues(_ index: Int) {
    switch threads[index].then {
    case .nextSync: beginSync(index)
    case .thisSyncPlainly: threads[index].step = .plainLoad
    case .endBody: threads[index].step = .bodyEnd
    }
    threads[index].then = .nextSync
  }

  /// `wakeUp` returns to its caller.
  mutating func wakeUpReturns(_ index: Int) {
    if threads[index].role == .owner {
      ownerContinues(index)
    } else {
      threads[index].step = .finished
    }
  }

  /// `wakeUp` with the state value `current` (loaded, or returned by a failed CAS).
  mutating func wakeUpDecides(_ index: Int, _ current: Int) {
    threads[index].seen = current
    if current & BiasBits.blocking == 0 {
      threads[index].step = .wakeCAS
    } else if current & BiasBits.biased != 0 {
      threads[index].step = .revokeLoad
    } else {
      wakeUpReturns(index)
    }
  }

  /// Checks every state must pass; then tidies it: finished drains with empty buffers leave,
  /// and values no longer used are cleared (so equal futures make equal states).
  mutating func checkAndTidy() -> String? {
    threads.removeAll { $0.role == .drainer && $0.step == .finished && $0.buffer.isEmpty }
    for index in threads.indices {
      if !threads[index].step.usesSeen { threads[index].seen = 0 }
      if !threads[index].step.usesChosenVerdict { threads[index].chosenVerdict = 0 }
    }
    let bits = BiasBits.describe(state)
    if state & (BiasBits.biased | BiasBits.revoking) != 0 && state & BiasBits.locked == 0 {
      return "BIASED or REVOKING without LOCKED: \(bits)"
    }
    if state & BiasBits.revoking != 0 && state & BiasBits.biased == 0 {
      return "REVOKING without BIASED: \(bits)"
    }
    if state & BiasBits.locked != 0 && state & BiasBits.scheduled != 0 {
      return "LOCKED and SCHEDULED together: \(bits)"
    }
    return nil
  }
}

/// A violation: what went wrong, and the moves that lead to it from the start.
private struct BiasViolation: CustomStringConvertible {
  var reason: String
  var trace: [String]

  /// The reason up to its first colon ("stuck", "stranded", "item ran during the owner's
  /// body", ...).
  var kind: String { String(reason.prefix { $0 != ":" }) }

  var description: String {
    let steps = trace.enumerated().map { "  \($0.offset + 1). \($0.element)" }
    return ([reason] + steps).joined(separator: "\n")
  }
}

/// What a search found: the number of distinct states, and for each kind of violation the
/// first one reached (breadth first, so its trace is a shortest one). The search goes on past
/// a violation (not into the violating state) so that every kind the variant allows is seen.
private struct BiasExploration {
  var states = 0
  var violations: [String: BiasViolation] = [:]

  var kinds: [String] { violations.keys.sorted() }

  /// What a revoker that may misread `busy` leads to: an overlap either way, and a lock handed
  /// to an owner who has gone.
  static let allThreeFailures = [
    "item ran during the owner's body", "stranded", "the owner's body started during an item",
  ]
}

extension BiasModel {
  var initialState: BiasState {
    var initial = BiasState()
    var owner = BiasThread(role: .owner, step: .bodyStart)
    owner.syncsLeft = syncs
    owner.pushesLeft = ownerPushesInSync > 0 ? 1 : 0
    switch start {
    case .granted:
      initial.state = BiasBits.locked | BiasBits.biased
      owner.biased = true
      initial.threads = [owner]
      initial.beginSync(0)
    case .grantedAtRelease:
      initial.state = BiasBits.locked
      owner.grantsAtRelease = true
      initial.threads = [owner]
    }
    for _ in 0..<submitters {
      initial.threads.append(BiasThread(role: .submitter, step: .push))
    }
    return initial
  }

  /// Explores every interleaving of the owner, the submitters and the drains they schedule,
  /// and of the buffers' draining, breadth first.
  func explore() -> BiasExploration {
    var result = BiasExploration()
    var states = [initialState]
    var index: [BiasState: Int] = [states[0]: 0]
    /// Per state: the state it was first reached from, and the move.
    var parents: [(state: Int, label: String)] = [(-1, "")]

    func record(_ reason: String, at id: Int, then label: String? = nil) {
      var trace: [String] = label.map { [$0] } ?? []
      var current = id
      while current > 0 {
        trace.append(parents[current].label)
        current = parents[current].state
      }
      let violation = BiasViolation(reason: reason, trace: trace.reversed())
      if result.violations[violation.kind] == nil {
        result.violations[violation.kind] = violation
      }
    }

    var cursor = 0
    while cursor < states.count {
      let id = cursor
      let state = states[id]
      cursor += 1
      var moved = false
      func move(_ label: String, _ change: (inout BiasState) -> String?) {
        moved = true
        var next = state
        if let reason = change(&next) ?? next.checkAndTidy() {
          record(reason, at: id, then: label)
        } else if index[next] == nil {
          index[next] = states.count
          states.append(next)
          parents.append((id, label))
        }
      }

      for thread in state.threads.indices {
        let name = threadName(state, thread)
        if let first = state.threads[thread].buffer.first {
          move("\(name): buffer drains \(first.address) = \(first.value)") { next in
            next.drainOldest(of: thread)
            return nil
          }
        }
        threadMove(state, thread, name, move)
      }
      if !moved, let reason = terminalViolation(state) { record(reason, at: id) }
    }
    result.states = states.count
    return result
  }

  /// In a state where nothing can move: every thread finished, every item ran, nothing left
  /// holding the queue; else why not.
  func terminalViolation(_ state: BiasState) -> String? {
    let unfinished = state.threads.indices.filter { state.threads[$0].step != .finished }
    let summary =
      "state \(BiasBits.describe(state.state)), \(state.ran) of \(state.pushed) items ran"
    if !unfinished.isEmpty {
      let spinning = unfinished.map { "\(threadName(state, $0)) at \(state.threads[$0].step)" }
      return "stuck: \(summary), spinning: \(spinning.joined(separator: ", "))"
    }
    if state.state != 0 || state.ran != state.pushed || state.pushed < submitters {
      return "stranded: \(summary), every thread finished"
    }
    return nil
  }

  /// The thread's next step, if it can take one. A locked instruction waits for the thread's
  /// buffer to drain (the drains are moves of their own); a spin waits until what it loads
  /// lets it on (a load that would only loop back is no move, so a thread left spinning is
  /// stuck).
  func threadMove(
    _ state: BiasState, _ index: Int, _ name: String,
    _ move: (String, (inout BiasState) -> String?) -> Void
  ) {
    let thread = state.threads[index]
    guard !thread.step.isLocked || thread.buffer.isEmpty else { return }
    let s = state.state
    let bits = BiasBits.describe(s)
    let expected = BiasBits.describe(thread.seen)
    let wins = s == thread.seen
    /// A CAS from the value the thread loaded: the label.
    func cas(_ change: String, _ success: String) -> String {
      "\(name): CAS state \(expected) -> \(change) (\(wins ? success : "finds \(bits)"))"
    }
    switch thread.step {
    case .finished: break

    // The owner's sync.
    case .enterStoreBusy:
      move("\(name): store busy = 1 (buffered)") { next in
        next.threads[index].buffer.append(BiasStore(address: .busy, value: 1))
        next.threads[index].step = .enterLoadState
        return nil
      }
    case .enterLoadState:
      let enters = s & BiasBits.biased != 0 && s & BiasBits.revoking == 0
      move("\(name): load state = \(bits) (\(enters ? "enters biased" : "steps aside"))") {
        next in
        if enters {
          next.threads[index].inBiasedSync = true
          next.threads[index].step = .bodyStart
        } else {
          next.threads[index].step = .enterStepAside
        }
        return nil
      }
    case .enterStepAside:
      move("\(name): store busy = 0 (buffered), resolve") { next in
        next.threads[index].buffer.append(BiasStore(address: .busy, value: 0))
        next.threads[index].step = .resolveLoad
        next.threads[index].then = .thisSyncPlainly
        return nil
      }
    case .bodyStart:
      move("\(name): body starts") { next in
        if next.itemRunning { return "the owner's body started during an item" }
        next.ownerInBody = true
        let owner = next.threads[index]
        if owner.inBiasedSync && owner.pushesLeft > 0
          && owner.syncsLeft == syncs - ownerPushesInSync
        {
          next.threads[index].step = .push
          next.threads[index].then = .endBody
        } else {
          next.threads[index].step = .bodyEnd
        }
        return nil
      }
    case .bodyEnd:
      move("\(name): body ends") { next in
        next.ownerInBody = false
        if next.threads[index].inBiasedSync {
          next.threads[index].inBiasedSync = false
          next.threads[index].step = .exitStoreBusy
        } else if next.threads[index].grantsAtRelease {
          next.threads[index].grantsAtRelease = false
          next.threads[index].step = .grantAdd
        } else {
          next.threads[index].step = .releaseSubtract
          next.threads[index].then = .nextSync
        }
        return nil
      }
    case .exitStoreBusy:
      move("\(name): store busy = 0 (buffered)") { next in
        next.threads[index].buffer.append(BiasStore(address: .busy, value: 0))
        next.threads[index].step = .exitLoadState
        return nil
      }
    case .exitLoadState:
      let stays: Bool
      switch variant {
      case .exitIgnoresRevoking: stays = s & BiasBits.biased != 0
      case .exitNeverResolves: stays = true
      default: stays = s & BiasBits.biased != 0 && s & BiasBits.revoking == 0
      }
      move("\(name): load state = \(bits) (\(stays ? "returns, still biased" : "resolves"))") {
        next in
        if stays {
          next.beginSync(index)
        } else {
          next.threads[index].step = .resolveLoad
          next.threads[index].then = .nextSync
        }
        return nil
      }
    case .plainLoad:
      if s & BiasBits.blocking == 0 {
        move("\(name): load state = \(bits) (free)") { next in
          next.threads[index].seen = s
          next.threads[index].step = .plainCAS
          return nil
        }
      }
    case .plainCAS:
      move(cas("+LOCKED", "takes it")) { next in
        if wins {
          next.state |= BiasBits.locked
          next.threads[index].step = .bodyStart
        } else {
          next.threads[index].step = .plainLoad
        }
        return nil
      }
    case .resolveLoad:
      if s & BiasBits.revoking == 0 {
        move("\(name): resolve loads state = \(bits)") { next in
          if s & BiasBits.biased != 0 {
            next.threads[index].seen = s
            next.threads[index].step = .resolveCAS
          } else {
            next.threads[index].step = .resolveLoadVerdict
          }
          return nil
        }
      }
    case .resolveCAS:
      move(cas("-BIASED", "leaves")) { next in
        if wins {
          next.state &= ~BiasBits.biased
          next.threads[index].biased = false
          next.threads[index].step = .releaseSubtract
        } else {
          next.threads[index].step = .resolveLoad
        }
        return nil
      }
    case .resolveLoadVerdict:
      let verdict = state.load(.verdict, by: index)
      move("\(name): load verdict = \(verdict)") { next in
        next.threads[index].biased = false
        if verdict == BiasVerdict.none { return "the bias was gone with no verdict" }
        if verdict == BiasVerdict.handedToOwner || variant == .resolveIgnoresVerdict {
          next.threads[index].step = .releaseSubtract
        } else {
          next.ownerContinues(index)
        }
        return nil
      }
    case .releaseSubtract:
      move("\(name): release: subtract LOCKED from \(bits)") { next in
        if let reason = next.subtract(BiasBits.locked) { return reason }
        next.threads[index].step = .releaseLoadList
        return nil
      }
    case .releaseLoadList:
      move("\(name): load list = \(state.list)") { next in
        if next.list > 0 {
          next.threads[index].step = .wakeLoad
        } else {
          next.ownerContinues(index)
        }
        return nil
      }
    case .grantAdd:
      move("\(name): release grants the bias: add BIASED to \(bits)") { next in
        if next.state & BiasBits.locked == 0 || next.state & BiasBits.biased != 0 {
          return "the bias granted without LOCKED, or twice"
        }
        next.state |= BiasBits.biased
        next.threads[index].biased = true
        next.threads[index].step = .grantLoadList
        return nil
      }
    case .grantLoadList:
      move("\(name): load list = \(state.list)") { next in
        if next.list > 0 && variant != .grantSkipsListCheck {
          next.threads[index].step = .resolveLoad
          next.threads[index].then = .nextSync
        } else {
          next.beginSync(index)
        }
        return nil
      }

    // A push.
    case .push:
      move("\(name): push (list \(state.list) -> \(state.list + 1))") { next in
        next.list += 1
        next.pushed += 1
        if next.threads[index].role == .owner { next.threads[index].pushesLeft -= 1 }
        next.threads[index].step = .wakeLoad
        return nil
      }

    // wakeUp and revoke.
    case .wakeLoad:
      move("\(name): wakeUp loads state = \(bits)") { next in
        next.wakeUpDecides(index, s)
        return nil
      }
    case .wakeCAS where variant == .wakeUpWithoutCAS:
      move("\(name): OR SCHEDULED into \(bits)") { next in next.schedule(by: index) }
    case .wakeCAS:
      move(cas("+SCHEDULED", "schedules")) { next in
        guard wins else {
          next.wakeUpDecides(index, s)
          return nil
        }
        return next.schedule(by: index)
      }
    case .revokeLoad:
      move("\(name): revoke loads state = \(bits)") { next in
        if s & BiasBits.biased == 0 {
          next.threads[index].step = .wakeLoad
        } else if s & BiasBits.revoking != 0 {
          next.wakeUpReturns(index)
        } else {
          next.threads[index].seen = s
          next.threads[index].step = .revokeCAS
        }
        return nil
      }
    case .revokeCAS:
      move(cas("+REVOKING", "revokes")) { next in
        if !wins {
          next.threads[index].step = .revokeLoad
          return nil
        }
        next.state |= BiasBits.revoking
        switch variant {
        case .noMembarrier, .busyReadBeforeMembarrier: next.threads[index].step = .revokeLoadBusy
        default: next.threads[index].step = .membarrier
        }
        return nil
      }
    case .membarrier:
      move("\(name): membarrier (every buffer drains)") { next in
        for other in next.threads.indices {
          while !next.threads[other].buffer.isEmpty { next.drainOldest(of: other) }
        }
        next.threads[index].step =
          variant == .busyReadBeforeMembarrier ? .revokeStoreVerdict : .revokeLoadBusy
        return nil
      }
    case .revokeLoadBusy:
      let busy = state.load(.busy, by: index)
      move("\(name): load busy = \(busy)") { next in
        next.threads[index].chosenVerdict =
          busy == 0 ? BiasVerdict.releasedByRevoker : BiasVerdict.handedToOwner
        next.threads[index].step =
          variant == .busyReadBeforeMembarrier ? .membarrier : .revokeStoreVerdict
        return nil
      }
    case .revokeStoreVerdict:
      let verdict = thread.chosenVerdict
      let named = verdict == BiasVerdict.handedToOwner ? "handedToOwner" : "releasedByRevoker"
      move("\(name): store verdict = \(named) (buffered)") { next in
        next.threads[index].buffer.append(BiasStore(address: .verdict, value: verdict))
        next.threads[index].step = .revokeSubtract
        return nil
      }
    case .revokeSubtract:
      let handed = thread.chosenVerdict == BiasVerdict.handedToOwner
      var off = BiasBits.biased | BiasBits.revoking | (handed ? 0 : BiasBits.locked)
      if handed && variant == .handedLeavesRevoking { off = 0 }
      move("\(name): subtract \(BiasBits.describe(off)) from \(bits)") { next in
        if let reason = next.subtract(off) { return reason }
        if handed {
          next.wakeUpReturns(index)
        } else {
          next.threads[index].step = .revokeLoadList
        }
        return nil
      }
    case .revokeLoadList:
      move("\(name): load list = \(state.list)") { next in
        if next.list > 0 {
          next.threads[index].step = .wakeLoad
        } else {
          next.wakeUpReturns(index)
        }
        return nil
      }

    // A drain.
    case .drainCheck where state.list > 0:
      move("\(name): takes an item, runs it") { next in
        if next.ownerInBody { return "item ran during the owner's body" }
        next.list -= 1
        next.itemRunning = true
        next.threads[index].step = .itemEnd
        return nil
      }
    case .drainCheck:
      move("\(name): list empty") { next in
        next.threads[index].step = .drainRelease
        return nil
      }
    case .itemEnd:
      move("\(name): item ends") { next in
        next.itemRunning = false
        next.ran += 1
        next.threads[index].step = .drainCheck
        return nil
      }
    case .drainRelease:
      move("\(name): subtract SCHEDULED from \(bits)") { next in
        if let reason = next.subtract(BiasBits.scheduled) { return reason }
        next.threads[index].step = .drainLoadList
        return nil
      }
    case .drainLoadList:
      move("\(name): load list = \(state.list)") { next in
        if next.list > 0 {
          next.threads[index].step = .wakeLoad
        } else {
          next.threads[index].step = .finished
        }
        return nil
      }
    }
  }
}

private func threadName(_ state: BiasState, _ index: Int) -> String {
  switch state.threads[index].role {
  case .owner: return "owner"
  case .submitter: return "submitter \(index)"
  case .drainer: return "drainer"
  }
}
