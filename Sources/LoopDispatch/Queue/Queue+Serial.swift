import CLoopShims
import Glibc
import MainLoop
import Synchronization

/// The serial queue's state word.
///
/// | bits   | name        | meaning                                                        |
/// | ------ | ----------- | -------------------------------------------------------------- |
/// | 0      | SCHEDULED   | a drain is queued on the target or running; its holder takes the items |
/// | 1      | SYNC_LOCKED | a `sync` caller runs inline on its own thread                  |
/// | 2      | INACTIVE    | created inactive and not yet activated                         |
/// | 3      | WIDE        | made wide: items move on to a concurrent back (`Queue+Wide.swift`) |
/// | 4      | WIDTH_REQ   | `setWidth` was called (WIDE follows at its barrier)            |
/// | 5      | BIASED      | the `sync` lock is biased to one thread; SYNC_LOCKED stays set (`Queue+SyncBias.swift`) |
/// | 6      | REVOKING    | a revocation of the bias is under way                          |
/// | 8...39 | SUSPEND     | suspend count (each `suspend()` adds `suspendOne`)             |
///
/// The queue may run an item only when SCHEDULED or SYNC_LOCKED is held, and never both.
///
/// Submission/drain walk-through:
/// 0. The items form one list, oldest to newest (a multi-producer, single-consumer FIFO, the
///    form libdispatch uses): `head` is the oldest item not yet taken, each node's `next`
///    links to the next newer one, and `incoming` is the newest. Both are nil when the list
///    is empty, so an idle queue holds no node; the queue has items queued exactly while
///    `incoming` is not nil.
/// 1. `async` appends a node: it becomes `incoming` (a sequentially consistent exchange),
///    then the node it displaced links to it, or, if the list was empty, it becomes `head`
///    (see `serialEnqueue`), then `wakeUp()`
///    loads the state: if nothing holds the queue and it is neither suspended nor inactive,
///    a CAS sets SCHEDULED and the queue hands its drain to its target (or, for a C serial
///    queue beside busy neighbours, to an overcommit lane: `drainsOnOvercommitBesideNeighbours`).
/// 2. The drainer (holding SCHEDULED) runs items from `head`, one by one, oldest first: it
///    loads `head`, checks suspension (a suspended queue keeps the item where it is), then
///    takes the item: `head` moves to the node's link, or, for the last node, to nil, with
///    `incoming` swapped back from that node to nil (a compare-and-swap; if a producer got
///    in first, the drainer waits for its link). Each node is reached once, and the drainer
///    starts fetching the next node before it runs the item (the list used to be a stack the
///    drainer reversed: two walks over nodes that other CPUs wrote, 46% of the drain's
///    samples in perf beside busy neighbours). After
///    `drainBudget` items it stops, whatever is queued: with items waiting it re-enqueues
///    itself behind others on its target (still holding SCHEDULED) so one busy queue cannot
///    monopolise a worker; with none it releases SCHEDULED as in step 3, and if items
///    arrived meanwhile (the queue was empty only at the check) the re-check's `wakeUp`
///    yields too (`releaseScheduled(yielding:)`): the budget bounds every drain, not just
///    drains that find work at their last item.
/// 3. Out of work (or suspended), it clears SCHEDULED (sequentially consistent), then
///    re-checks `incoming` and calls `wakeUp()` if it is not nil. Either a
///    submitter's state load comes after the clear (and it schedules), or the drainer's
///    re-check sees its node: nothing is stranded (Dekker's pattern, as in the event loop).
/// 4. `sync` on an idle queue CASes 0 → SYNC_LOCKED (for each serial queue up its target
///    chain), runs the closure inline, clears the bit and re-checks like step 3. On a busy
///    queue it enqueues a `SyncWaiter` and waits for its turn (`QueueItem.swift`). A queue
///    whose lock is biased to a thread keeps SYNC_LOCKED set between that thread's `sync`s
///    (`Queue+SyncBias.swift`): to everyone else it is held, and the first submission ends
///    the bias from `wakeUp`.
/// 5. Wait figures (`QueueStats.maxWait`, `recentWait`): a clock read (`rdtsc`) costs
///    14–22 ns on this project's VMs, a third of a drain's cost per item when producers keep
///    it busy, and as much again on each producer. So only some items are timed:
///    (a) a submission carries a stamp with a chance of one in eight (`Ticks.sampledStamp`,
///        a pseudo-random choice of the submitting thread's), and the drainer times the
///        start of every stamped item;
///    (b) the submission whose `wakeUp` schedules a drain reads the clock once into
///        `drainScheduledAt`, and the drain times its first item from that instant when the
///        item carries no stamp. A queue that was idle was empty, so that item is usually
///        the one whose submission scheduled the drain, a few instructions earlier: an item
///        that waited alone is measured. Imprecisions, all rare: after a `resume()`, an
///        `activate()`, a `sync` that held the queue, or the drainer's own re-check, the
///        first item was submitted before the drain was scheduled, and is measured short (an
///        item of a suspended queue is timed from its submission only if (a) stamped it); a
///        submitter preempted between its push and its `wakeUp` may schedule a drain after
///        the previous drain ran its item, and an item submitted later is then the new
///        drain's first, measured long by up to the time the drain waited to start. A drain
///        that yields clears the instant, so (b) does not time the first item after a yield.
///    (c) The main queue, whose waits are the main thread's lag, stamps every item, and its
///        drainer times the first item of each drain, every `mainStartStampPeriod`-th and
///        the last one linked: every untimed item has a timed one less than eight places
///        after it, submitted later and started no earlier, so the maximum falls short by
///        at most the time over which eight items were submitted, and a lone item behind a
///        stall is measured.
///    Before (a), the drainer fell behind four producers beside busy neighbours and finished
///    up to 50 ms after them (a median of 34 over 9 runs of a million items; libdispatch's,
///    1–10 ms) when it read the clock for every start; with every submission stamped,
///    `serial_4p` cost 115 ns an item (CPU 223) against 99 (182) with (a) (quiet, medians
///    of 7). On a queue other than the main queue, a stall that N items sit behind goes
///    unseen with a chance of (7/8)^N; a wait only a lone unstamped item in the middle of a
///    run suffered may not be seen.
enum SerialState {
  static let scheduled: UInt64 = 1 << 0
  static let syncLocked: UInt64 = 1 << 1
  static let inactive: UInt64 = 1 << 2
  /// Made wide by `setWidth`: the drainer moves items to the concurrent back
  /// (`Queue+Wide.swift`). Never cleared; not blocking.
  static let wide: UInt64 = 1 << 3
  /// `setWidth` was called (set at the call, before WIDE): handlers that must run in order
  /// (an I/O channel's) no longer rely on this queue's order. Never cleared; not blocking.
  static let widthRequested: UInt64 = 1 << 4
  /// The queue's `sync` lock is biased to one thread (`Queue+SyncBias.swift`); set only
  /// together with SYNC_LOCKED, which stays set for the bias's life.
  static let biased: UInt64 = 1 << 5
  /// A revocation of the bias is under way (`Queue+SyncBias.swift`, step 3).
  static let revoking: UInt64 = 1 << 6
  /// What the bias owner's `sync` checks: exactly BIASED among these, or it steps aside.
  static let biasCheckMask: UInt64 =
    biased | revoking | inactive | wide | widthRequested | suspendMask
  static let suspendOne: UInt64 = 1 << 8
  static let suspendMask: UInt64 = 0xFFFF_FFFF << 8
  /// Any of these stops the queue from being scheduled.
  static let blocking: UInt64 = scheduled | syncLocked | inactive | suspendMask
}

/// What a drainer waits for between a producer's two stores (step 1), named for the debug
/// observer (`SerialLinkHooks.setWaitObserver`).
package enum SerialListWait: Sendable {
  /// The link out of the newest node it knew (`waitForLink`).
  case link
  /// The head of a list a producer found empty (`waitForHead`).
  case head
}

/// Items a drainer runs before yielding its worker to other queues.
let drainBudget = 128

/// The main queue's drainer times the start of one item in this many (step 5); a power of
/// two.
let mainStartStampPeriod = 8

extension Queue {
  // MARK: Submission

  @inline(__always)
  func serialEnqueue(_ work: QueueWork) {
    // Safe: the node is ours until the exchange publishes it; the drainer that takes it frees
    // it (`takeItem`), or the queue's deinit (`freeSerialItems`).
    // A recycled node (`NodeCache`): no allocation in the steady state.
    let node = NodeCache.take()
    node.pointee.work = work
    // Step 5: every item of the main queue is stamped, one in eight (by chance) of the
    // others' (0: not timed).
    let stamp = kind == .main ? Ticks.now() : Ticks.sampledStamp()
    node.pointee.enqueuedAt = stamp
    countSubmission()
    // One exchange, never a retry (several producers do not fail each other's CAS): the node
    // becomes the newest, then the node it displaced links to it, or it becomes the head.
    // Between the two stores a drainer that reached the displaced node, or found the list
    // empty, waits (`waitForLink`, `waitForHead`). Relaxed: the exchange publishes the
    // node's empty link.
    node.pointee.next.store(0, ordering: .relaxed)
    let older = incoming.exchange(node, ordering: .sequentiallyConsistent)
    #if DEBUG
      SerialLinkHooks.betweenExchangeAndStore()
    #endif
    // Releasing: pairs with the drainer's acquiring loads of the link and of `head`
    // (`takeItem`, `peekHead`), which then see this node's fields and whatever happened
    // before this push.
    if let older {
      // `older` is still allocated: the drainer frees a node only after it read a link out
      // of it or swapped `incoming` away from it, and this exchange, which no other push
      // displaced `older` with, took `incoming` from it.
      older.pointee.next.store(node.nodeBits, ordering: .releasing)
    } else {
      // The list was empty: `incoming` was nil initially or made so by the drainer that took
      // the last node, after it cleared `head`; this exchange read that nil, so the clearing
      // comes before this store, and the drainer stores `head` again only after it read
      // this one (`peekHead`).
      head.store(node, ordering: .releasing)
    }
    // The stamp, if the item drew one, doubles as the schedule's instant (step 5 (b)).
    wakeUp(submittedAt: stamp)
  }

  /// The link out of `node` waited for: `incoming` is no longer `node`, so a producer has
  /// exchanged and not yet linked.
  @inline(never)
  private func waitForLink(from node: JobNodePointer) -> JobNodePointer {
    // Acquiring: pairs with the producer's releasing link store.
    waitForSecondStore(.link) {
      JobNodePointer(bitPattern: node.pointee.next.load(ordering: .acquiring))
    }
  }

  /// `head` waited for: `incoming` is not nil, so a producer that found the list empty has
  /// exchanged and not yet stored its node there.
  @inline(never)
  private func waitForHead() -> JobNodePointer {
    // Acquiring: pairs with the producer's releasing store.
    waitForSecondStore(.head) { head.load(ordering: .acquiring) }
  }

  /// Polls `load` until a producer's second store (step 1: the link or the head) appears.
  /// The two stores are two instructions apart; longer only if the producer was preempted
  /// between them, hence the yield.
  private func waitForSecondStore(
    _ kind: SerialListWait, _ load: () -> JobNodePointer?
  ) -> JobNodePointer {
    var spins = 0
    while true {
      if let node = load() { return node }
      #if DEBUG
        if spins == 0 { SerialLinkHooks.drainerWaits(self, for: kind) }
      #endif
      spins += 1
      if spins > 64 { sched_yield() }
    }
  }

  /// Schedules the queue on its target if it has work and nothing holds or blocks it.
  /// `yielding`: see `scheduleDrain` (a drain that used up its budget, step 2).
  /// `submittedAt`: the calling submission's stamp, or 0 (step 5 (b) then reads the clock).
  @inline(__always)
  func wakeUp(yielding: Bool = false, submittedAt: UInt64 = 0) {
    var current = state.load(ordering: .sequentiallyConsistent)
    while current & SerialState.blocking == 0 {
      let (exchanged, original) = state.compareExchange(
        expected: current, desired: current | SerialState.scheduled,
        ordering: .sequentiallyConsistent)
      if exchanged {
        // Step 5 (b): the instant the first item of the drain starts waiting for it (the
        // main queue stamps every item and never reads it).
        if kind != .main {
          drainScheduledAt.store(
            submittedAt != 0 ? submittedAt : Ticks.now(), ordering: .relaxed)
        }
        // A wide queue's drain only moves items on to its back (`Queue+Wide.swift`): it must
        // not wait in the run-next slot of a worker whose item may run for long.
        scheduleDrain(yielding: yielding || current & SerialState.wide != 0)
        return
      }
      current = original
    }
    // Held under a bias: nobody will release it unless this submission ends the bias
    // (`Queue+SyncBias.swift`, step 3).
    if current & SerialState.biased != 0 {
      revokeBias(yielding: yielding, submittedAt: submittedAt)
    }
  }

  /// Hands the drain (and the SCHEDULED bit the caller holds) to whoever runs this queue:
  /// the target, or for the main queue the main event loop.
  /// `yielding`: the drain used up its budget and goes behind others on its target.
  @inline(__always)
  func scheduleDrain(yielding: Bool = false) {
    if kind == .main {
      EventLoop.main.execute { [self] in drainSerial() }
    } else if drainsOnOvercommitBesideNeighbours, let root = reserveDivertedRoot() {
      WorkerPool.shared.submitOvercommit(.divertedDrain(self, from: root), priority: root.priority)
    } else {
      target!.enqueueDrain(of: self, yielding: yielding)
    }
  }

  /// The plain global queue this serial queue targets, when its drain goes to the overcommit
  /// queue of that priority instead (see `drainsOnOvercommitBesideNeighbours`), with a slot
  /// of `WorkerPool.divertedDrainLimit` taken for it: the caller must submit the drain. Nil
  /// when the target is not a plain global queue, no neighbour holds CPUs the process may
  /// use, or the cap is reached.
  @inline(never)
  private func reserveDivertedRoot() -> Queue? {
    guard targetIsRoot.load(ordering: .relaxed) else { return nil }
    let root = target!
    let governor = WorkerPool.shared.spinGovernor
    guard case .root(_, overcommit: false) = root.kind, governor.mayHaveNeighbours,
      governor.neighboursTakeCPU(now: Deadline.now.uptimeNanoseconds),
      WorkerPool.shared.reserveDivertedDrain(of: self)
    else { return nil }
    return root
  }

  /// Whether an item is queued (step 0: `incoming` is not nil), pushed or still being
  /// linked. Sequentially consistent: step 3's and `releaseSyncLock`'s re-checks.
  var serialHasPendingItems: Bool {
    incoming.load(ordering: .sequentiallyConsistent) != nil
  }

  /// Whether the queue looked empty: a hint for `sync`'s fast paths, read by any thread.
  /// Relaxed: it may miss a push that is not ordered before the call. Harmless: the state
  /// CAS and the release-side re-check decide (`trySyncLock`).
  @inline(__always)
  var serialLooksEmpty: Bool {
    incoming.load(ordering: .relaxed) == nil
  }

  // MARK: Draining

  /// Runs up to `drainBudget` items. The caller holds SCHEDULED (given by `wakeUp`).
  func drainSerial() {
    if kind == .serial && namesThreads { ThreadName.show(self) }
    ThreadFrame.with(self, exclusive: true) {
      var ran = 0
      var yielded = false
      while true {
        guard let node = peekHead() else { break }
        #if DEBUG
          SerialDrainHooks.afterTake(of: self)
        #endif
        // Seen first, then checked: an item pushed after a `suspend()` returned is seen only
        // through a releasing store its producer made after the push (the link, or `head`),
        // read acquiring, so this load (sequentially consistent, like the suspend's add) sees
        // the suspension, and the item stays where it is. (Checked before the item is seen, a
        // suspend and a push could both land between the check and the read, and the new item
        // ran while its queue was suspended: SuspendStorm saw it once.)
        let now = state.load(ordering: .sequentiallyConsistent)
        if now & (SerialState.suspendMask | SerialState.inactive) != 0 { break }
        let following = takeItem(node)
        // Safe: the node is out of the list, ours; its work moves out once, then the node
        // goes back to this thread's cache.
        let work = node.pointee.work.take()!
        // Step 5: the item's stamp, or for the drain's first item the schedule's instant.
        var enqueuedAt = node.pointee.enqueuedAt
        if enqueuedAt == 0 && ran == 0 { enqueuedAt = drainScheduledAt.load(ordering: .relaxed) }
        NodeCache.give(node)
        // Step 2: start fetching the next item's node (written on another CPU) while this
        // one runs. Safe: a hint, not an access (it never faults and writes nothing), of a
        // node in the list, which only this drain frees.
        if let following { cls_prefetch_for_write(following, MemoryLayout<JobNode>.size) }
        if now & SerialState.wide != 0 {
          // Wide (`Queue+Wide.swift`, step 3): on to the back, in order; counted there.
          concurrentAccept(work, enqueuedAt: enqueuedAt)
        } else {
          // Step 5: the main queue times the first item of a drain, every eighth and the last
          // linked; the others time the items that carry a stamp.
          let timed =
            kind == .main
            ? ran & (mainStartStampPeriod - 1) == 0 || following == nil
            : enqueuedAt != 0
          if timed { recordStartExclusive(enqueuedAt: enqueuedAt) }
          if kind == .main && MainStallWatchdog.isEnabled {
            MainStallWatchdog.shared.run(work, on: self)
          } else {
            perform(work)
          }
          countCompletionExclusive()
        }
        ran += 1
        // Step 2's bound. Checked as `>=` and followed by a break either way: a queue empty
        // at this check may be refilled before the next `peekHead`, and a drain that went on
        // would never meet the budget again.
        let budgetUsed = ran >= drainBudget
        if budgetUsed && serialHasPendingItems {
          // Yield: go to the back of the target's line, still holding SCHEDULED. The next
          // drain's first item was submitted before this instant: step 5 (b) does not time it.
          drainScheduledAt.store(0, ordering: .relaxed)
          scheduleDrain(yielding: true)
          yielded = true
          break
        }
        #if DEBUG
          SerialDrainHooks.afterBudgetCheck(of: self, ran: ran)
        #endif
        if budgetUsed { break }
      }
      if !yielded { releaseScheduled(yielding: ran >= drainBudget) }
    }
    if kind == .serial && namesThreads { ThreadName.showEnclosingQueue() }
  }

  /// The oldest item (`head`), not taken; nil when the list is empty. Only the SCHEDULED
  /// holder calls this.
  @inline(__always)
  private func peekHead() -> JobNodePointer? {
    // Acquiring: pairs with a producer's releasing store when it found the list empty (the
    // drainer's own stores came through the hand-off of SCHEDULED).
    if let node = head.load(ordering: .acquiring) { return node }
    // Empty, or a producer that found it empty is between its exchange and its store.
    if incoming.load(ordering: .sequentiallyConsistent) == nil { return nil }
    return waitForHead()
  }

  /// Takes `node`, the head just returned by `peekHead`, out of the list: `head` moves to
  /// its link, or, when it is the newest, to nil, with `incoming` swapped back to nil.
  /// Afterwards no producer touches `node`. Returns the new head. Only the SCHEDULED holder
  /// calls this.
  @inline(__always)
  private func takeItem(_ node: JobNodePointer) -> JobNodePointer? {
    // Acquiring: pairs with the releasing link store of the next node's producer.
    let raw = node.pointee.next.load(ordering: .acquiring)
    if raw != 0 {
      let following = JobNodePointer(nodeBits: raw)
      // Relaxed: the next drainer gets `head` through the hand-off of SCHEDULED.
      head.store(following, ordering: .relaxed)
      return following
    }
    return takeNewestSlow(node)
  }

  /// `takeItem` of the newest node known: the list becomes empty, unless a producer
  /// exchanged in the meantime, whose link then follows.
  @inline(never)
  private func takeNewestSlow(_ node: JobNodePointer) -> JobNodePointer? {
    // Cleared first: a producer whose exchange reads the nil below stores its node here,
    // and that store must come after this one. The CAS (releasing) orders them.
    // (`SerialListModelTests` explores the list under x86's memory model; with this store
    // after the CAS, a push into the list the CAS emptied loses its node there.)
    head.store(nil, ordering: .relaxed)
    if incoming.compareExchange(expected: node, desired: nil, ordering: .sequentiallyConsistent)
      .exchanged
    {
      return nil
    }
    // A producer displaced `node`: its link is written next, and only this drainer stores
    // `head` until the list is empty again.
    let following = waitForLink(from: node)
    head.store(following, ordering: .relaxed)
    return following
  }

  /// Step 3. `yielding`: the drain used up its budget, so work found by the re-check goes
  /// behind others on the target (a plain wake-up could take the worker's run-next slot and
  /// run it at once, a drain past its budget in all but name).
  private func releaseScheduled(yielding: Bool) {
    // A drain between two `sync`s of one thread breaks its streak (`Queue+SyncBias.swift`,
    // step 1): a queue that others feed is not biased to its `sync` caller. This thread
    // holds the queue (SCHEDULED), as the streak's rule requires.
    breakSyncStreak()
    state.wrappingSubtract(SerialState.scheduled, ordering: .sequentiallyConsistent)
    if serialHasPendingItems { wakeUp(yielding: yielding) }
  }

  /// Frees the items left in a queue that is being deallocated, without running them.
  func freeSerialItems() {
    // No producer is left (each held the queue), so every link is written.
    var node = head.load(ordering: .acquiring)
    while let current = node {
      node = JobNodePointer(bitPattern: current.pointee.next.load(ordering: .acquiring))
      current.pointee.work = nil
      NodeCache.give(current)
    }
  }

  // MARK: sync

  /// Tries to take SYNC_LOCKED on this queue and every serial queue up its target chain.
  /// Returns false (holding nothing) if any is busy, the chain has a concurrent queue, or
  /// it ends at a global queue of a lower priority than `lowestPriority` (the I/O driver's
  /// inline runs pass `.default`: see `IODriver.lowestInlinePriority`; `sync` takes any).
  ///
  /// Each queue locked records the next one locked (`syncChainNext`), and the unlock
  /// follows those links, not `target`: a `setTarget` while the chain is held changes where
  /// later work goes, never which locks this holder releases.
  @inline(__always)
  func trySyncLockChain(lowestPriority: Priority = .background) -> Bool {
    var queue = self
    var previous: Queue? = nil
    while true {
      guard queue.kind == .serial, queue.serialLooksEmpty else { break }
      let (locked, _) = queue.state.compareExchange(
        expected: 0, desired: SerialState.syncLocked, ordering: .sequentiallyConsistent)
      guard locked else { break }
      queue.syncChainNext = nil
      previous?.syncChainNext = Unmanaged.passUnretained(queue)
      previous = queue
      let next = queue.target!
      // The lane is known only at the chain's end, so a chain of a lower lane is locked and
      // then released: a path that then queues its work anyway (`Priority` sorts the
      // higher lane first).
      if case .root(let priority, _) = next.kind {
        if priority <= lowestPriority { return true }
        break
      }
      queue = next
    }
    // Undo the locks taken (linked from `self` to `previous`).
    if previous != nil { unlockSyncChain() }
    return false
  }

  /// Takes SYNC_LOCKED on this serial queue, each serial queue up its chain and the main
  /// queue at its end, if all are idle; returns false holding nothing otherwise (or if the
  /// chain ends at a global queue). Main loop thread only: holding the main queue is only
  /// right on the main thread.
  ///
  /// The serial queues locked are linked as in `trySyncLockChain`; the main queue is not
  /// part of the links (the caller releases it with `releaseSyncLock`).
  func tryClaimChainEndingAtMain() -> Bool {
    var queue = self
    var previous: Queue? = nil
    while true {
      guard queue.isSerialLike, queue.serialLooksEmpty else { break }
      let (locked, _) = queue.state.compareExchange(
        expected: 0, desired: SerialState.syncLocked, ordering: .sequentiallyConsistent)
      guard locked else { break }
      if queue.kind == .main { return true }
      queue.syncChainNext = nil
      previous?.syncChainNext = Unmanaged.passUnretained(queue)
      previous = queue
      guard let next = queue.target else { break }
      queue = next
    }
    // Undo the serial locks taken (the main queue is never locked when we get here).
    if previous != nil { unlockSyncChain() }
    return false
  }

  /// Takes SYNC_LOCKED on this serial queue if it is idle: nothing queued, nothing holding
  /// or blocking it. For a queue whose target is a global queue (nothing else to lock); the
  /// caller releases with `releaseSyncLock`.
  @inline(__always)
  func trySyncLock() -> Bool {
    // Relaxed emptiness checks: a hint only, so that a `sync` does not overtake items that
    // are queued but whose drain is not scheduled yet (a submitter between its push and its
    // `wakeUp`). A node pushed after these loads is never stranded: its submitter's `wakeUp`
    // either schedules first (the CAS below fails) or sees SYNC_LOCKED, and then
    // `releaseSyncLock` finds the node.
    guard serialLooksEmpty else { return false }
    // Acquiring: taking the lock must see everything the previous holder (a drainer clearing
    // SCHEDULED, a `sync` clearing SYNC_LOCKED, both with a sequentially consistent RMW)
    // did while it held the queue: its counter stores. No stronger
    // order is needed on the way in: the lock-out of submitters is argued entirely on the
    // release side (`releaseSyncLock`). (On x86 every CAS is the same `lock cmpxchg`.)
    return state.compareExchange(
      expected: 0, desired: SerialState.syncLocked, ordering: .acquiring
    ).exchanged
  }

  /// Releases this queue's SYNC_LOCKED (taken alone, target is global).
  ///
  /// Why nothing submitted meanwhile is stranded (Dekker's pattern, as for SCHEDULED in
  /// step 3 above): a submitter appends its node to `incoming` (a sequentially consistent
  /// exchange), then `wakeUp` loads the state (sequentially consistent); this thread
  /// subtracts SYNC_LOCKED (a sequentially consistent RMW), then loads `incoming`
  /// (sequentially consistent). In the single total order of those operations, either the
  /// submitter's state load comes after the subtract, and it finds the queue free and
  /// schedules it, or it comes before, and then so does its push: the load sees that node
  /// or a later value, which is nil only after a drainer's compare-and-swap took the last
  /// item. (Items left in the list: a drainer stopped by `suspend` left them there; a
  /// `resume` whose `wakeUp` found this lock held relies on the same check.)
  ///
  /// One atomic RMW: the subtract (`lock sub` on x86; an exchange cannot be used, since
  /// `suspend` may add to the word meanwhile). The load after it is an L1 hit behind a
  /// locked instruction; folding the check into the RMW's old value (a PENDING bit that
  /// submitters set when they find SYNC_LOCKED) measured no faster on x86, so the simpler
  /// protocol stays.
  @inline(__always)
  func releaseSyncLock() {
    state.wrappingSubtract(SerialState.syncLocked, ordering: .sequentiallyConsistent)
    if serialHasPendingItems { wakeUpOutOfLine() }
  }

  /// `wakeUp`, not inlined: for fast paths that rarely need it (their callers stay small
  /// enough to be inlined themselves).
  @inline(never)
  func wakeUpOutOfLine() { wakeUp() }

  /// Releases the SYNC_LOCKED bits that `trySyncLockChain` or `tryClaimChainEndingAtMain`
  /// took, starting with this queue and following `syncChainNext` (not `target`, which may
  /// have changed meanwhile). The main queue, if claimed, is released separately.
  func unlockSyncChain() {
    var queue: Queue? = self
    while let current = queue {
      // Read the link before the release: afterwards another thread may lock the queue
      // and overwrite it.
      let next = current.syncChainNext?.takeUnretainedValue()
      current.breakSyncStreak()  // A `sync` through a child queue breaks a streak too.
      current.state.wrappingSubtract(
        SerialState.syncLocked, ordering: .sequentiallyConsistent)
      if current.serialHasPendingItems { current.wakeUp() }
      queue = next
    }
  }

  /// Traps if `sync` onto this queue from the calling thread could never return.
  func checkSyncDeadlock(barrier: Bool) {
    var queue: Queue? = self
    while let current = queue {
      if case .root = current.kind { return }
      if current.kind == .main && EventLoop.main.isInLoopThread
        && !ThreadFrame.holds(current, exclusiveOnly: true)
      {
        clientBug(
          "sync onto queue \"\(label)\", which runs on the main thread, from the main thread "
            + "outside the main queue: the main loop could never run it (deadlock)")
      }
      // A wide serial queue (`Queue+Wide.swift`) runs shared items as a concurrent one does.
      let shares = current.kind == .concurrent || current.isWide
      let exclusiveOnly = !(current === self && barrier && shares)
      if ThreadFrame.holds(current, exclusiveOnly: exclusiveOnly || !shares) {
        if current === self {
          clientBug("sync onto queue \"\(label)\" already owned by this thread (deadlock)")
        }
        clientBug(
          "sync onto queue \"\(label)\" whose target queue \"\(current.label)\" is already owned by this thread (deadlock)"
        )
      }
      queue = current.target
    }
  }

  /// Waits for a turn on a busy queue, then runs `body` on the calling thread.
  ///
  /// On a concurrent queue whose target is global, the turn is handed straight to the
  /// caller, which runs `body` and then releases the slot itself: no worker is tied up. On
  /// one whose target is a custom concurrent queue, the caller also takes its slot on the
  /// target itself (`concurrentSyncThroughTarget`, which idle queues reach too: `_sync` has
  /// no fast path for them). Otherwise the thread that reaches the waiter holds the queue
  /// (and its target chain) until `body` has run (`SyncWaiter.handOff`).
  func syncSlow(barrier: Bool, _ body: () -> Void) {
    checkSyncDeadlock(barrier: barrier)
    switch kind {
    case .serial where isWide:
      // `Queue+Wide.swift`, step 5: through the front, in order, for a slot of the back.
      let direct = targetIsRoot.load(ordering: .relaxed)
      let waiter = direct ? SyncWaiter.reusable() : SyncWaiter(callerReleasesSlot: false)
      serialEnqueue(.syncWaiter(waiter, barrier: barrier))
      runSharedTurn(of: waiter, barrier: barrier, body)
    case .serial, .main:
      let waiter = SyncWaiter(callerReleasesSlot: false)
      serialEnqueue(.syncWaiter(waiter, barrier: barrier))
      waiter.turn.wait()
      if isWide {
        // Queued before the switch, handed its turn by a worker of the back: one slot.
        ThreadFrame.with(self, exclusive: barrier, body)
      } else {
        withChainFrames(body)
      }
      waiter.done.signal()
    case .concurrent:
      let direct = targetIsRoot.load(ordering: .relaxed)
      if !direct, let target, target.kind == .concurrent {
        concurrentSyncThroughTarget(target, barrier: barrier, body)
        return
      }
      let waiter = direct ? SyncWaiter.reusable() : SyncWaiter(callerReleasesSlot: false)
      concurrentEnqueue(.syncWaiter(waiter, barrier: barrier))
      runSharedTurn(of: waiter, barrier: barrier, body)
    case .root:
      internalBug("syncSlow on a global queue")
    }
  }

  /// The caller's side of a `sync` waiter of a concurrent queue (or a wide serial queue's
  /// back): waits for its turn, runs `body` in a frame that holds one slot (the whole queue,
  /// for a barrier), then gives the slot back itself (`callerReleasesSlot`) or tells the
  /// worker holding it for the caller that it is done.
  private func runSharedTurn(of waiter: SyncWaiter, barrier: Bool, _ body: () -> Void) {
    waiter.turn.wait()
    // Its one word is spent: the thread's spare again (see `SyncWaiter.reusable`).
    if waiter.callerReleasesSlot { waiter.putBack() }
    ThreadFrame.with(self, exclusive: barrier, body)
    if waiter.callerReleasesSlot {
      concurrentFinished(barrier: barrier)
    } else {
      waiter.done.signal()
    }
  }

  // MARK: suspend / resume / activate

  func serialSuspend() {
    let previous = state.wrappingAdd(SerialState.suspendOne, ordering: .sequentiallyConsistent)
      .oldValue
    if previous & SerialState.wide != 0 { copySuspensionToBack() }
  }

  func serialResume() {
    var current = state.load(ordering: .sequentiallyConsistent)
    while true {
      if current & SerialState.suspendMask == 0 {
        if current & SerialState.inactive != 0 {
          serialActivate()
          return
        }
        clientBug("resume() on queue \"\(label)\" that is not suspended (over-resume)")
      }
      let (exchanged, original) = state.compareExchange(
        expected: current, desired: current - SerialState.suspendOne,
        ordering: .sequentiallyConsistent)
      if exchanged { break }
      current = original
    }
    if current & SerialState.wide != 0 { copySuspensionToBack() }
    if serialHasPendingItems { wakeUp() }
  }

  func serialActivate() {
    let previous = state.bitwiseAnd(~SerialState.inactive, ordering: .sequentiallyConsistent)
      .oldValue
    if previous & SerialState.inactive != 0 && serialHasPendingItems { wakeUp() }
  }
}
