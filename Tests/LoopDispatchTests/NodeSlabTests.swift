import Glibc
import Synchronization
import Testing

@testable import LoopDispatch

/// Job nodes come 64 to a slab, one `malloc` each (`NodeSlab`), and a burst's slabs go back
/// to the allocator once the caches are full (`NodeCache`, rule 4).
@Suite struct NodeSlabTests {
  /// The slab's address costs the node no size: it sits where the lane's padding was.
  @Test func aNodeNamesItsSlabWithinEightyEightBytes() {
    #expect(MemoryLayout<JobNode>.stride <= 88)
  }

  /// A new slab is one chain of `capacity` nodes in one block, each naming the slab.
  @Test func aNewSlabIsOneChainOfItsNodes() {
    let first = NodeSlab.makeChain()
    var nodes = [first]
    while let next = JobNodePointer(bitPattern: nodes.last!.pointee.next.load(ordering: .relaxed)) {
      nodes.append(next)
    }
    #expect(nodes.count == NodeSlab.capacity)
    let stride = MemoryLayout<JobNode>.stride
    for (index, node) in nodes.enumerated() {
      #expect(node == first + index, "node \(index) is not where the block puts it")
      #expect(node.pointee.job == nil && node.pointee.work == nil)
    }
    #expect(Set(nodes.map { UInt(bitPattern: $0) / UInt(stride) }).count == nodes.count)
    // Given back in the order they came; the block goes with the last (exercised here, counted
    // in the child process below).
    for node in nodes { NodeSlab.release(node) }
  }

  #if DEBUG
    /// A child process (the slab count is process-wide) queues 262,144 items behind a
    /// suspended serial queue, so every node is new: at least one slab per 64 items. Once
    /// they ran, the caches keep `sharedLimit` nodes and the spare lists; the nodes came back
    /// in the order they were taken, so what stays is about those nodes' slabs, not the
    /// burst's 4,096. (Without `release` freeing a completed slab, all 4,096 stay: checked.)
    @Test func aBurstGivesItsSlabsBackOnceTheCachesAreFull() async {
      await #expect(processExitsWith: .success) {
        let items = 262_144
        let queue = Queue(label: "slabs.burst")
        let ran = Atomic<Int>(0)
        let before = NodeSlab.live.load(ordering: .relaxed)
        queue.suspend()
        for _ in 0..<items { queue.async { ran.wrappingAdd(1, ordering: .relaxed) } }
        let during = NodeSlab.live.load(ordering: .relaxed) - before
        if during < items / NodeSlab.capacity { exit(2) }
        queue.resume()
        queue.sync {}
        if ran.load(ordering: .relaxed) != items { exit(3) }
        let kept = NodeSlab.live.load(ordering: .relaxed) - before
        // The caches' bound in whole slabs, with room for the spare lists of a few threads
        // and a slab or two of the pool's own jobs.
        let bound = (NodeCache.sharedLimit + 8 * NodeCache.spareLimit) / NodeSlab.capacity + 64
        exit(kept <= bound ? 0 : 4)
      }
    }
  #endif
}
