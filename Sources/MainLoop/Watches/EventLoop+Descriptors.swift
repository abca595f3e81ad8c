import Glibc

/// Watches by descriptor number, so a watch on a reused number is never hidden by a stale one.
///
/// A descriptor closed while a watch is registered on it leaves libevent believing that the
/// number is still watched; epoll itself dropped the registration when the file closed. When
/// the number is reused (a new pipe or socket) and watched again, libevent would see the old
/// interest and never tell epoll about the new one: the new watch would never fire. So each
/// fd watch records the identity (device, inode) of its file when added, and before adding a
/// watch on a number the loop evicts the registered watches whose file is no longer the one
/// behind it (`EventRegistration.evictOnLoop`). An evicted watch never fires again; it stays
/// registered until cancelled, so its cancel completion still runs exactly once.
///
/// Who may touch what: `watchesByDescriptor` is only touched on the loop thread.
extension EventLoop {
  /// Evicts the watches on `fd` whose file differs from `current`. Loop thread only.
  func evictStaleWatches(on fd: Int32, keeping current: FileIdentity) {
    guard let watches = watchesByDescriptor[fd] else { return }
    var kept: [EventRegistration] = []
    for registration in watches {
      if registration.fileIdentity == current {
        kept.append(registration)
      } else {
        registration.evictOnLoop()
      }
    }
    watchesByDescriptor[fd] = kept.isEmpty ? nil : kept
  }

  /// Records an added fd watch. Loop thread only.
  func recordWatch(_ registration: EventRegistration, on fd: Int32) {
    watchesByDescriptor[fd, default: []].append(registration)
  }

  /// Forgets a removed fd watch (if it was not evicted already). Loop thread only.
  func forgetWatch(_ registration: EventRegistration, on fd: Int32) {
    guard var watches = watchesByDescriptor[fd] else { return }
    watches.removeAll { $0 === registration }
    watchesByDescriptor[fd] = watches.isEmpty ? nil : watches
  }
}

/// The identity (device, inode) of the file behind a descriptor number: two numbers, or one
/// number at two moments, name the same file exactly when their identities are equal. Shared
/// with LoopDispatch's I/O driver and fd sources.
package struct FileIdentity: Equatable, Sendable {
  package var device: UInt
  package var inode: UInt

  package init(device: UInt, inode: UInt) {
    self.device = device
    self.inode = inode
  }

  /// The identity of `info`'s file.
  package init(_ info: stat) {
    self.init(device: UInt(info.st_dev), inode: UInt(info.st_ino))
  }

  /// The identity of `fd`'s file, or nil if `fd` is not open.
  package init?(of fd: Int32) {
    var info = stat()
    guard fstat(fd, &info) == 0 else { return nil }
    self.init(info)
  }
}
