import Testing

@testable import LoopDispatch

/// The cache-line separation the pool's hot data claims (<doc:ThreadingModel>, "What each
/// path writes"): on a 128-byte block (two 64-byte lines, which x86's adjacent-line
/// prefetcher moves as a pair), nothing one thread writes per job sits beside what other
/// threads read or write.
///
/// Offsets are measured on live objects (field addresses minus the object's address), not
/// computed from declarations, so a reordered or resized field fails here. A class object is
/// only 16-byte aligned, so for `Worker` the check is base-independent: two fields are apart
/// when their bytes are at least 128 apart, which keeps them off a common 128-byte block
/// wherever the object lies.
@Suite struct PoolLayoutTests {
  static let block = 128

  /// Whether every byte of `a` is at least `block` bytes from every byte of `b`.
  static func apart(_ a: Worker.FieldSpan, _ b: Worker.FieldSpan) -> Bool {
    let (first, second) = a.offset < b.offset ? (a, b) : (b, a)
    return second.offset - (first.offset + first.size - 1) >= block
  }

  @Test func workerGroupsShareNoBlock() {
    let worker = Worker(pool: WorkerPool.shared, id: -1, index: 0, isExtra: true)
    let (group1, ownerPadding, group2, tailPadding) = worker.fieldSpans()
    // Declaration order holds for the addressable fields (so the `let`s declared between
    // them lie in group 1, before the padding).
    let order = group1 + [ownerPadding] + group2 + [tailPadding]
    for (earlier, later) in zip(order, order.dropFirst()) {
      #expect(earlier.offset < later.offset, "\(earlier.name) is not before \(later.name)")
    }
    #expect(ownerPadding.size == Self.block && tailPadding.size == Self.block)
    for reader in group1 {
      for owned in group2 {
        #expect(Self.apart(reader, owned), "\(reader.name) and \(owned.name) may share a block")
      }
    }
    // Group 1 starts at the object's header (16 bytes), so its `let`s (before `id` or
    // between the fields above) are in [16, ownerPadding): apart from group 2 too.
    let firstOwned = group2.map(\.offset).min() ?? 0
    #expect(firstOwned - ownerPadding.offset >= Self.block)
    // Nothing the allocator places after the object shares a block with group 2.
    let lastOwned = group2.map { $0.offset + $0.size }.max() ?? 0
    #expect(tailPadding.offset >= lastOwned && tailPadding.size >= Self.block)
  }

  @Test func localQueueLanesHaveABlockEach() {
    #expect(MemoryLayout<LocalQueue>.size == LocalQueue.lineSize)
    #expect(MemoryLayout<LocalQueue>.stride == LocalQueue.lineSize)
    let worker = Worker(pool: WorkerPool.shared, id: -1, index: 0, isExtra: true)
    let lanes = worker.localCount
    #expect(lanes == Priority.allCases.count)
    #expect(UInt(bitPattern: worker.local) % UInt(Self.block) == 0)
    var blocks: [UInt] = []
    for lane in 0..<lanes {
      let (head, tail, slots) = worker.local[lane].hotWordAddresses()
      #expect(head / UInt(Self.block) == tail / UInt(Self.block), "lane \(lane)")
      blocks.append(head / UInt(Self.block))
      #expect(slots % UInt(Self.block) == 0, "lane \(lane)'s ring is not block-aligned")
    }
    #expect(Set(blocks).count == lanes, "two lanes share a block: \(blocks)")
  }

  @Test func parkWordAndFiguresAreOnBlocksOfTheirOwn() {
    let worker = Worker(pool: WorkerPool.shared, id: -1, index: 0, isExtra: true)
    #expect(UInt(bitPattern: worker.parkWord.pointer) % UInt(Self.block) == 0)
    #expect(worker.figures.wordsAddress % UInt(Self.block) == 0)
  }

  @Test func injectionLanesKeepProducersAndConsumersApart() {
    #expect(MemoryLayout<InjectionQueue>.size == 2 * InjectionQueue.blockSize)
    let pool = WorkerPool.shared
    #expect(UInt(bitPattern: pool.injection) % UInt(Self.block) == 0)
    var seen: [UInt: String] = [:]
    for lane in 0..<pool.laneCount {
      let (producers, consumers) = pool.injection[lane].wordAddresses()
      let producerBlocks = Set(producers.map { $0 / UInt(Self.block) })
      let consumerBlocks = Set(consumers.map { $0 / UInt(Self.block) })
      #expect(producerBlocks.count == 1 && consumerBlocks.count == 1, "lane \(lane)")
      for (block, side) in [
        (producerBlocks.first, "producers"), (consumerBlocks.first, "consumers"),
      ] {
        guard let block else { continue }
        #expect(
          seen[block] == nil, "lane \(lane)'s \(side) share a block with \(seen[block] ?? "")")
        seen[block] = "lane \(lane)'s \(side)"
      }
    }
  }
}
