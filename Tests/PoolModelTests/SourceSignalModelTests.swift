import Testing

/// `SourceCore.signal` racing `resume` (538050d), as a model under x86's memory model (TSO:
/// each thread's plain stores wait in its store buffer and reach memory later, in order; a
/// locked instruction — an `xchg` store, a `lock` RMW — drains the buffer first; loads read
/// the thread's own buffer, else memory). Every interleaving of the two threads and of the
/// buffer's draining is explored.
///
/// The signaller (an I/O driver thread) stores the pending data, then checks the suspend
/// count and, if zero, the data, and claims the delivery. The resumer (the channel's queue)
/// decrements the suspend count with a locked RMW, then checks the count and the data and
/// claims the delivery. When both are done and the buffer has drained, data that is pending
/// on a resumed source must have had its delivery claimed by one of them.
@Suite struct SourceSignalModelTests {
  @Test func aSequentiallyConsistentStoreNeverLosesTheDelivery() {
    #expect(lostDelivery(signalStoreIsLocked: true) == nil)
  }

  /// The checker has teeth: with the releasing store (a plain `mov`) the signaller can read
  /// the old suspend count while its store still waits in its buffer, and the resumer then
  /// reads the old data: nobody delivers.
  @Test func aReleasingStoreLosesTheDelivery() {
    let trace = lostDelivery(signalStoreIsLocked: false)
    #expect(
      trace == [
        "signaller: store data (buffered)", "signaller: load count = 1",
        "resumer: count 1 -> 0", "resumer: load data = 0", "buffer drains",
      ])
  }
}

/// The model's state: memory, the signaller's store buffer, each thread's step, and who
/// claimed the delivery.
private struct SignalState: Hashable {
  var data = 0  // pendingData in memory
  var count = 1  // suspendCount: the source starts suspended
  var buffered = false  // the signaller's store of data = 1 waits in its buffer
  var signaller = 0  // 0: store, 1: load count, 2: load data, 3: done
  var resumer = 0  // 0: RMW count, 1: load data, 2: done
  var claimed = false
}

/// Explores every interleaving; returns the steps to the first lost delivery, or nil.
private func lostDelivery(signalStoreIsLocked: Bool) -> [String]? {
  var seen: Set<SignalState> = []
  func search(_ state: SignalState, _ path: [String]) -> [String]? {
    guard seen.insert(state).inserted else { return nil }
    var moves: [(String, SignalState)] = []
    var next = state
    switch state.signaller {
    case 0:
      if signalStoreIsLocked {
        next.data = 1  // xchg: straight to memory (the buffer is empty)
        next.signaller = 1
        moves.append(("signaller: store data (locked)", next))
      } else {
        next.buffered = true
        next.signaller = 1
        moves.append(("signaller: store data (buffered)", next))
      }
    case 1:
      next.signaller = state.count == 0 ? 2 : 3
      moves.append(("signaller: load count = \(state.count)", next))
    case 2:
      let data = state.buffered ? 1 : state.data  // its own buffer first
      next.signaller = 3
      if data != 0 { next.claimed = true }
      moves.append(("signaller: load data = \(data)", next))
    default: break
    }
    next = state
    switch state.resumer {
    case 0:
      next.count -= 1  // lock sub: atomic in memory (its own buffer is empty)
      next.resumer = 1
      moves.append(("resumer: count 1 -> 0", next))
    case 1:
      next.resumer = 2
      if state.data != 0 { next.claimed = true }
      moves.append(("resumer: load data = \(state.data)", next))
    default: break
    }
    if state.buffered {
      next = state
      next.buffered = false
      next.data = 1
      moves.append(("buffer drains", next))
    }
    if moves.isEmpty {
      // Both done, buffer drained: pending data on a resumed source must be claimed.
      return state.data != 0 && state.count == 0 && !state.claimed ? path : nil
    }
    for (step, successor) in moves {
      if let lost = search(successor, path + [step]) { return lost }
    }
    return nil
  }
  return search(SignalState(), [])
}
