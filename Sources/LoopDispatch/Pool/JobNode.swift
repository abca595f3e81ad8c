import CLoopShims
import CLoopThreadSlots
import Glibc
import Synchronization

/// One pool job or serial-queue item in memory the runtime manages itself: the unit that
/// moves through injection queues, local run queues, run-next slots and serial queues'
/// item lists as a plain pointer.
///
/// Nodes are recycled (`NodeCache`): a submission takes one from the calling thread's cache
/// and the worker that ran the job gives it back to its own, so the steady state allocates
/// nothing per job. New nodes come 64 at a time in a slab (`NodeSlab`), and go back to the
/// allocator only after a burst, a slab at a time (`NodeCache`, rule 4).
///
/// Ownership: a node belongs to exactly one party at a time — the submitter until it
/// publishes the node (an exchange on an injection queue's or a serial queue's tail, a
/// release store of a local queue's tail, a slot store), then the queue, then the worker or
/// drainer that took it. Only the owner reads or writes `job`, `work` and `enqueuedAt`;
/// `next` is atomic because an injection queue's or serial queue's consumer reads it while
/// the producer that links the next node may still be writing it.
struct JobNode: ~Copyable {
  /// The job; nil while the node is free, an injection queue's dummy, or a queue item.
  var job: PoolJob?
  /// A serial queue's item (`Queue+Serial.swift`): nil unless the node is in a serial
  /// queue's list, where `next` links to the next newer node (written by the producer of
  /// that node right after its publishing exchange, releasing; 0 until then).
  var work: QueueWork?
  /// The lane (priority raw value) the job was submitted at, in one byte: it fits in the
  /// padding after `work`, which leaves the node room for `slab` within 88 bytes
  /// (`NodeSlabTests`).
  private var laneByte: UInt8 = 0
  /// `Ticks` at submission, for the global queues' wait figures.
  var enqueuedAt: UInt64 = 0
  /// The slab the node was carved from, nil for a node allocated alone (an injection
  /// queue's first dummy). Written at initialisation, never changed: any thread may read it.
  let slab: NodeSlab?
  /// The next node: in an injection queue or a serial queue's list (written by the producer
  /// that appended the following node, read by the consumer), or in a free list (owner
  /// only, relaxed).
  ///
  /// Last on purpose: ThreadSanitizer records a Swift access to `pointee` (as the owner's
  /// `node.pointee.job = ...`) at the node's first byte, so a field a producer writes
  /// concurrently (this link, on an injection queue's or a serial queue's tail) must not be
  /// there, or the
  /// owner's write to another field reads as a race.
  let next = Atomic<UInt>(0)

  init(slab: NodeSlab? = nil) { self.slab = slab }

  /// The lane (priority raw value) the job was submitted at.
  var lane: Int {
    @inline(__always) get { Int(laneByte) }
    @inline(__always) set { laneByte = UInt8(newValue) }  // A lane is 0...3.
  }
}

/// A pointer to a pool-managed node.
typealias JobNodePointer = UnsafeMutablePointer<JobNode>

extension UnsafeMutablePointer where Pointee == JobNode {
  /// The node at `bits` (a pointer stored as an integer in an atomic word).
  @inline(__always)
  init(nodeBits bits: UInt) {
    // Safe: `bits` came from `nodeBits` of a live node (callers never pass 0).
    self = UnsafeMutablePointer(bitPattern: bits)!
  }

  /// This pointer as an integer, for atomic words.
  @inline(__always)
  var nodeBits: UInt { UInt(bitPattern: self) }

  /// Moves the job out (leaving nil) and returns it with its lane and submission time.
  @inline(__always)
  func takeJob() -> (PoolJob, Int, UInt64) {
    // Safe: only the owner calls this (see `JobNode`), once per publication.
    (pointee.job.take()!, pointee.lane, pointee.enqueuedAt)
  }
}

/// A C function and its context: a `dispatch_async_f` item, carried without a closure.
package struct CFunctionCall: @unchecked Sendable {
  // @unchecked Sendable: the context is the C client's pointer, handed to exactly one call
  // of `function` on whichever thread runs the item, as libdispatch does; LoopDispatch never
  // dereferences it.
  package let function: @convention(c) (UnsafeMutableRawPointer?) -> Void
  package let context: UnsafeMutableRawPointer?

  package init(
    function: @escaping @convention(c) (UnsafeMutableRawPointer?) -> Void,
    context: UnsafeMutableRawPointer?
  ) {
    self.function = function
    self.context = context
  }

  @inline(__always)
  package func run() { function(context) }
}

/// Free nodes: a per-thread cache in front of one shared stack of chains.
///
/// Rules:
/// 1. `take` pops the calling thread's own freed nodes (`spare`), then a chain it borrowed
///    from the shared stack, then takes the whole shared stack (one exchange), and only when
///    all are empty allocates: a slab of 64 (`NodeSlab`), whose other 63 nodes become the
///    thread's borrowed chain. `give` pushes onto `spare`; at `spareLimit` nodes the whole
///    list moves to the shared stack as one chain (one compare-and-swap per `spareLimit`
///    frees). A producer that never runs jobs (the main thread submitting to workers) is
///    fed by the workers' chains: its steady state allocates nothing.
/// 2. ABA-free: the shared stack is only ever pushed (compare-and-swap of the head) and
///    emptied whole (exchange with 0); nobody pops a single node from it, so a head that was
///    removed and pushed again between a load and a compare-and-swap cannot tear the list.
/// 3. A thread that exits gives its cache to the shared stack (pthread key destructor), so
///    no node is lost with it.
/// 4. Bounded: a spare list handed over while the shared stack already holds about
///    `sharedLimit` nodes goes back to the allocator instead (`NodeSlab.release`: each slab
///    is freed once all its nodes are back), so a burst that queued millions of jobs (the
///    full-size stress suite's 10M items) does not keep their memory for the process's life.
///    What stays: up to `sharedLimit` nodes shared, `spareLimit` per thread, and the chain a
///    thread borrowed (at most what the shared stack held or a slab's 63), and the slabs
///    those nodes lie in (`NodeSlab`, rule 4).
/// 5. A borrowed chain's nodes were last written by the workers that freed them, so each is
///    a cache miss for the thread that takes it (on its `next`, then on the job the
///    submission overwrites). A submitter that never runs jobs (the main thread) takes every
///    node from such chains: each take prefetches the next node of the chain, which is then
///    in this core's cache by the next submission (perf, main thread submitting 1M capturing
///    closures: the chain walk was 22 ns of its 165 ns per item).
enum NodeCache {
  /// Nodes a thread keeps before it hands them to the shared stack.
  static let spareLimit = 256
  /// Nodes the shared stack keeps at most (about 6 MB of nodes; the slabs they lie in may
  /// hold more: `NodeSlab`, rule 4), give or take one spare list.
  static let sharedLimit = 65_536

  /// Atomic. The shared stack: the first node of a chain of chains, linked by `next`.
  private static let shared = Atomic<UInt>(0)
  /// Atomic. About how many nodes `shared` holds: added to after a push, reset by the
  /// exchange that empties it (a racing push may be counted against the next round: the
  /// figure only decides whether to keep a spare list).
  private static let sharedCount = Atomic<Int>(0)

  /// The key whose destructor flushes an exiting thread's cache (rule 3).
  private static let exitKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { _ in NodeCache.flushCallingThread() }
    if status != 0 { resourceFailure("pthread_key_create failed (\(status))") }
    return key
  }()

  /// A free node (its `job` nil), from the calling thread's cache when it has one.
  @inline(__always)
  static func take() -> JobNodePointer {
    let cache = ThreadSlots.nodeCache()
    // Safe: the cache is the calling thread's own (thread-local), and every pointer in it
    // is a free node no other thread touches (rule 1).
    if let raw = cache.pointee.spare_head {
      let node = raw.assumingMemoryBound(to: JobNode.self)
      let next = node.pointee.next.load(ordering: .relaxed)
      cache.pointee.spare_head = UnsafeMutableRawPointer(bitPattern: next)
      cache.pointee.spare_count -= 1
      if next == 0 { cache.pointee.spare_tail = nil }
      return node
    }
    return takeSlow(cache)
  }

  private static func takeSlow(_ cache: UnsafeMutablePointer<lds_node_cache>) -> JobNodePointer {
    // Looked at before it is emptied: a thread that allocates while the shared stack is
    // empty (a producer outside the pool, before the workers have handed back a chain) would
    // otherwise write the process-wide head and count for every node (PoolWriteCountTests:
    // 0.6-0.8 writes per job from outside before this).
    if cache.pointee.borrowed == nil && shared.load(ordering: .relaxed) != 0 {
      // Acquiring: pairs with the releasing compare-and-swap in `pushShared`, so the
      // chain's links are visible.
      let chain = shared.exchange(0, ordering: .acquiring)
      sharedCount.store(0, ordering: .relaxed)
      countSharedWrite(.nodeCache, 2)
      if chain != 0 {
        cache.pointee.borrowed = UnsafeMutableRawPointer(bitPattern: chain)
        registerExitHook(cache)
      }
    }
    if let raw = cache.pointee.borrowed {
      let node = raw.assumingMemoryBound(to: JobNode.self)
      let next = UnsafeMutableRawPointer(bitPattern: node.pointee.next.load(ordering: .relaxed))
      cache.pointee.borrowed = next
      // Rule 5: start fetching the node the next take returns. Safe: a hint, not an access
      // (it never faults and writes nothing); the node is this thread's borrowed one.
      if let next { cls_prefetch_for_write(next, MemoryLayout<JobNode>.size) }
      return node
    }
    return takeFromNewSlabSlow(cache)
  }

  /// A node from a new slab (`NodeSlab`); the slab's other nodes become the calling thread's
  /// borrowed chain, which is empty here (`takeSlow` comes here only then). The slab comes
  /// from `malloc`, not `allocate(capacity:)`: on Linux the Swift runtime sends an
  /// allocation of default alignment to `posix_memalign` (`swift_slowAlloc`), whose aligned
  /// path in glibc costs more than `malloc` and pads each block (perf, eight producers
  /// submitting 1M jobs: 7.5% of the samples in `posix_memalign` under `takeSlow`, when each
  /// node was allocated alone).
  @inline(never)
  private static func takeFromNewSlabSlow(_ cache: UnsafeMutablePointer<lds_node_cache>)
    -> JobNodePointer
  {
    let node = NodeSlab.makeChainSlow()
    // Safe: the slab's nodes are this thread's until it hands them on (rule 1).
    cache.pointee.borrowed = UnsafeMutableRawPointer(
      bitPattern: node.pointee.next.load(ordering: .relaxed))
    registerExitHook(cache)
    return node
  }

  /// Gives back a node whose job was taken (`takeJob`).
  @inline(__always)
  static func give(_ node: JobNodePointer) {
    let cache = ThreadSlots.nodeCache()
    // Safe: the node is the caller's, free, and now goes to the calling thread's own list.
    let head = cache.pointee.spare_head
    node.pointee.next.store(UInt(bitPattern: head), ordering: .relaxed)
    cache.pointee.spare_head = UnsafeMutableRawPointer(node)
    if head == nil {
      cache.pointee.spare_tail = UnsafeMutableRawPointer(node)
      registerExitHook(cache)
    }
    cache.pointee.spare_count += 1
    if cache.pointee.spare_count >= spareLimit { flushSpare(cache) }
  }

  /// Moves the calling thread's spare list to the shared stack.
  private static func flushSpare(_ cache: UnsafeMutablePointer<lds_node_cache>) {
    guard let head = cache.pointee.spare_head, let tail = cache.pointee.spare_tail else { return }
    if sharedCount.load(ordering: .relaxed) >= sharedLimit {
      // Rule 4: enough spare nodes already; these go back to their slabs.
      var node: JobNodePointer? = head.assumingMemoryBound(to: JobNode.self)
      while let current = node {
        node = JobNodePointer(bitPattern: current.pointee.next.load(ordering: .relaxed))
        NodeSlab.release(current)
      }
    } else {
      pushShared(
        head: head.assumingMemoryBound(to: JobNode.self),
        tail: tail.assumingMemoryBound(to: JobNode.self))
      sharedCount.wrappingAdd(cache.pointee.spare_count, ordering: .relaxed)
      countSharedWrite(.nodeCache)
    }
    cache.pointee.spare_head = nil
    cache.pointee.spare_tail = nil
    cache.pointee.spare_count = 0
  }

  /// Pushes the chain `head`...`tail` (linked by `next`, owned by the caller) onto the
  /// shared stack.
  private static func pushShared(head: JobNodePointer, tail: JobNodePointer) {
    var expected = shared.load(ordering: .relaxed)
    while true {
      tail.pointee.next.store(expected, ordering: .relaxed)
      countSharedWrite(.nodeCache)  // The compare-and-swap below (each try).
      // Releasing: the chain's links are published with the head (see `takeSlow`).
      let (exchanged, original) = shared.compareExchange(
        expected: expected, desired: head.nodeBits, ordering: .releasing)
      if exchanged { return }
      expected = original
    }
  }

  /// Installs the exit hook of the calling thread once (rule 3).
  @inline(__always)
  private static func registerExitHook(_ cache: UnsafeMutablePointer<lds_node_cache>) {
    guard cache.pointee.registered == 0 else { return }
    cache.pointee.registered = 1
    // Any non-nil value makes the destructor run at thread exit.
    pthread_setspecific(exitKey, UnsafeRawPointer(bitPattern: 1))
  }

  /// Gives the calling thread's whole cache to the shared stack (its exit hook).
  static func flushCallingThread() {
    let cache = ThreadSlots.nodeCache()
    flushSpare(cache)
    if let raw = cache.pointee.borrowed {
      var tail = raw.assumingMemoryBound(to: JobNode.self)
      while tail.pointee.next.load(ordering: .relaxed) != 0 {
        tail = JobNodePointer(nodeBits: tail.pointee.next.load(ordering: .relaxed))
      }
      pushShared(head: raw.assumingMemoryBound(to: JobNode.self), tail: tail)
      cache.pointee.borrowed = nil
    }
    cache.pointee.registered = 0
  }
}
