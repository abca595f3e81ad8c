import Testing

/// `Semaphore`'s sleep announcement (step 3 of its walk-through) as a model: a waiter that
/// found no token after its spin, and a signaller whose unit is owed to that waiter. Every
/// interleaving of the two is explored under x86's memory model (TSO: a plain store waits in
/// its thread's buffer and reaches memory later; a locked read-modify-write drains the buffer
/// first; `futex_wait` drains it too, as the kernel takes a lock before it compares).
///
/// Waiter: add 1 to `sleepers`, load `tokens`; if 0, `futex_wait(tokens, 0)`: the kernel
/// compares the word with 0 and either returns at once or puts the thread to sleep until a
/// `futex_wake`. Signaller: add 1 to `tokens`, load `sleepers`; if above 0, `futex_wake`.
/// When both are done and the buffer has drained, the waiter must not be asleep.
///
/// Scope: one waiter, one signaller, one round. Several waiters, a spinner taking the token
/// a sleeper was woken for, and the timed-out path are argued in `Semaphore`'s walk-through
/// and exercised by the stress tests in `SemaphoreTests`.
@Suite struct SemaphoreModelTests {
  @Test func theAnnouncedSleepNeverMissesItsWakeUp() {
    #expect(lostWakeUp(SemaphoreModel()) == nil)
  }

  /// The checker has teeth: a signaller that looks for sleepers before it adds its token
  /// (to skip the add's cost when nobody sleeps) misses a waiter that announces, compares
  /// and sleeps between its two steps.
  @Test func aSignallerThatLooksFirstLosesTheWakeUp() {
    let trace = lostWakeUp(SemaphoreModel(signallerLooksFirst: true))
    #expect(
      trace == [
        "signaller: load sleepers = 0", "waiter: sleepers 0 -> 1", "waiter: load tokens = 0",
        "waiter: futex_wait sleeps", "signaller: tokens 0 -> 1",
      ])
  }

  /// A waiter that sleeps without announcing itself (a path that calls `futex_wait` on
  /// `tokens` directly, as `giveUp`'s wait for an owed token would if it did not go through
  /// `sleepForToken`) is never woken.
  @Test func aWaiterThatDoesNotAnnounceLosesTheWakeUp() {
    let trace = lostWakeUp(SemaphoreModel(waiterAnnounces: false))
    #expect(
      trace == [
        "waiter: load tokens = 0", "waiter: futex_wait sleeps", "signaller: tokens 0 -> 1",
        "signaller: load sleepers = 0",
      ])
  }

  /// An announcement that is a plain store, not a locked add, is still safe under TSO: the
  /// kernel's lock in `futex_wait` drains the buffer before the waiter can sleep. (The code
  /// uses sequentially consistent adds anyway: the argument must hold beyond x86.)
  @Test func aBufferedAnnouncementIsSafeUnderTSO() {
    #expect(lostWakeUp(SemaphoreModel(announceIsLocked: false)) == nil)
  }
}

/// The model's variants (the defaults are the code's).
private struct SemaphoreModel {
  var signallerLooksFirst = false
  var waiterAnnounces = true
  var announceIsLocked = true
}

/// Memory, the waiter's store buffer, and each thread's step.
private struct SemaphoreState: Hashable {
  var tokens = 0
  var sleepers = 0
  var buffered = false  // the waiter's store of sleepers = 1 waits in its buffer
  var waiter = 0  // 0: announce, 1: load tokens, 2: futex_wait, 3: asleep, 4: done
  var signaller = 0  // the two steps in the variant's order, then 2: wake, 3: done
  var signallerSawSleeper = false
}

/// Explores every interleaving; returns the steps to the first lost wake-up, or nil.
private func lostWakeUp(_ model: SemaphoreModel) -> [String]? {
  var seen: Set<SemaphoreState> = []
  var start = SemaphoreState()
  if !model.waiterAnnounces { start.waiter = 1 }

  func signallerMoves(_ state: SemaphoreState) -> [(String, SemaphoreState)] {
    var next = state
    // The signaller's two steps, in the variant's order.
    let addFirst = !model.signallerLooksFirst
    switch state.signaller {
    case 0, 1:
      let isAdd = (state.signaller == 0) == addFirst
      next.signaller += 1
      if isAdd {
        next.tokens += 1  // lock add: straight to memory
        if next.signaller == 2 && !next.signallerSawSleeper { next.signaller = 3 }
        return [("signaller: tokens \(state.tokens) -> \(next.tokens)", next)]
      }
      next.signallerSawSleeper = state.sleepers > 0  // memory: not the waiter's buffer
      if next.signaller == 2 && !next.signallerSawSleeper { next.signaller = 3 }
      return [("signaller: load sleepers = \(state.sleepers)", next)]
    case 2:
      next.signaller = 3
      if state.waiter == 3 { next.waiter = 4 }  // futex_wake: the sleeper wakes
      return [("signaller: futex_wake", next)]
    default:
      return []
    }
  }

  func waiterMoves(_ state: SemaphoreState) -> [(String, SemaphoreState)] {
    var next = state
    switch state.waiter {
    case 0:
      next.waiter = 1
      if model.announceIsLocked {
        next.sleepers += 1
        return [("waiter: sleepers \(state.sleepers) -> \(next.sleepers)", next)]
      }
      next.buffered = true
      return [("waiter: store sleepers = 1 (buffered)", next)]
    case 1:
      next.waiter = state.tokens != 0 ? 4 : 2
      return [("waiter: load tokens = \(state.tokens)", next)]
    case 2:
      // The kernel's lock drains the buffer, then it compares the word.
      if next.buffered {
        next.buffered = false
        next.sleepers += 1
      }
      if state.tokens != 0 {
        next.waiter = 4
        return [("waiter: futex_wait returns (tokens \(state.tokens))", next)]
      }
      next.waiter = 3
      return [("waiter: futex_wait sleeps", next)]
    default:
      return []  // Asleep: only the signaller's wake moves it.
    }
  }

  func search(_ state: SemaphoreState, _ path: [String]) -> [String]? {
    guard seen.insert(state).inserted else { return nil }
    var moves = signallerMoves(state) + waiterMoves(state)
    if state.buffered {
      var drained = state
      drained.buffered = false
      drained.sleepers += 1
      moves.append(("buffer drains", drained))
    }
    if moves.isEmpty {
      // Both done and the buffer drained: the waiter must not sleep on with a token there.
      return state.waiter == 3 ? path : nil
    }
    for (step, successor) in moves {
      if let lost = search(successor, path + [step]) { return lost }
    }
    return nil
  }
  return search(start, [])
}
