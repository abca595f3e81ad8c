import Testing

/// A serial queue's item list (`Queue+Serial.swift`, steps 0-2) as a model under x86's memory
/// model (TSO: each thread's plain stores wait in its store buffer and reach memory later, in
/// order; a locked instruction, the `xchg` of a push or the drainer's `cmpxchg`, drains the
/// buffer first; loads read the thread's own buffer, else memory). Two producers push two
/// nodes each while one drainer takes them; every interleaving of the three threads and of
/// the buffers' draining is explored.
///
/// A push exchanges `incoming` for its node, then stores either the link into the node it
/// displaced or, into an empty list, `head` (both plain stores, releasing). The drainer
/// loads `head` (waiting for it while `incoming` says a push is under way), loads the node's
/// link and moves `head` on; for the newest node it clears `head`, then swaps `incoming`
/// back to nil, waiting for the link if a push got in first. A taken node is freed.
///
/// Checked in every state: no node is taken twice or out of exchange order, and no store
/// lands in a freed node; in every state where nothing can move, every node was taken.
@Suite struct SerialListModelTests {
  @Test func everyNodeIsTakenOnceInOrderAndNoFreedNodeIsWritten() {
    var states = 0
    let found = listViolation(.asBuilt, states: &states)
    #expect(found == nil, "\(String(describing: found))")
    // Every interleaving was walked: 5,202 distinct states (a search cut short, or moves
    // the model stopped offering, would see far fewer).
    #expect(states > 5_000, "\(states) states")
    print("serial list model: \(states) states")
  }

  /// The checker has teeth: with `head` cleared after the swap, a push into the list the
  /// swap emptied can store its node as `head` before the drainer's clearing store drains,
  /// which then wipes it: the drainer never finds the node.
  @Test func clearingTheHeadAfterTheSwapLosesANode() {
    var states = 0
    let found = listViolation(.headClearedAfterSwap, states: &states)
    #expect(found?.reason.hasPrefix("stuck") == true, "\(String(describing: found))")
  }

  /// And with the newest node freed as soon as a push got in first (before its link is
  /// read), the pushing producer's link store lands in a freed node.
  @Test func freeingTheNewestBeforeItsLinkWritesAFreedNode() {
    var states = 0
    let found = listViolation(.freedBeforeLink, states: &states)
    #expect(found?.reason == "a store into freed node", "\(String(describing: found))")
  }
}

private enum ListVariant {
  case asBuilt
  case headClearedAfterSwap
  case freedBeforeLink
}

private enum Address: Hashable {
  case head
  case incoming
  case next(Int)
}

private struct BufferedStore: Hashable {
  var address: Address
  var value: Int
}

/// Nodes are 1...4 (0 is nil); producer `p` pushes nodes `2p + 1`, then `2p + 2`.
private struct ListState: Hashable {
  var head = 0
  var incoming = 0
  var next = [Int](repeating: 0, count: 5)
  var freed = [Bool](repeating: false, count: 5)
  var producerBuffer: [[BufferedStore]] = [[], []]
  var drainerBuffer: [BufferedStore] = []
  /// Per producer: 0 exchange its first node, 1 its second store, 2 exchange its second
  /// node, 3 its second store, 4 done.
  var producerStep = [0, 0]
  var displaced = [0, 0]
  /// 0 load head, 1 load incoming, 2 wait for head, 3 load the link, 4 clear head,
  /// 5 swap incoming, 6 wait for the link, 7 (variant) clear head after the swap.
  var drainerStep = 0
  var taking = 0
  var exchanged: [Int] = []
  var taken: [Int] = []

  func memory(_ address: Address) -> Int {
    switch address {
    case .head: return head
    case .incoming: return incoming
    case .next(let node): return next[node]
    }
  }

  /// A load by the drainer: its own newest buffered store to the address, else memory.
  func drainerLoad(_ address: Address) -> Int {
    drainerBuffer.last { $0.address == address }?.value ?? memory(address)
  }

  mutating func write(_ store: BufferedStore) -> String? {
    switch store.address {
    case .head: head = store.value
    case .incoming: incoming = store.value
    case .next(let node):
      if freed[node] { return "a store into freed node" }
      next[node] = store.value
    }
    return nil
  }

  mutating func take(_ node: Int) -> String? {
    if freed[node] { return "node \(node) taken twice" }
    taken.append(node)
    freed[node] = true
    if taken != Array(exchanged.prefix(taken.count)) { return "taken out of order" }
    return nil
  }
}

/// Explores every interleaving; returns the first violation and the steps to it, or nil.
private func listViolation(
  _ variant: ListVariant, states: inout Int
) -> (reason: String, trace: [String])? {
  var seen: Set<ListState> = []
  var found: (reason: String, trace: [String])?

  func search(_ state: ListState, _ path: [String]) {
    guard found == nil, seen.insert(state).inserted else { return }
    var moves: [(String, ListState)] = []
    func move(_ label: String, _ change: (inout ListState) -> String?) {
      var next = state
      if let reason = change(&next) {
        found = (reason, path + [label])
      } else {
        moves.append((label, next))
      }
    }

    for producer in 0..<2 where found == nil {
      let step = state.producerStep[producer]
      let node = 2 * producer + 1 + step / 2
      if step < 4 && step % 2 == 0 && state.producerBuffer[producer].isEmpty {
        move("p\(producer): xchg incoming \(state.incoming) -> \(node)") { next in
          next.displaced[producer] = next.incoming
          next.incoming = node
          next.exchanged.append(node)
          next.producerStep[producer] += 1
          return nil
        }
      } else if step < 4 && step % 2 == 1 {
        let older = state.displaced[producer]
        let store =
          older != 0
          ? BufferedStore(address: .next(older), value: node)
          : BufferedStore(address: .head, value: node)
        move("p\(producer): store \(store.address) = \(node) (buffered)") { next in
          if case .next(let target) = store.address, next.freed[target] {
            return "a store into freed node"
          }
          next.producerBuffer[producer].append(store)
          next.producerStep[producer] += 1
          return nil
        }
      }
      if let first = state.producerBuffer[producer].first {
        move("p\(producer): buffer drains \(first.address) = \(first.value)") { next in
          next.producerBuffer[producer].removeFirst()
          return next.write(first)
        }
      }
    }
    if let first = state.drainerBuffer.first, found == nil {
      move("drainer: buffer drains \(first.address) = \(first.value)") { next in
        next.drainerBuffer.removeFirst()
        return next.write(first)
      }
    }
    if found == nil { drainerMove(state, variant, move) }
    guard found == nil else { return }

    if moves.isEmpty {
      if state.taken != state.exchanged || state.exchanged.count != 4 {
        found = ("stuck with \(state.taken) taken of \(state.exchanged)", path)
      }
      return
    }
    for (label, next) in moves where found == nil { search(next, path + [label]) }
  }

  search(ListState(), [])
  states = seen.count
  return found
}

/// The drainer's next step, if it can take one (a wait whose value has not arrived cannot).
private func drainerMove(
  _ state: ListState, _ variant: ListVariant,
  _ move: (String, (inout ListState) -> String?) -> Void
) {
  let node = state.taking
  switch state.drainerStep {
  case 0:
    let head = state.drainerLoad(.head)
    move("drainer: load head = \(head)") { next in
      next.taking = head
      next.drainerStep = head != 0 ? 3 : 1
      return nil
    }
  case 1:
    let incoming = state.drainerLoad(.incoming)
    // Empty: the drain would end here; a later push schedules another, modelled as looking
    // again (the search stops at states it has seen).
    if incoming != 0 || state.exchanged.count < 4 {
      move("drainer: load incoming = \(incoming)") { next in
        next.drainerStep = incoming != 0 ? 2 : 0
        return nil
      }
    }
  case 2:
    let head = state.drainerLoad(.head)
    if head != 0 {
      move("drainer: waited for head = \(head)") { next in
        next.taking = head
        next.drainerStep = 3
        return nil
      }
    }
  case 3:
    let link = state.drainerLoad(.next(node))
    move("drainer: load link of \(node) = \(link)") { next in
      if link != 0 {
        next.drainerBuffer.append(BufferedStore(address: .head, value: link))
        next.drainerStep = 0
        return next.take(node)
      }
      next.drainerStep = variant == .headClearedAfterSwap ? 5 : 4
      return nil
    }
  case 4:
    move("drainer: clear head (buffered)") { next in
      next.drainerBuffer.append(BufferedStore(address: .head, value: 0))
      next.drainerStep = 5
      return nil
    }
  case 5 where state.drainerBuffer.isEmpty:
    move("drainer: cmpxchg incoming \(node) -> 0 (finds \(state.incoming))") { next in
      if next.incoming == node {
        next.incoming = 0
        if variant == .headClearedAfterSwap {
          next.drainerStep = 7
          return nil
        }
        next.drainerStep = 0
        return next.take(node)
      }
      next.drainerStep = 6
      return variant == .freedBeforeLink ? next.take(node) : nil
    }
  case 6:
    // Read from the node itself (freed already in the `freedBeforeLink` variant, where the
    // producer's store is what the checker catches).
    let link = state.drainerLoad(.next(node))
    if link != 0 {
      move("drainer: waited for link of \(node) = \(link)") { next in
        next.drainerBuffer.append(BufferedStore(address: .head, value: link))
        next.drainerStep = 0
        return variant == .freedBeforeLink ? nil : next.take(node)
      }
    }
  case 7:
    move("drainer: clear head after the swap (buffered)") { next in
      next.drainerBuffer.append(BufferedStore(address: .head, value: 0))
      next.drainerStep = 0
      return next.take(node)
    }
  default: break
  }
}
