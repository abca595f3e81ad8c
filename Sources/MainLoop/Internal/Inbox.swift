import Synchronization

/// A closure posted to the inbox.
typealias InboxJob = @Sendable () -> Void

/// A slot's closure, wrapped in a struct: stored through a generic pointer to the bare
/// function type, a closure would be re-abstracted, costing a thunk allocation per post.
struct InboxSlotJob {
  var run: InboxJob
}

/// A lock-free multi-producer, single-consumer inbox of closures, kept in a chain of blocks
/// of slots (one allocation per ``InboxBlock/capacity`` posts, none per post).
///
/// The tail is one word: the address of the tail block (blocks are aligned to
/// ``InboxBlock/alignment``) with the offset of its next unclaimed slot in the low bits. A
/// block's slots are claimed in order 0, 1, …, capacity − 1; the claim of the last slot moves
/// the tail to a fresh block in the same compare-exchange, so the tail never names a full block
/// and no producer ever waits for another.
///
/// A push (any thread):
/// 1. Load the tail word (relaxed: nothing is read through it before step 2 validates it).
/// 2. Compare-exchange the tail word (sequentially consistent; the Dekker half of the wake-up
///    protocol in `EventLoop+Execute.swift`): offset k becomes k + 1 or, when k is the last
///    slot, the word becomes (fresh block, 0), the fresh block having been allocated and
///    initialised before the exchange. Success is the claim of slot k of block b; failure
///    retries with the word read (some other producer claimed, so the system progressed).
/// 3. The claimer of the last slot links `b.next` to the fresh block.
/// 4. Write the closure into slot k, then store its ready flag (releasing). That store is the
///    producer's last access to `b`.
///
/// The consumer (the loop thread only):
/// 5. `collect` loads the tail word (sequentially consistent; the consumer's half of the
///    Dekker pairing) as the end of this turn's snapshot. Posts claimed later wait for a
///    later turn.
/// 6. `runBacklog` visits slots from its head to the snapshot's end, in order, never skipping
///    one: it loads the slot's ready flag (acquiring); if it is not yet set (a producer
///    between steps 2 and 4) it stops and `hasBacklog` stays true, so the loop re-polls; else
///    it moves the closure out, and after the last slot of a block it follows `next` and
///    frees the block, then runs the closure.
///
/// Why freeing a block in step 6 is safe (no use-after-free, no ABA):
/// 1. A producer dereferences a block only after its exchange (step 2) succeeded on a word
///    naming that block, and then only in steps 3–4; the ready store is its last access.
/// 2. A producer whose exchange fails dereferences nothing. A stale word naming a block that
///    was freed (or freed and its address reused) is therefore harmless: the exchange fails,
///    or it succeeds because at that instant the tail names a live block at that address with
///    that offset — a genuine claim on that block. Nothing read before the exchange is used
///    after it except the producer's own fresh block, so ABA on the tail word is benign.
/// 3. Each slot is claimed exactly once: the tail's offset in a block only rises, the claim
///    of the last slot moves the tail to a newly allocated block, and an address can name the
///    tail again only after its block was freed, that is, as a new block.
/// 4. The consumer frees a block only after it has seen all `capacity` ready flags set
///    (acquiring loads, step 6): one per claiming producer (3), each that producer's last
///    access (1), so everything every producer did to the block happens-before the free.
///    Producers that never claimed in it never touch it (2). So a block is freed exactly when
///    both sides are done with it: all `capacity` producers have finished writing, and the
///    consumer has moved the last closure out.
/// 5. The consumer reads `next` only after acquiring the last slot's ready flag, stored by the
///    same producer after it linked `next` (step 3), so the link is there.
/// 6. `deinit` runs when no producer can be inside `push` (each holds a strong reference to
///    the loop, which owns the inbox), so every claimed slot is ready: it releases the unrun
///    closures without running them and frees every block.
///
/// Progress: producers are lock-free (a failed exchange means another producer's succeeded)
/// and never wait for each other or for the consumer. The consumer may find a claimed slot not
/// yet written; it then leaves it for a later turn (see step 6), which in the rare case of a
/// producer preempted inside those few instructions means extra loop turns until it resumes.
///
/// Who may touch what: `tail` is atomic and shared; `head` and `snapshotEnd` belong to the
/// single consumer (the loop thread); a block's slots belong to their claimer until the ready
/// flag is set, then to the consumer.
final class Inbox: @unchecked Sendable {
  // @unchecked Sendable: `tail` is atomic; the consumer-only words are touched only on the
  // loop thread (or in deinit); blocks are shared as the walk-through above describes.

  /// Atomic. The tail word (see the type's documentation). Allocated on its own cache lines,
  /// away from the consumer's words, which change on every item run.
  private let tail: UnsafeMutablePointer<Atomic<UInt>>

  /// Only touched by the consumer. The word of the next slot to run (block address | offset).
  private var head: UInt
  /// Only touched by the consumer. The tail word loaded by the last `collect`.
  private var snapshotEnd: UInt

  init() {
    let first = InboxBlock.allocate()
    // Safe: 128 bytes aligned to 128 cover the atomic and keep other data off its lines.
    let raw = UnsafeMutableRawPointer.allocate(byteCount: 128, alignment: 128)
    tail = raw.bindMemory(to: Atomic<UInt>.self, capacity: 1)
    tail.initialize(to: Atomic(first.word))
    head = first.word
    snapshotEnd = first.word
  }

  deinit {
    // Step 6 of the reclamation argument: no push is in progress, every claimed slot is
    // ready. Release unrun closures without running them; free every block.
    collect()
    var word = head
    while word != snapshotEnd {
      let block = InboxBlock(word: word)
      let offset = InboxBlock.offset(of: word)
      if !block.ready(offset).pointee.load(ordering: .acquiring) {
        internalBug("inbox slot claimed but never written at deallocation")
      }
      block.job(offset).deinitialize(count: 1)
      word = advance(from: word, in: block, offset: offset)
    }
    InboxBlock(word: snapshotEnd).deallocate()
    // Safe: the tail atomic is trivial and no producer can reach it any more.
    UnsafeMutableRawPointer(tail).deallocate()
  }

  /// Pushes `job`. Safe from any thread; lock-free. The claiming compare-exchange is
  /// sequentially consistent, so that a producer's following load of the loop's wake flag
  /// pairs with the consumer's store-then-`collect` (the Dekker pattern documented in
  /// `EventLoop+Execute.swift`).
  @inline(__always)
  func push(_ job: @escaping InboxJob) {
    // Relaxed: the exchange below validates the word; nothing is read through it before.
    var word = tail.pointee.load(ordering: .relaxed)
    while InboxBlock.offset(of: word) != InboxBlock.lastOffset {
      // Sequentially consistent: the claim; pairs with the consumer's load in `collect` (and,
      // through the single total order, with its wake-flag store; see EventLoop+Execute).
      // Also acquiring, so the block's initialisation by its installer is visible. Failure is
      // relaxed: a failed claim dereferences nothing.
      let (claimed, current) = tail.pointee.weakCompareExchange(
        expected: word, desired: word &+ 1,
        successOrdering: .sequentiallyConsistent, failureOrdering: .relaxed)
      if claimed {
        publish(job, at: word)
        return
      }
      word = current
    }
    pushCrossingBlockSlow(job, observed: word)
  }

  /// The claim when the tail is at a block's last slot: install a fresh block in the same
  /// exchange. Falls back to an ordinary claim if another producer got there first.
  @inline(never)
  private func pushCrossingBlockSlow(_ job: @escaping InboxJob, observed: UInt) {
    let fresh = InboxBlock.allocate()
    var word = observed
    while true {
      let isLast = InboxBlock.offset(of: word) == InboxBlock.lastOffset
      // Sequentially consistent, as in `push`; as a release it also publishes the fresh
      // block's initialisation to producers that claim in it (their acquiring exchange).
      let (claimed, current) = tail.pointee.weakCompareExchange(
        expected: word, desired: isLast ? fresh.word : word &+ 1,
        successOrdering: .sequentiallyConsistent, failureOrdering: .relaxed)
      if claimed {
        if isLast {
          // Releasing; pairs with the acquiring load in `advance`. (The consumer reads it only
          // after acquiring this slot's ready flag, stored below, which orders it already.)
          InboxBlock(word: word).next.pointee.store(fresh.word, ordering: .releasing)
        } else {
          // Safe: never published, so no other thread has seen it.
          fresh.deallocate()
        }
        publish(job, at: word)
        return
      }
      word = current
    }
  }

  /// Step 4: writes the closure into the claimed slot and marks it ready.
  @inline(__always)
  private func publish(_ job: @escaping InboxJob, at word: UInt) {
    let block = InboxBlock(word: word)
    let offset = InboxBlock.offset(of: word)
    // Safe: the slot is exclusively ours (claimed once, step 2) until the ready flag is set.
    block.job(offset).initialize(to: InboxSlotJob(run: job))
    // Releasing; pairs with the acquiring load in `runBacklog`. Our last access to the block.
    block.ready(offset).pointee.store(true, ordering: .releasing)
  }

  /// Ends this turn's snapshot at the current tail: `runBacklog` runs posts claimed before
  /// now, later ones wait for a later turn. Consumer only.
  func collect() {
    // Sequentially consistent: pairs with the producers' claiming exchange (see `push`).
    snapshotEnd = tail.pointee.load(ordering: .sequentiallyConsistent)
  }

  /// Whether collected posts remain to run (some may still be mid-write). Consumer only.
  var hasBacklog: Bool { head != snapshotEnd }

  /// Whether any post (collected or not) waits to run; a cheap relaxed look for spinning.
  /// Consumer only.
  var hasPosts: Bool { head != tail.pointee.load(ordering: .relaxed) }

  /// `hasPosts`, with the sequentially consistent load that pairs with the producers' claim
  /// (the sleep check of `EventLoop+Execute.swift`). Consumer only.
  var hasPostsSequentiallyConsistent: Bool {
    head != tail.pointee.load(ordering: .sequentiallyConsistent)
  }

  /// Runs up to `limit` collected posts in order; returns how many ran. Stops early at a
  /// claimed slot whose closure is not yet written. Consumer only.
  func runBacklog(limit: Int) -> Int {
    var ran = 0
    var word = head
    while ran < limit && word != snapshotEnd {
      let block = InboxBlock(word: word)
      let offset = InboxBlock.offset(of: word)
      // Acquiring; pairs with the releasing store in `publish`.
      guard block.ready(offset).pointee.load(ordering: .acquiring) else { break }
      // Move the closure out (and free a finished block) before running it.
      let job = block.job(offset).move().run
      word = advance(from: word, in: block, offset: offset)
      job()
      ran += 1
    }
    // Once per batch, not per item: this object's line also holds `tail`, which every push
    // reads. (A closure cannot re-enter here: a nested run of the loop traps.)
    head = word
    return ran
  }

  /// The word after `word`; past a block's last slot, follows `next` and frees the block.
  /// Consumer only; the slot at `word` must already have been seen ready.
  @inline(__always)
  private func advance(from word: UInt, in block: InboxBlock, offset: Int) -> UInt {
    guard offset == InboxBlock.lastOffset else { return word &+ 1 }
    // Acquiring; pairs with the releasing store in `pushCrossingBlockSlow`.
    let next = block.next.pointee.load(ordering: .acquiring)
    // Safe: all `capacity` ready flags have been seen (reclamation steps 4 and 5).
    block.deallocate()
    return next
  }
}

/// A view of one inbox block: a header (the `next` link) followed by `capacity` slots, each a
/// ready flag and a closure, in one allocation aligned to `alignment`.
struct InboxBlock {
  /// Slots per block.
  static let capacity = 1024
  /// The offset of the last slot.
  static let lastOffset = capacity - 1
  /// Block alignment: at least `capacity`, so the offset fits in the address's zero bits.
  static let alignment = 1024
  /// The bits of a tail word holding the slot offset.
  static let offsetMask = UInt(alignment - 1)
  /// Where the slots start: the header keeps a cache line of its own.
  static let slotsStart = 64
  /// A slot: the ready flag, then the closure at its natural alignment.
  static let jobOffset = MemoryLayout<InboxSlotJob>.alignment
  static let slotStride = jobOffset + MemoryLayout<InboxSlotJob>.stride
  static let byteCount = slotsStart + capacity * slotStride

  /// The block's first byte.
  let base: UnsafeMutableRawPointer

  /// The block a tail or head word names.
  @inline(__always)
  init(word: UInt) {
    // Safe: every word handled here was made from a live block's aligned address.
    base = UnsafeMutableRawPointer(bitPattern: word & ~InboxBlock.offsetMask).unsafelyUnwrapped
  }

  private init(base: UnsafeMutableRawPointer) { self.base = base }

  /// The word naming slot 0 of this block.
  var word: UInt { UInt(bitPattern: base) }

  /// The slot offset a word names.
  @inline(__always)
  static func offset(of word: UInt) -> Int { Int(word & offsetMask) }

  /// Allocates a block with an empty `next` and every ready flag clear.
  static func allocate() -> InboxBlock {
    let base = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: alignment)
    if UInt(bitPattern: base) & offsetMask != 0 { internalBug("misaligned inbox block") }
    let block = InboxBlock(base: base)
    // Safe: fresh memory, bound once per region: the header to the link, each slot's first
    // byte to its flag (the closure is bound when a producer initialises it).
    base.bindMemory(to: Atomic<UInt>.self, capacity: 1).initialize(to: Atomic(0))
    for offset in 0..<capacity {
      (base + slotsStart + offset * slotStride).bindMemory(to: Atomic<Bool>.self, capacity: 1)
        .initialize(to: Atomic(false))
    }
    return block
  }

  /// Frees the block. Its closures must have been moved out or deinitialised; the atomics
  /// are trivial and need no deinitialisation.
  func deallocate() { base.deallocate() }

  /// Atomic. The next block's word (slot 0), or 0 until the last slot's claimer links it.
  @inline(__always)
  var next: UnsafeMutablePointer<Atomic<UInt>> {
    // Safe: bound to `Atomic<UInt>` in `allocate`.
    base.assumingMemoryBound(to: Atomic<UInt>.self)
  }

  /// Atomic. Slot `offset`'s ready flag: set once its closure is written.
  @inline(__always)
  func ready(_ offset: Int) -> UnsafeMutablePointer<Atomic<Bool>> {
    // Safe: bound to `Atomic<Bool>` in `allocate`.
    (base + InboxBlock.slotsStart + offset * InboxBlock.slotStride)
      .assumingMemoryBound(to: Atomic<Bool>.self)
  }

  /// Slot `offset`'s closure: owned by its claimer until ready, then by the consumer.
  @inline(__always)
  func job(_ offset: Int) -> UnsafeMutablePointer<InboxSlotJob> {
    // Safe: a region disjoint from the flag, at the closure's alignment.
    (base + InboxBlock.slotsStart + offset * InboxBlock.slotStride + InboxBlock.jobOffset)
      .bindMemory(to: InboxSlotJob.self, capacity: 1)
  }
}
