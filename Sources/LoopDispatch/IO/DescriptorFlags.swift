import Glibc
import MainLoop

/// The O_NONBLOCK flag of descriptors that I/O channels read and write through readiness,
/// shared by every channel on the same descriptor.
///
/// The first channel to use a descriptor saves its flags and sets O_NONBLOCK; the last one to
/// give it back restores the saved flags. With one saved copy per channel instead, two
/// channels on one descriptor (two `dispatch_write`s to standard output) would restore each
/// other's O_NONBLOCK: the descriptor would end blocking while a channel still wrote to it, or
/// non-blocking for good. Keyed by descriptor number: a channel holds its use until its
/// cleanup, and the caller may not close the descriptor before that, so the number names the
/// same open file for as long as it is in the table.
enum DescriptorFlags {
  /// Per descriptor: the flags before the first user, and how many channels use it.
  private static let table = LockedValue<[Int32: (saved: Int32, users: Int)]>([:])

  /// Makes `fd` non-blocking for one more channel. False if its flags cannot be read.
  static func acquire(_ fd: Int32) -> Bool {
    table.withLock { entries in
      if let entry = entries[fd] {
        entries[fd] = (entry.saved, entry.users + 1)
        return true
      }
      let flags = fcntl(fd, F_GETFL)
      guard flags >= 0 else { return false }
      if flags & O_NONBLOCK == 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
      entries[fd] = (flags, 1)
      return true
    }
  }

  /// Gives one channel's use of `fd` back; the last one restores its flags.
  static func release(_ fd: Int32) {
    table.withLock { entries in
      guard let entry = entries[fd] else { return }
      if entry.users > 1 {
        entries[fd] = (entry.saved, entry.users - 1)
        return
      }
      entries[fd] = nil
      _ = fcntl(fd, F_SETFL, entry.saved)
    }
  }
}
