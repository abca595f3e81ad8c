/// The memory a descriptor entry reads into, kept from one read to the next.
///
/// A read that finds nothing (`EAGAIN`, the end of the file) or only a few bytes leaves the
/// memory here for the next read: no allocation for a read that comes back empty, and a
/// small read is copied into memory of its own size. A read that fills at least half of it
/// hands the memory itself over, without a copy, to the ``Bytes`` it returns; the next read
/// allocates anew.
///
/// Thread-safety: owned by one entry and used only on its queue (not Sendable).
final class ReadBuffer {
  private var memory: UnsafeMutableRawPointer?
  private var capacity = 0

  /// Reads with `call` (given memory of at least `want` bytes and `want`; returns the
  /// count, or -1 with `errno` set) and returns the bytes it read (empty for 0 or -1) and
  /// its result.
  func read(want: Int, _ call: (UnsafeMutableRawPointer, Int) -> Int) -> (Bytes, Int) {
    if memory == nil || capacity < want {
      memory?.deallocate()
      // Fresh memory for the read, 16-byte aligned as ByteStorage's own; a read writes at
      // most `want` bytes into it.
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

  deinit {
    // Safe: the memory is this buffer's (never handed over, or `memory` would be nil).
    memory?.deallocate()
  }
}
