import Synchronization

/// One global queue's lane for jobs submitted from outside the pool (the main thread, a
/// plain thread, the service loop's timers) or overflowing a worker's local queue: an
/// unbounded multi-producer queue of `JobNode`s with no lock on either side.
///
/// Producers (any thread, wait-free): count the job in `pushed`, swap the tail with the new
/// node (one exchange), then link the old tail to it. Consumers: one at a time, chosen by a
/// try-acquire of `consuming`; a worker that finds it held never waits for it (it steals or
/// spins instead), and its holder moves at most `takeLimit` jobs out before it lets go, so no
/// thread ever sleeps on this queue.
///
/// The list starts with a dummy node: `head` is always a node whose job was taken (or never
/// set), and the next job is in `head.next`. A consumer that takes that job moves it into
/// the old head node (which no producer can still write: its one producer already linked it)
/// and makes `head.next` the new dummy.
///
/// Emptiness is judged by the counts, not by comparing pointers (nodes are recycled, so a
/// pointer seen twice may be two different nodes): `pushed − taken` jobs are in the queue or
/// being linked. `pushed` is incremented before the node is visible, so the difference
/// never undercounts: a reader that sees 0 knows every counted job was taken.
///
/// A non-copyable value kept in memory the pool allocates once (`WorkerPool.injection`): its
/// methods borrow it in place, so using it costs no reference counting.
///
/// Cache lines: a lane is two 128-byte blocks, the producers' (`tail`, `pushed`) and the
/// consumers' (`consuming`, `taken`, `head`), and the lanes are allocated at a 128-byte
/// boundary (`allocateLanes`): a consumer's claim takes neither its own lane's producer line
/// nor the next lane's. 128, not 64: x86's adjacent-line prefetcher moves 64-byte lines in
/// pairs. `PoolLayoutTests` checks it.
struct InjectionQueue: ~Copyable {

  /// Producers' side. Atomic: the newest node.
  private let tail: Atomic<UInt>
  /// Atomic. Jobs ever pushed (sequentially consistent: one side of the parking Dekker pair,
  /// see `WorkerPool+Parking.swift`).
  let pushed = Atomic<UInt64>(0)
  /// Fills the producers' block to 128 bytes (16 used).
  private let padding:
    (
      UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
      UInt64, UInt64, UInt64
    ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
  /// Atomic. Held (true) by the one consumer taking jobs now.
  private let consuming = Atomic<Bool>(false)
  /// Atomic. Jobs ever taken (written only by the holder of `consuming`).
  let taken = Atomic<UInt64>(0)
  /// Atomic (relaxed: only the holder of `consuming` touches it, ordered by that flag's
  /// acquire and release). The dummy node.
  private let head: Atomic<UInt>
  /// Fills the consumers' block to 128 bytes (24 used): the next lane starts on a block.
  private let consumerPadding:
    (
      UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
      UInt64, UInt64
    ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

  /// The size of one block, and the lanes' alignment.
  static let blockSize = 128

  /// `count` lanes, initialised, starting at a `blockSize` boundary (see the type's comment).
  static func allocateLanes(_ count: Int) -> UnsafeMutablePointer<InjectionQueue> {
    // Safe: a fresh allocation of `count` strides, bound to the type it is initialised as.
    let lanes = UnsafeMutableRawPointer.allocate(
      byteCount: count * MemoryLayout<InjectionQueue>.stride, alignment: blockSize
    ).bindMemory(to: InjectionQueue.self, capacity: count)
    for lane in 0..<count { (lanes + lane).initialize(to: InjectionQueue()) }
    return lanes
  }

  /// The addresses of the producers' and the consumers' words (for `PoolLayoutTests`).
  func wordAddresses() -> (producers: [UInt], consumers: [UInt]) {
    func address<T: ~Copyable>(_ value: borrowing T) -> UInt {
      // Safe: atomics cannot be copied, so the borrow is the field itself; the address is
      // only compared, never dereferenced.
      withUnsafePointer(to: value) { UInt(bitPattern: $0) }
    }
    return (
      [address(tail), address(pushed)], [address(consuming), address(taken), address(head)]
    )
  }

  /// Jobs at most that one consumer takes per acquisition.
  static let takeLimit = 64
  /// Tries of `consuming` before a consumer gives up (each after a pause instruction).
  static let acquireAttempts = 128

  init() {
    let dummy = JobNodePointer.allocate(capacity: 1)
    dummy.initialize(to: JobNode())
    head = Atomic(dummy.nodeBits)
    tail = Atomic(dummy.nodeBits)
  }

  /// Jobs pushed and not yet taken (an upper bound; exact when no push is in progress).
  @inline(__always)
  var count: Int {
    // Taken first: `taken ≤ pushed` at every instant, so reading it first cannot make the
    // difference negative.
    // Acquiring (pairs with the releasing store in `take`): the jobs counted as taken
    // were pushed, so `pushed` read next is at least as new.
    let done = taken.load(ordering: .acquiring)
    return Int(truncatingIfNeeded: pushed.load(ordering: .sequentiallyConsistent) &- done)
  }

  /// Appends `node` (its job set, owned by the caller until now). Any thread.
  @inline(__always)
  func push(_ node: JobNodePointer) {
    node.pointee.next.store(0, ordering: .relaxed)
    // Sequentially consistent: the count is what `WorkerPool.park` reads after announcing
    // itself idle (Dekker); counted before the node can be taken (see the type's comment).
    pushed.wrappingAdd(1, ordering: .sequentiallyConsistent)
    poolProbe(.link)
    // Acquiring and releasing: releases the node's contents to whoever follows the link,
    // and orders the link below after the swap.
    let previous = tail.exchange(node.nodeBits, ordering: .acquiringAndReleasing)
    // Releasing: the consumer's acquiring load of `next` then sees the node's job.
    JobNodePointer(nodeBits: previous).pointee.next.store(node.nodeBits, ordering: .releasing)
  }

  /// Appends the chain `first`...`last` of `count` nodes (their jobs set, linked through
  /// `next`, owned by the caller until now) as one push: one count, one exchange and one
  /// link for the whole chain. Any thread.
  @inline(__always)
  func pushChain(first: JobNodePointer, last: JobNodePointer, count: Int) {
    last.pointee.next.store(0, ordering: .relaxed)
    // As in `push`: counted (sequentially consistent) before any node can be taken.
    pushed.wrappingAdd(UInt64(count), ordering: .sequentiallyConsistent)
    // Acquiring and releasing, as in `push`: releases the chain's nodes and links (written
    // before, by this thread) to whoever follows the link below.
    let previous = tail.exchange(last.nodeBits, ordering: .acquiringAndReleasing)
    // Releasing: a consumer's acquiring load of this link sees every node of the chain and
    // the links between them (all written before this store). The links inside the chain
    // are never zero, so a consumer waits only here, as for a single push.
    JobNodePointer(nodeBits: previous).pointee.next.store(first.nodeBits, ordering: .releasing)
  }

  /// Takes up to `limit` jobs in order: the first is returned, the others are handed to
  /// `overflow` (the caller's local queue) in order. Returns nil without waiting if the
  /// queue is empty or another consumer holds it. Worker threads.
  @inline(__always)
  func take(limit: Int, overflow: (JobNodePointer) -> Void) -> JobNodePointer? {
    guard count > 0 else { return nil }
    // Acquiring: the previous holder's `head` and `taken` writes are visible. A holder
    // moves at most `takeLimit` jobs, a microsecond or two: worth a short wait rather than
    // a fruitless turn of the caller's loop, but never a long one (it may be preempted).
    // Test, then test-and-set: a try while the flag is held is a load (the waiting
    // consumers' copies of the line stay shared), not a compare-and-swap that takes the line
    // from the holder each time (PoolWriteCountTests: 1.2-2.6 writes per job from outside,
    // most of them failed tries, before this). A compare-and-swap fails only when another
    // consumer claimed the flag between the load and it: at most once per claim per waiter.
    var attempts = 0
    while true {
      if !consuming.load(ordering: .relaxed) {
        if consuming.compareExchange(expected: false, desired: true, ordering: .acquiring)
          .exchanged
        {
          break
        }
        countSharedWrite(.takeInjection)  // The failed try.
      }
      attempts += 1
      if attempts == Self.acquireAttempts || count <= 0 { return nil }
      spinLoopHint()
    }
    var first: JobNodePointer? = nil
    var moved = 0
    var done = taken.load(ordering: .relaxed)
    while moved < limit {
      guard let carrier = takeOne(&done) else { break }
      if first == nil { first = carrier } else { overflow(carrier) }
      moved += 1
    }
    taken.store(done, ordering: .releasing)
    // Releasing: hands `head` and `taken` to the next holder.
    consuming.store(false, ordering: .releasing)
    // The flag's claim and release, `taken`, and `head` once per job moved.
    countSharedWrite(.takeInjection, 3 + moved)
    countPoolEvent(.injectionClaim)
    countPoolEvent(.injectionJob, moved)
    return first
  }

  /// Moves the next job into the current dummy node and returns that node; nil if none is
  /// linked yet (the queue is empty, or its next job's producer has not linked it yet).
  /// Holder of `consuming` only.
  @inline(__always)
  private func takeOne(_ done: inout UInt64) -> JobNodePointer? {
    let dummy = JobNodePointer(nodeBits: head.load(ordering: .relaxed))
    let nextBits = dummy.pointee.next.load(ordering: .acquiring)
    if nextBits == 0 {
      // Nothing linked: empty, or a producer counted a job it is still linking (it may have
      // been preempted between the two). Either way nothing to take now; the caller moves
      // on rather than spin while holding `consuming` (see `Worker.main`).
      return nil
    }
    let next = JobNodePointer(nodeBits: nextBits)
    let carrier = dummy
    // Safe: `carrier` is ours (its producer linked it, nobody else writes it) and `next`'s
    // job is ours to move (we hold `consuming`); `next` stays in the queue as the dummy.
    carrier.pointee.job = next.pointee.job.take()
    carrier.pointee.enqueuedAt = next.pointee.enqueuedAt
    carrier.pointee.lane = next.pointee.lane
    head.store(next.nodeBits, ordering: .relaxed)
    done &+= 1
    return carrier
  }
}
