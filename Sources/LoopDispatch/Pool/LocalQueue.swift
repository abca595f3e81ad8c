import Synchronization

/// A worker's own run queue for one lane: a fixed ring of `JobNode` pointers that the owner
/// pushes and pops without contention and that idle workers steal half of.
///
/// The shape is tokio's local queue. `tail` is written by the owner only. `head` packs two
/// 32-bit positions, STEAL (high) and REAL (low): jobs in [REAL, tail) are queued; a thief
/// claims [STEAL, REAL') by moving REAL forward while STEAL stays, copies the claimed
/// pointers out, then sets STEAL = REAL. While STEAL ≠ REAL a steal is in progress and other
/// thieves back off; the owner keeps popping (it moves only REAL).
///
/// Invariants:
/// 1. Slots in [STEAL, tail) are never overwritten: the owner pushes only while
///    `tail − STEAL < capacity`, so a thief's claimed slots stay intact until it copied them.
/// 2. A job is taken by exactly one party: the owner's pop and a thief's claim both move REAL
///    with a compare-and-swap on `head`.
/// 3. Slot contents are published by the owner's releasing store of `tail` and read after
///    an acquiring load of it (thieves) or by the owner itself.
/// Positions wrap modulo 2^32; the ring's capacity is a power of two far below that.
///
/// A non-copyable value kept in memory the worker allocates once (`Worker.local`): its
/// methods borrow it in place, so using it costs no reference counting.
///
/// Cache lines: one lane is exactly `lineSize` (128) bytes, and `Worker` allocates its lanes
/// at a 128-byte boundary (`allocateLanes`), so each lane's `head` and `tail` are alone on
/// their 128-byte block: a thief's compare-and-swap on one lane's head does not take the line
/// holding the owner's other lanes. 128, not 64: x86's adjacent-line prefetcher fetches
/// 64-byte lines in aligned pairs, so two writers 64 bytes apart still disturb each other.
/// The ring is allocated at a 128-byte boundary too, so no other allocation shares its first
/// or last line. `PoolLayoutTests` checks both.
struct LocalQueue: ~Copyable {

  static let capacity: UInt32 = 256
  private static let mask = capacity - 1
  /// The block one lane fills, and the alignment of the lanes and of the ring.
  static let lineSize = 128

  /// Atomic. STEAL << 32 | REAL.
  private let head = Atomic<UInt64>(0)
  /// Atomic. One past the newest job; written by the owner only.
  private let tail = Atomic<UInt32>(0)
  /// The ring: node pointers as integers. Allocated once; freed only by a worker object's
  /// deinit (`deallocateRing`), which plain workers never reach (they are kept for the
  /// process's life, see `WorkerPool.workerTable`).
  private let slots: UnsafeMutablePointer<Atomic<UInt>>
  /// Fills the lane to `lineSize` bytes (24 used): the next lane starts on the next block.
  private let padding:
    (
      UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
      UInt64, UInt64
    ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

  init() {
    // Safe: a fresh allocation of `capacity` words, bound to the type it is initialised as.
    slots = UnsafeMutableRawPointer.allocate(
      byteCount: Int(Self.capacity) * MemoryLayout<Atomic<UInt>>.stride, alignment: Self.lineSize
    ).bindMemory(to: Atomic<UInt>.self, capacity: Int(Self.capacity))
    for index in 0..<Int(Self.capacity) { (slots + index).initialize(to: Atomic(0)) }
  }

  /// Frees the ring. Only a deinitialising worker calls this: no thread can reach the lane.
  func deallocateRing() {
    // Safe: `slots` came from init's allocation of `capacity` words, all initialised, and
    // nothing reads them any more.
    slots.deinitialize(count: Int(Self.capacity))
    UnsafeMutableRawPointer(slots).deallocate()
  }

  /// `count` lanes, initialised, starting at a `lineSize` boundary (see the type's comment).
  /// Freed with `deallocate()` (Swift's allocation is aligned-allocation compatible).
  static func allocateLanes(_ count: Int) -> UnsafeMutablePointer<LocalQueue> {
    // Safe: a fresh allocation of `count` strides, bound to the type it is initialised as.
    let lanes = UnsafeMutableRawPointer.allocate(
      byteCount: Swift.max(1, count) * MemoryLayout<LocalQueue>.stride, alignment: lineSize
    ).bindMemory(to: LocalQueue.self, capacity: Swift.max(1, count))
    for lane in 0..<count { (lanes + lane).initialize(to: LocalQueue()) }
    return lanes
  }

  @inline(__always)
  private static func unpack(_ word: UInt64) -> (steal: UInt32, real: UInt32) {
    (UInt32(truncatingIfNeeded: word >> 32), UInt32(truncatingIfNeeded: word))
  }

  @inline(__always)
  private static func pack(steal: UInt32, real: UInt32) -> UInt64 {
    UInt64(steal) << 32 | UInt64(real)
  }

  /// Jobs queued (a snapshot; any thread).
  @inline(__always)
  var count: Int {
    // Sequentially consistent: the parking re-check reads it (see `push`).
    let (_, real) = Self.unpack(head.load(ordering: .sequentiallyConsistent))
    return Int(Int32(bitPattern: tail.load(ordering: .sequentiallyConsistent) &- real))
  }

  @inline(__always)
  var isEmpty: Bool { count <= 0 }

  /// Appends `node`; false (nothing done) if the ring is full. Owner only.
  @inline(__always)
  func push(_ node: JobNodePointer) -> Bool {
    let end = tail.load(ordering: .relaxed)
    let (steal, _) = Self.unpack(head.load(ordering: .acquiring))
    guard end &- steal < Self.capacity else { return false }  // Invariant 1.
    slots[Int(end & Self.mask)].store(node.nodeBits, ordering: .relaxed)
    // Sequentially consistent: invariant 3 (it releases), and one side of the parking
    // Dekker pair (`WorkerPool+Parking.swift`): a worker that announces itself idle then
    // checks the queues either sees this job, or this submitter's `notifyWork` sees it idle.
    tail.store(end &+ 1, ordering: .sequentiallyConsistent)
    return true
  }

  /// Free slots for the owner now: the ring minus [STEAL, tail), which a thief that claimed
  /// jobs and has not finished copying them may still be reading (invariant 1). A thief
  /// stalled mid-steal keeps STEAL back however far the owner pops, so this can be small
  /// even when the queue is empty. Owner only.
  @inline(__always)
  var room: Int {
    let (steal, _) = Self.unpack(head.load(ordering: .acquiring))
    return Int(Self.capacity &- (tail.load(ordering: .relaxed) &- steal))
  }

  /// Writes `node` `offset` places past the tail without publishing it (see
  /// `publishStaged`). The caller stages at most `room` jobs (invariant 1). Owner only.
  @inline(__always)
  func stage(_ node: JobNodePointer, at offset: Int) {
    let end = tail.load(ordering: .relaxed) &+ UInt32(truncatingIfNeeded: offset)
    slots[Int(end & Self.mask)].store(node.nodeBits, ordering: .relaxed)
  }

  /// Publishes `count` staged jobs with one store. Owner only.
  @inline(__always)
  func publishStaged(_ count: Int) {
    let end = tail.load(ordering: .relaxed)
    // Sequentially consistent (a releasing exchange on x86): invariant 3, and one side of
    // the parking Dekker pair like every push (`WorkerPool+Parking.swift`).
    tail.store(end &+ UInt32(truncatingIfNeeded: count), ordering: .sequentiallyConsistent)
  }

  /// Takes the oldest job. Owner only.
  @inline(__always)
  func pop() -> JobNodePointer? {
    var word = head.load(ordering: .acquiring)
    let end = tail.load(ordering: .relaxed)
    while true {
      let (steal, real) = Self.unpack(word)
      if real == end { return nil }
      let nextReal = real &+ 1
      // With no steal in progress STEAL follows REAL.
      let desired = Self.pack(steal: steal == real ? nextReal : steal, real: nextReal)
      let (exchanged, original) = head.compareExchange(
        expected: word, desired: desired, ordering: .acquiringAndReleasing)
      if exchanged {
        // Safe: the slot is ours (invariant 2) and intact (invariant 1).
        return JobNodePointer(nodeBits: slots[Int(real & Self.mask)].load(ordering: .relaxed))
      }
      word = original
    }
  }

  /// Takes every queued job out, oldest first, handing each to `body` (the supervisor's
  /// rescue of a worker stuck in one job: `WorkerPool.rescueStrandedLocalQueues`). Claims
  /// them as a thief does, so the owner and other thieves stay correct. Returns how many;
  /// 0 if another thief is at work. Any thread but the owner.
  func evacuate(_ body: (JobNodePointer) -> Void) -> Int {
    var word = head.load(ordering: .acquiring)
    var claimed: UInt32 = 0
    var start: UInt32 = 0
    while true {
      let (steal, real) = Self.unpack(word)
      if steal != real { return 0 }
      let end = tail.load(ordering: .acquiring)
      let available = end &- real
      if available == 0 || available > Self.capacity { return 0 }
      claimed = available
      start = real
      countSharedWrite(.rescue)  // The owner's head.
      let (exchanged, original) = head.compareExchange(
        expected: word, desired: Self.pack(steal: steal, real: real &+ claimed),
        ordering: .acquiringAndReleasing)
      if exchanged {
        word = Self.pack(steal: steal, real: real &+ claimed)
        break
      }
      word = original
    }
    for offset in 0..<claimed {
      // Safe: claimed (invariant 2) and intact (invariant 1) until the steal ends below.
      body(
        JobNodePointer(nodeBits: slots[Int((start &+ offset) & Self.mask)].load(ordering: .relaxed))
      )
    }
    endSteal(from: word, path: .rescue)
    return Int(claimed)
  }

  /// Ends a steal whose claim left `head` at `word`: STEAL catches up with REAL (which the
  /// owner may have moved meanwhile), so the claimed slots may be reused. The thief only.
  private func endSteal(from claimedWord: UInt64, path: SharedWritePath) {
    var word = claimedWord
    while true {
      let (_, real) = Self.unpack(word)
      countSharedWrite(path)  // The owner's head.
      let (exchanged, original) = head.compareExchange(
        expected: word, desired: Self.pack(steal: real, real: real),
        ordering: .acquiringAndReleasing)
      if exchanged { return }
      word = original
    }
  }

  /// Steals half the jobs (rounded up) for `thief`: returns the oldest and appends the rest
  /// to `destination` (the thief's own queue of the same lane, which must be empty). Nil if
  /// there was nothing to take or another thief is at work. Any worker but the owner.
  func steal(into destination: borrowing LocalQueue) -> JobNodePointer? {
    // Room in the destination for all but the first job (invariant 1 there: a steal from
    // the destination may still be copying its older slots).
    let (destinationSteal, _) = Self.unpack(destination.head.load(ordering: .acquiring))
    let room = Self.capacity &- (destination.tail.load(ordering: .relaxed) &- destinationSteal)
    var word = head.load(ordering: .acquiring)
    var claimed: UInt32 = 0
    var start: UInt32 = 0
    while true {
      let (steal, real) = Self.unpack(word)
      if steal != real { return nil }  // Another thief is copying.
      let end = tail.load(ordering: .acquiring)
      let available = end &- real
      if available == 0 || available > Self.capacity { return nil }
      claimed = Swift.min(available - available / 2, room &+ 1)
      start = real
      let desired = Self.pack(steal: steal, real: real &+ claimed)
      countSharedWrite(.steal)  // The victim's head.
      let (exchanged, original) = head.compareExchange(
        expected: word, desired: desired, ordering: .acquiringAndReleasing)
      if exchanged {
        word = desired
        break
      }
      word = original
    }
    // Copy the claimed slots (intact by invariant 1) into the destination, which only the
    // calling thief owns.
    let first = JobNodePointer(nodeBits: slots[Int(start & Self.mask)].load(ordering: .relaxed))
    if claimed > 1 {
      let destinationEnd = destination.tail.load(ordering: .relaxed)
      for offset in 1..<claimed {
        let bits = slots[Int((start &+ offset) & Self.mask)].load(ordering: .relaxed)
        destination.slots[Int((destinationEnd &+ offset &- 1) & Self.mask)].store(
          bits, ordering: .relaxed)
      }
      // Sequentially consistent: a publication in the parking Dekker pair, as `push`.
      destination.tail.store(destinationEnd &+ claimed &- 1, ordering: .sequentiallyConsistent)
    }
    endSteal(from: word, path: .steal)
    countPoolEvent(.steal)
    return first
  }
}

extension LocalQueue {
  /// The addresses of the words other threads write or read per job: `head` (the owner's
  /// pop and a thief's compare-and-swap) and `tail` (the owner's push, read by thieves and
  /// spinners), and of the ring (for `PoolLayoutTests`).
  func hotWordAddresses() -> (head: UInt, tail: UInt, slots: UInt) {
    (
      withUnsafePointer(to: head) { UInt(bitPattern: $0) },
      withUnsafePointer(to: tail) { UInt(bitPattern: $0) },
      UInt(bitPattern: slots)
    )
  }
}
