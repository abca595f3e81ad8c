import Glibc
import Synchronization

/// A block of `capacity` job nodes allocated with one `malloc`, with a count of the nodes
/// given back to the allocator; the block is freed when the count reaches `capacity`.
///
/// Why: a submitter that outruns its consumer (four threads submitting to one serial queue,
/// a burst onto a suspended queue) needs a fresh node for every job its backlog grows by,
/// and one `malloc` per node cost 7–14% of those rows (medians of 5, quiet, against slabs:
/// `serial_4p`, `producers_8`, `group_main`, `async`), more beside busy neighbours. A slab
/// makes that one call per 64 nodes.
///
/// Layout: the count in the first `headerBytes`, then the nodes, each initialised with
/// `JobNode.slab` naming this slab.
///
/// Rules:
/// 1. A new slab's nodes go to the thread that needed one, as a chain (`NodeCache`, rule 1);
///    from then on they live like any node: recycled through the caches, owned by one party
///    at a time (`JobNode`).
/// 2. A node is given back to its slab only by the caches' bound (`NodeCache`, rule 4), and
///    only once: the party that gives it back owns it and holds no other reference to it, so
///    once all `capacity` nodes are counted nobody holds any of them, and the block is free.
/// 3. Ordering: each party deinitialises its node and then adds to the count (releasing); the
///    add that completes the count is also acquiring, so the `free` that follows comes after
///    every other party's last access to its node.
/// 4. What a slab keeps: a slab with one node still in a cache stays whole. The caches keep
///    a bounded number of nodes (`NodeCache`, rule 4), so at worst that many slabs, 64 times
///    the nodes' own memory. A burst of fresh slabs comes back in about the order it was
///    taken, a slab's nodes together, so it keeps about the caches' nodes' worth of slabs
///    (`NodeSlabTests` counts them after a burst of 524,288 jobs); a burst whose nodes were
///    recycled from many slabs keeps more, up to that worst case.
struct NodeSlab {
  /// Nodes per slab.
  static let capacity = 64
  /// Bytes before the first node: the count (8), a multiple of the node's alignment.
  private static let headerBytes = 8

  /// The start of the block (the count).
  private let base: UnsafeMutableRawPointer

  /// The count of nodes given back, at the block's start.
  private var released: UnsafeMutablePointer<Atomic<Int>> {
    // Safe: bound to this type by `makeChainSlow` for the block's life.
    base.assumingMemoryBound(to: Atomic<Int>.self)
  }

  /// A new slab: its nodes, free and linked first to last by `next` (the last's is 0).
  /// Returns the first.
  @inline(never)
  static func makeChainSlow() -> JobNodePointer {
    let stride = MemoryLayout<JobNode>.stride
    // `malloc`, not `allocate(capacity:)`: see `NodeCache.takeFromNewSlabSlow`.
    guard let base = malloc(headerBytes + capacity * stride) else {
      resourceFailure("out of memory allocating job nodes")
    }
    // Safe: a fresh block; the count and the nodes are disjoint ranges of it, each bound to
    // the type it is initialised as (the block is 16-byte aligned, the nodes 8-byte, at
    // `headerBytes`: enough for both types).
    base.bindMemory(to: Atomic<Int>.self, capacity: 1).initialize(to: Atomic(0))
    let first = (base + headerBytes).bindMemory(to: JobNode.self, capacity: capacity)
    let slab = NodeSlab(base: base)
    for index in 0..<capacity {
      (first + index).initialize(to: JobNode(slab: slab))
      if index > 0 {
        (first + index - 1).pointee.next.store((first + index).nodeBits, ordering: .relaxed)
      }
    }
    #if DEBUG
      live.wrappingAdd(1, ordering: .relaxed)
    #endif
    return first
  }

  /// Gives `node` (free, owned by the caller) back to the allocator: to its slab, which is
  /// freed once all its nodes are back (rules 2 and 3), or alone if it came alone.
  static func release(_ node: JobNodePointer) {
    let slab = node.pointee.slab
    node.deinitialize(count: 1)
    guard let slab else {
      // Allocated alone (`allocate(capacity: 1)`, an injection queue's first dummy).
      node.deallocate()
      return
    }
    // Releasing: this party's deinitialisation before its add; acquiring: the add that
    // completes the count sees every earlier party's (rule 3).
    let count = slab.released.pointee.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
    assert(count <= capacity, "a job node was given back to its slab twice")
    if count == capacity {
      // Safe: every node of the block was deinitialised by the party that released it
      // (rule 3), and nobody holds any of them (rule 2).
      slab.released.deinitialize(count: 1)
      free(slab.base)
      #if DEBUG
        live.wrappingSubtract(1, ordering: .relaxed)
      #endif
    }
  }

  #if DEBUG
    /// Slabs allocated and not yet freed, process-wide (debug builds, for tests).
    static let live = Atomic<Int>(0)
  #endif
}
