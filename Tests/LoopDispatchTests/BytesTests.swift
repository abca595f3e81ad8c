import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// `Bytes`, GCD's `dispatch_data_t` as a Swift value: copies where it says it copies, shares
/// memory everywhere else, and gives adopted memory back once, after the last value.
@Suite struct BytesTests {
  @Test func aCopyIsIndependentOfItsSource() {
    var source: [UInt8] = Array("hello".utf8)
    let bytes = source.withUnsafeBytes { Bytes(copying: $0) }
    source[0] = UInt8(ascii: "J")
    #expect(bytes.array == Array("hello".utf8))
    #expect(bytes.count == 5 && bytes.regionCount == 1)
  }

  @Test func concatenationAndSubrangesShareMemory() {
    let left = Bytes("hello ".utf8)
    let right = Bytes("world".utf8)
    let both = left + right
    #expect(both.count == 11 && both.regionCount == 2)
    #expect(both.array == Array("hello world".utf8))
    let middle = both[4..<8]
    #expect(middle.array == Array("o wo".utf8))
    #expect(middle.regionCount == 2)
    // The subrange points into the same memory as its source.
    var leftStart: UnsafeRawPointer?
    left.forEachRegion { _, region in
      leftStart = region.baseAddress
      return false
    }
    var middleStart: UnsafeRawPointer?
    middle.forEachRegion { _, region in
      middleStart = region.baseAddress
      return false
    }
    #expect(middleStart == leftStart.map { $0 + 4 })
    // Clamped, never trapping.
    #expect(both[8..<100].array == Array("rld".utf8))
    #expect(both[-3..<2].array == Array("he".utf8))
    #expect(both[20..<30].isEmpty)
    #expect((Bytes.empty + left) == left && (left + .empty) == left)
  }

  @Test func aCustomDeallocatorRunsOnceAfterTheLastValue() {
    let runs = Counter()
    let ran = Latch()
    let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: 10, alignment: 1)
    memory.copyBytes(from: Array("0123456789".utf8))
    let start = UInt(bitPattern: memory.baseAddress)
    var tail: Bytes? = nil
    do {
      let adopted = Bytes(
        noCopy: UnsafeRawBufferPointer(memory),
        deallocator: .custom(queue: Queue(label: "bytes.release")) {
          runs.increment()
          UnsafeMutableRawPointer(bitPattern: start)!.deallocate()
          ran.open()
        })
      tail = adopted[6..<10]
    }
    // The first value is gone; the subrange still uses the memory.
    #expect(!ran.wait(seconds: 0))
    #expect(tail?.array == Array("6789".utf8))
    tail = nil
    #expect(ran.wait(seconds: 30))
    #expect(runs.current == 1)
  }

  @Test func freeAndUnmapGiveMemoryBack() {
    let heap = malloc(4)!
    memcpy(heap, "abcd", 4)
    let freed = Bytes(noCopy: UnsafeRawBufferPointer(start: heap, count: 4), deallocator: .free)
    #expect(freed.array == Array("abcd".utf8))
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    let mapped = mmap(nil, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)!
    #expect(mapped != MAP_FAILED)
    memcpy(mapped, "map", 3)
    let unmapped = Bytes(
      noCopy: UnsafeRawBufferPointer(start: mapped, count: page), deallocator: .unmap)
    #expect(unmapped[0..<3].array == Array("map".utf8))
    // Leaks and double frees are LeakSanitizer's and AddressSanitizer's to find
    // (`make test-leaks` runs this suite under both).
  }

  @Test func contiguousCopiesOnlyWhenThereAreSeveralRegions() {
    let one = Bytes("single".utf8)
    var before: UnsafeRawPointer?
    one.forEachRegion { _, region in
      before = region.baseAddress
      return true
    }
    one.withUnsafeBytes { #expect($0.baseAddress == before) }
    let two = one + Bytes("!".utf8)
    let flat = two.contiguous()
    #expect(flat.regionCount == 1 && flat == two)
    two.withUnsafeBytes { #expect(Array($0) == Array("single!".utf8)) }
    Bytes.empty.withUnsafeBytes { #expect($0.isEmpty) }
  }

  @Test func regionsComeInOrderAndTheWalkStopsWhenAsked() {
    let bytes = Bytes("ab".utf8) + Bytes("cde".utf8) + Bytes("f".utf8)
    var seen: [(Int, [UInt8])] = []
    #expect(
      bytes.forEachRegion { offset, region in
        seen.append((offset, Array(region)))
        return true
      })
    #expect(seen.map(\.0) == [0, 2, 5])
    #expect(seen.map(\.1) == [Array("ab".utf8), Array("cde".utf8), Array("f".utf8)])
    var calls = 0
    #expect(
      !bytes.forEachRegion { _, _ in
        calls += 1
        return false
      })
    #expect(calls == 1)
  }

  @Test func theRegionHoldingALocation() {
    let bytes = Bytes("ab".utf8) + Bytes("cde".utf8)
    #expect(
      bytes.region(containing: 0).map { ($0.region.array, $0.offset) }! == (Array("ab".utf8), 0))
    #expect(
      bytes.region(containing: 3).map { ($0.region.array, $0.offset) }! == (Array("cde".utf8), 2))
    #expect(bytes.region(containing: 5) == nil)
    #expect(bytes.region(containing: -1) == nil)
  }
}
