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
    let first = NodeSlab.makeChainSlow()
    var nodes = [first]
    while let next = JobNodePointer(bitPattern: nodes.last!.pointee.next.load(ordering: .relaxed)) {
      nodes.append(next)
    }
    #expect(nodes.count == NodeSlab.capacity)
    for (index, node) in nodes.enumerated() {
      #expect(node == first + index, "node \(index) is not where the block puts it")
      #expect(node.pointee.job == nil && node.pointee.work == nil)
    }
    // Given back in the order they came; the block goes with the last (counted in the child
    // processes below).
    for node in nodes { NodeSlab.release(node) }
  }

  #if DEBUG
    /// A slab goes back to the allocator with its last node, not before, also when several
    /// threads give its nodes back at once (in a child process: the slab count is
    /// process-wide).
    @Test func aSlabIsFreedWithItsLastNodeOnly() async {
      await #expect(processExitsWith: .success) {
        let first = NodeSlab.makeChainSlow()
        let before = NodeSlab.live.load(ordering: .relaxed)
        for index in 0..<NodeSlab.capacity - 1 { NodeSlab.release(first + index) }
        if NodeSlab.live.load(ordering: .relaxed) != before { exit(2) }
        NodeSlab.release(first + NodeSlab.capacity - 1)
        if NodeSlab.live.load(ordering: .relaxed) != before - 1 { exit(3) }
        // Four threads, a quarter of another slab's nodes each, released together.
        let second = UInt(bitPattern: NodeSlab.makeChainSlow())
        let quarter = NodeSlab.capacity / 4
        let threads = (0..<4).map { part in
          SyncTestThread.start {
            for index in part * quarter..<(part + 1) * quarter {
              NodeSlab.release(JobNodePointer(bitPattern: second)! + index)
            }
          }
        }
        for thread in threads where !thread.join() { exit(4) }
        exit(NodeSlab.live.load(ordering: .relaxed) == before - 1 ? 0 : 5)
      }
    }

    /// A child process queues 524,288 items behind a suspended serial queue, so every node is
    /// new: at least one slab per 64 items (8,192). Once they ran, the caches keep about
    /// `sharedLimit` nodes and the spare lists (a thread that borrowed the whole shared stack
    /// on the way lets it fill again: up to twice that); the nodes came back in about the
    /// order they were taken, so what stays is about those nodes' slabs. (With a completed
    /// slab never freed, all 8,193 stay, the drain's job's slab with them: checked.)
    @Test func aBurstGivesItsSlabsBackOnceTheCachesAreFull() async {
      await #expect(processExitsWith: .success) {
        let items = 524_288
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
        // The caches' bound in whole slabs (shared twice over, and a borrowed chain), with
        // room for the spare lists of a few threads and a slab or two of the pool's own jobs.
        let bound =
          (3 * NodeCache.sharedLimit + 8 * NodeCache.spareLimit) / NodeSlab.capacity + 64
        exit(kept <= bound ? 0 : 4)
      }
    }
  #endif
}
