import Glibc

/// An immutable run of bytes, possibly made of several regions in memory: GCD's
/// `dispatch_data_t` as a Swift value.
///
/// Concatenating and taking a subrange share the regions' memory, never copy it; so does
/// passing a value around. Bytes adopted without a copy (``init(noCopy:deallocator:)``) are
/// given back once, after the last value that refers to them is gone. Reading the bytes as
/// one buffer (``withUnsafeBytes(_:)``) copies only when there is more than one region.
///
/// ```swift
/// let head = Bytes("GET / HTTP/1.1\r\n".utf8)
/// let message = head + Bytes("\r\n".utf8)        // two regions, nothing copied
/// message.forEachRegion { offset, region in       // each region in order
///   print(offset, region.count)
///   return true
/// }
/// ```
public struct Bytes: Sendable {
  /// A slice of one storage.
  struct Region: Sendable {
    let storage: ByteStorage
    let offset: Int
    let count: Int

    var buffer: UnsafeRawBufferPointer {
      // Safe: `offset + count` is within the storage, which this region keeps alive.
      UnsafeRawBufferPointer(start: storage.base + offset, count: count)
    }
  }

  /// How memory adopted without a copy is given back when the last value using it is gone.
  public enum Deallocator: Sendable {
    /// `free(3)`: the memory came from `malloc`.
    case free
    /// `munmap(2)` of the whole length: the memory came from `mmap`.
    case unmap
    /// Nothing: the memory outlives every value (static data, or the caller's own).
    case none
    /// Submits `body` to `queue`.
    case custom(queue: Queue, body: @Sendable () -> Void)
  }

  /// The first region (nil when empty) and the others, in order, none empty. Bytes in one
  /// region (a read's buffer, a copy) hold it without an array: an array allocates, and an
  /// empty one does not.
  private let head: Region?
  private let tail: [Region]
  /// The total length in bytes.
  public let count: Int

  /// No bytes.
  public static let empty = Bytes()

  /// No bytes.
  public init() {
    head = nil
    tail = []
    count = 0
  }

  /// One region.
  init(region: Region) {
    head = region
    tail = []
    count = region.count
  }

  private init(head: Region, tail: [Region], count: Int) {
    self.head = head
    self.tail = tail
    self.count = count
  }

  /// The regions in order (none empty).
  init(regions: [Region]) {
    head = regions.first
    tail = regions.count > 1 ? Array(regions.dropFirst()) : []
    count = regions.reduce(0) { $0 + $1.count }
  }

  /// Calls `body` with each region in order until it returns false; returns false if it
  /// did. No array is made.
  @inline(__always)
  private func forEachStoredRegion(_ body: (Region) throws -> Bool) rethrows -> Bool {
    guard let head else { return true }
    guard try body(head) else { return false }
    for region in tail {
      guard try body(region) else { return false }
    }
    return true
  }

  /// A copy of the bytes in `buffer`.
  public init(copying buffer: UnsafeRawBufferPointer) {
    if buffer.isEmpty {
      self.init()
    } else {
      let storage = ByteStorage(copying: buffer)
      self.init(region: Region(storage: storage, offset: 0, count: storage.count))
    }
  }

  /// A copy of `bytes`.
  public init<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
    let array = Array(bytes)
    self = array.withUnsafeBytes { Bytes(copying: $0) }
  }

  /// The bytes in `buffer`, adopted without a copy: nobody may write them while any value
  /// refers to them, and `deallocator` gives them back after the last one is gone (also at
  /// once, for an empty buffer).
  public init(noCopy buffer: UnsafeRawBufferPointer, deallocator: Deallocator) {
    guard let base = buffer.baseAddress else {
      Bytes.giveBack(buffer, deallocator)  // Nothing to hold: given back at once.
      self.init()
      return
    }
    let storage = ByteStorage(adopting: base, count: buffer.count, deallocator: deallocator)
    if buffer.isEmpty {
      self.init()  // `storage` is released here, which runs the deallocator once.
      return
    }
    self.init(region: Region(storage: storage, offset: 0, count: buffer.count))
  }

  /// `count` bytes written by `fill` into new memory (no copy afterwards).
  init(count: Int, fill: (UnsafeMutableRawBufferPointer) -> Void) {
    guard count > 0 else {
      self.init()
      return
    }
    let storage = ByteStorage(count: count, fill: fill)
    self.init(region: Region(storage: storage, offset: 0, count: count))
  }

  /// `count` bytes of `storage` from `offset` (a part of a read slab, handed over without a
  /// copy).
  init(slab storage: ByteStorage, offset: Int, count: Int) {
    self.init(region: Region(storage: storage, offset: offset, count: count))
  }

  /// All of `storage`'s bytes (a read's buffer, handed over without a copy).
  init(adopting storage: ByteStorage) {
    self.init(region: Region(storage: storage, offset: 0, count: storage.count))
  }

  /// Whether there are no bytes.
  public var isEmpty: Bool { count == 0 }

  /// How many regions of memory the bytes are in (0 when empty).
  public var regionCount: Int { head == nil ? 0 : 1 + tail.count }

  /// `left` then `right`, sharing both one's memory (no copy).
  public static func + (left: Bytes, right: Bytes) -> Bytes {
    if left.isEmpty { return right }
    if right.isEmpty { return left }
    guard let leftHead = left.head, let rightHead = right.head else { return left }
    var rest = left.tail
    rest.append(rightHead)
    rest.append(contentsOf: right.tail)
    return Bytes(head: leftHead, tail: rest, count: left.count + right.count)
  }

  /// The bytes in `range` (clamped to `0..<count`), sharing this value's memory.
  public subscript(range: Range<Int>) -> Bytes {
    let lower = Swift.min(Swift.max(range.lowerBound, 0), count)
    let upper = Swift.min(Swift.max(range.upperBound, lower), count)
    if lower == 0 && upper == count { return self }
    if lower == upper { return Bytes() }
    // The first region cut goes in `first`; an array only for a second.
    var first: Region?
    var more: [Region] = []
    var start = 0
    _ = forEachStoredRegion { region in
      let end = start + region.count
      defer { start = end }
      if end <= lower { return true }
      if start >= upper { return false }
      let from = Swift.max(lower, start) - start
      let to = Swift.min(upper, end) - start
      let cut = Region(storage: region.storage, offset: region.offset + from, count: to - from)
      if first == nil { first = cut } else { more.append(cut) }
      return true
    }
    guard let first else { return Bytes() }
    return more.isEmpty ? Bytes(region: first) : Bytes(regions: [first] + more)
  }

  /// Calls `body` with each region in order and its offset in the whole; stops when `body`
  /// returns false. Returns false if it stopped early, true otherwise (also when empty).
  @discardableResult
  public func forEachRegion(
    _ body: (_ offset: Int, _ region: UnsafeRawBufferPointer) throws -> Bool
  ) rethrows -> Bool {
    var offset = 0
    return try forEachStoredRegion { region in
      guard try body(offset, region.buffer) else { return false }
      offset += region.count
      return true
    }
  }

  /// The same bytes in one region: this value when it already is one (no copy), else a copy.
  public func contiguous() -> Bytes {
    if tail.isEmpty { return self }
    return Bytes(count: count) { target in
      forEachRegion { offset, region in
        // Safe: the target holds `count` bytes, the sum of the regions' lengths.
        target.baseAddress!.advanced(by: offset).copyMemory(
          from: region.baseAddress!, byteCount: region.count)
        return true
      }
    }
  }

  /// Calls `body` with the bytes as one buffer (copied first if they are in several regions).
  /// The buffer is valid only during the call.
  public func withUnsafeBytes<Result>(
    _ body: (UnsafeRawBufferPointer) throws -> Result
  ) rethrows -> Result {
    let whole = contiguous()
    guard let region = whole.head else {
      return try body(UnsafeRawBufferPointer(start: nil, count: 0))
    }
    return try withExtendedLifetime(whole) { try body(region.buffer) }
  }

  /// The region that holds byte `location`, and the region's offset in the whole; nil when
  /// `location` is not below ``count``.
  public func region(containing location: Int) -> (region: Bytes, offset: Int)? {
    guard location >= 0 && location < count else { return nil }
    var start = 0
    var found: (region: Bytes, offset: Int)?
    _ = forEachStoredRegion { region in
      if location < start + region.count {
        found = (Bytes(region: region), start)
        return false
      }
      start += region.count
      return true
    }
    return found
  }

  /// The bytes as an array (a copy).
  public var array: [UInt8] {
    var result = [UInt8]()
    result.reserveCapacity(count)
    forEachRegion { _, region in
      result.append(contentsOf: region)
      return true
    }
    return result
  }
}

// MARK: - For the C API (`dispatch_data_t`)

extension Bytes {
  /// Gives `buffer` back through `deallocator` now: what adopting it and dropping the last
  /// value would do (the C API's empty buffers, which it does not keep).
  package static func giveBack(_ buffer: UnsafeRawBufferPointer, _ deallocator: Deallocator) {
    switch deallocator {
    case .free: Glibc.free(UnsafeMutableRawPointer(mutating: buffer.baseAddress))
    case .unmap:
      if let base = buffer.baseAddress {
        _ = munmap(UnsafeMutableRawPointer(mutating: base), buffer.count)
      }
    case .none: break
    case .custom(let queue, let body): queue.async(execute: body)
    }
  }

  /// The first region's first byte (the whole, for a contiguous value), or nil when empty.
  package var firstRegionStart: UnsafeRawPointer? { head?.buffer.baseAddress }

  /// As ``forEachRegion(_:)``, also passing each region as a value of its own.
  @discardableResult
  package func forEachRegionValue(
    _ body: (_ offset: Int, _ region: Bytes, _ buffer: UnsafeRawBufferPointer) throws -> Bool
  ) rethrows -> Bool {
    var offset = 0
    return try forEachStoredRegion { region in
      guard try body(offset, Bytes(region: region), region.buffer) else { return false }
      offset += region.count
      return true
    }
  }
}

extension Bytes: Equatable {
  /// Equal when the bytes are, whatever the regions.
  public static func == (left: Bytes, right: Bytes) -> Bool {
    left.count == right.count && left.array == right.array
  }
}
