import Glibc

/// One contiguous run of bytes that ``Bytes`` values share, and how it is given back.
///
/// Immutable where it counts: bytes a ``Bytes`` region covers are never written after the
/// region is made, so any thread may read them. (A read slab, `ReadBuffer`, is still written
/// past its last region while its reads go on: memory no region covers yet.) The `release` runs exactly once, from `deinit`, after the last ``Bytes`` value that
/// refers to the storage is gone.
final class ByteStorage: @unchecked Sendable {
  // @unchecked Sendable: every field is a `let`; the bytes behind `base` are not written after
  // `init` (the owner handed them over), and `deinit` runs once, on the last release.
  let base: UnsafeRawPointer
  let count: Int
  private let release: Release

  /// Who gives the memory back.
  private enum Release {
    /// Memory allocated here (a copy).
    case owned
    /// The client's memory, adopted without a copy.
    case client(Bytes.Deallocator)
  }

  /// Copies `source` into memory this storage owns.
  init(copying source: UnsafeRawBufferPointer) {
    let memory = UnsafeMutableRawPointer.allocate(byteCount: max(source.count, 1), alignment: 16)
    if let from = source.baseAddress, source.count > 0 {
      // Safe: `memory` holds at least `source.count` bytes; the regions do not overlap.
      memory.copyMemory(from: from, byteCount: source.count)
    }
    base = UnsafeRawPointer(memory)
    count = source.count
    release = .owned
  }

  /// Takes `count` bytes at `base` as they are; `release` gives them back.
  init(adopting base: UnsafeRawPointer, count: Int, deallocator: Bytes.Deallocator) {
    self.base = base
    self.count = count
    release = .client(deallocator)
  }

  /// Memory from `UnsafeMutableRawPointer.allocate` (at least `count` bytes, already
  /// written: a read's), adopted without a copy and deallocated with the storage.
  init(adopting memory: UnsafeMutableRawPointer, count: Int) {
    base = UnsafeRawPointer(memory)
    self.count = count
    release = .owned
  }

  /// `count` bytes of new memory that `fill` writes before anyone else sees the storage (a
  /// read may write only a prefix: the `Bytes` regions over it then cover only that prefix).
  init(count: Int, fill: (UnsafeMutableRawBufferPointer) -> Void) {
    let memory = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 16)
    // Safe: `memory` is `count` bytes, written by `fill` before `base` is published; bytes it
    // did not write are never read (no region covers them).
    fill(UnsafeMutableRawBufferPointer(start: memory, count: count))
    base = UnsafeRawPointer(memory)
    self.count = count
    release = .owned
  }

  deinit {
    // Safe: the memory is no longer reachable (this was the last reference), and each case
    // gives it back the way it was obtained.
    switch release {
    case .owned:
      UnsafeMutableRawPointer(mutating: base).deallocate()
    case .client(.free):
      Glibc.free(UnsafeMutableRawPointer(mutating: base))
    case .client(.unmap):
      _ = munmap(UnsafeMutableRawPointer(mutating: base), count)
    case .client(.none):
      break
    case .client(.custom(let queue, let body)):
      queue.async(execute: body)
    }
  }
}
