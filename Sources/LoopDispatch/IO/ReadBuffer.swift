/// The memory a descriptor entry reads into, kept from one read to the next.
///
/// Two sizes of read, two ways:
/// - **Small reads** (under `slabFrom` bytes asked: a 32-byte message) go into memory of the
///   size asked. A read that finds nothing (`EAGAIN`, the end of the file) or fills less than
///   half of it leaves it for the next read (a short read is copied out); a fuller one hands
///   the memory over, without a copy, to the ``Bytes`` it returns.
/// - **Large reads** (a pipe's or socket's 64 KiB, a file's chunk) go into a slab of four
///   times the size asked, one after another: each read that fills at least half of what it
///   asked is handed over as a region of the slab (no allocation), and the slab is replaced
///   only when the next read no longer fits. A value kept from a slab keeps the whole slab
///   (at most four times its size) alive.
///
/// The slab is written after parts of it were handed over, which ``ByteStorage``'s
/// immutability allows: a handed-over region is never written again, and the part still
/// being filled is covered by no region until its read has returned.
///
/// Thread-safety: owned by one entry and used only on its queue (not Sendable).
final class ReadBuffer {
  /// Small reads: memory of `capacity` bytes, this buffer's own.
  private var memory: UnsafeMutableRawPointer?
  private var capacity = 0
  /// Large reads: the slab (its memory is `slab.base`, written through `slabMemory`), and
  /// how much of it has been handed over.
  private var slab: ByteStorage?
  private var slabMemory: UnsafeMutableRawPointer?
  private var slabUsed = 0

  /// Reads asked at this size or above share a slab.
  static let slabFrom = 16 * 1024

  /// Reads with `call` (given memory of at least `want` bytes and `want`; returns the
  /// count, or -1 with `errno` set) and returns the bytes it read (empty for 0 or -1) and
  /// its result.
  func read(want: Int, _ call: (UnsafeMutableRawPointer, Int) -> Int) -> (Bytes, Int) {
    want >= ReadBuffer.slabFrom ? readIntoSlab(want: want, call) : readSmall(want: want, call)
  }

  private func readSmall(
    want: Int, _ call: (UnsafeMutableRawPointer, Int) -> Int
  ) -> (Bytes, Int) {
    if memory == nil || capacity < want {
      memory?.deallocate()
      // 16-byte aligned, as ByteStorage's own; a read writes at most `want` bytes into it.
      memory = UnsafeMutableRawPointer.allocate(byteCount: Swift.max(want, 1), alignment: 16)
      capacity = want
    }
    guard let memory else { return (Bytes(), -1) }
    let got = call(memory, want)
    guard got > 0 else { return (Bytes(), got) }
    if got * 2 < capacity {
      return (Bytes(copying: UnsafeRawBufferPointer(start: memory, count: got)), got)
    }
    // Handed over: the storage frees the memory when its last `Bytes` is gone.
    self.memory = nil
    capacity = 0
    return (Bytes(adopting: ByteStorage(adopting: memory, count: got)), got)
  }

  private func readIntoSlab(
    want: Int, _ call: (UnsafeMutableRawPointer, Int) -> Int
  ) -> (Bytes, Int) {
    if slab == nil || slabUsed + want > (slab?.count ?? 0) {
      let size = 4 * want
      let fresh = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
      // The storage owns the memory from here (it frees it with its last reference); this
      // buffer writes into the part not yet handed over (see the type's comment).
      slab = ByteStorage(adopting: fresh, count: size)
      slabMemory = fresh
      slabUsed = 0
    }
    guard let slab, let slabMemory else { return (Bytes(), -1) }
    let start = slabMemory + slabUsed
    let got = call(start, want)
    guard got > 0 else { return (Bytes(), got) }
    if got * 2 < want {
      return (Bytes(copying: UnsafeRawBufferPointer(start: start, count: got)), got)
    }
    defer { slabUsed += got }
    return (Bytes(slab: slab, offset: slabUsed, count: got), got)
  }

  deinit {
    // Safe: the small-read memory is this buffer's (never handed over, or `memory` would
    // be nil); the slab is freed by its storage.
    memory?.deallocate()
  }
}
