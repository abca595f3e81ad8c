import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// Registering, re-arming and removing sources: the system-call side of the multiplexing
/// rules in `IOEntry.swift` (the rule numbers below are that file's). Every function takes
/// the driver's lock, which also serialises each `epoll_ctl` on an entry.
extension IODriver {
  /// Watches `fd` for `interest` on behalf of `core`, one-shot, beside any other sources of
  /// the same file. Any thread.
  /// - Returns: the entry to re-arm and unregister with, or an errno.
  func register(_ core: FileDescriptorCore, fd: Int32, interest: FDInterest) -> Result<
    IOEntry, IORegistrationError
  > {
    guard let identity = FileIdentity(of: fd) else { return .failure(.init(code: EBADF)) }
    return lock.withLock { tables -> Result<IOEntry, IORegistrationError> in
      if let existing = tables.byDescriptor[fd], existing.identity != identity {
        // Rule 8. The number was closed while watched and now names another file: the old
        // entry's registration went (or goes) with its file; forget it (its sources never
        // fire again).
        evict(existing, from: &tables)
      }
      if let entry = tables.byDescriptor[fd] {
        // Rule 6, with a system call even if the interest is armed (once per source, not per
        // event): it proves the registration still exists.
        entry.update(interest) { $0.add(core) }
        let before = entry.armed
        entry.armed |= interest.epollBit
        let code = cls_epoll_control(epfd, cls_epoll_ctl_mod, fd, entry.wanted, entry.token)
        if code == 0 { return .success(entry) }
        entry.update(interest) { $0.remove(at: $0.cores.count - 1) }
        entry.armed = before
        guard code == ENOENT else { return .failure(.init(code: code)) }
        // Rule 8. The number was closed while watched (the registration went with its file)
        // and reopened on the same file: same identity, new registration.
        evict(entry, from: &tables)
      }
      let entry = IOEntry(fd: fd, identity: identity, token: tables.nextToken, driver: self)
      tables.nextToken &+= 1
      entry.update(interest) { $0.add(core) }
      entry.armed = interest.epollBit
      let code = cls_epoll_control(epfd, cls_epoll_ctl_add, fd, entry.wanted, entry.token)
      if code != 0 { return .failure(.init(code: code)) }
      tables.byDescriptor[fd] = entry
      tables.byToken[entry.token] = entry
      return .success(entry)
    }
  }

  /// Rule 3: `core` finished a delivery. Any thread (the one that ran the handler).
  /// - Returns: false if the descriptor was closed while watched (the kernel dropped the
  ///   registration with the file, so the number no longer names a watched file): the source
  ///   will not fire again, and the caller says so.
  func rearm(_ entry: IOEntry, _ core: FileDescriptorCore) -> Bool {
    lock.withLock { _ in
      let interest = core.interest
      guard !entry.evicted, !entry.removed, let index = entry[interest].index(of: core) else {
        return true
      }
      let owing = entry.update(interest) { sources in
        _ = sources.release(at: index)
        sources.deliveredSinceFire = true
        return sources.owing
      }
      guard owing == 0 else { return true }  // The last to finish re-arms.
      return enableLocked(entry, interest)
    }
  }

  /// Rule 4: `core` did not take the report `dispatch` handed it. Driver thread.
  func decline(_ entry: IOEntry, _ core: FileDescriptorCore, _ interest: FDInterest) {
    lock.withLock { _ in
      guard !entry.evicted, !entry.removed, let index = entry[interest].index(of: core),
        entry.update(interest, { $0.release(at: index) && $0.owing == 0 && $0.deliveredSinceFire })
      else { return }
      // A failure here reaches the sources at their own re-arm (rule 7 does not skip it:
      // `enableLocked` clears `armed`).
      _ = enableLocked(entry, interest)
    }
  }

  /// Rule 5: stops watching for `core`. A poller that took an event before may still hand it
  /// to the core afterwards; the core is cancelled by then, so no handler starts. Any thread.
  func unregister(_ entry: IOEntry, _ core: FileDescriptorCore) {
    lock.withLock { tables in
      let interest = core.interest
      guard let index = entry[interest].index(of: core) else { return }
      entry.update(interest) { $0.remove(at: index) }
      guard !entry.evicted, !entry.removed else { return }
      if entry.isEmpty {
        entry.removed = true
        entry.armed = 0
        tables.byDescriptor[entry.fd] = nil
        tables.byToken[entry.token] = nil
        // ENOENT/EBADF: the descriptor was closed already; nothing to remove.
        _ = cls_epoll_control(epfd, cls_epoll_ctl_del, entry.fd, 0, 0)
        return
      }
      let before = entry.armed
      // The leaver counts as having delivered: a later decline of the last mark re-arms.
      entry.update(interest) { $0.deliveredSinceFire = true }
      if entry[interest].isEmpty {
        entry.armed &= ~interest.epollBit
      } else if entry[interest].owing == 0 {
        entry.armed |= interest.epollBit
      }
      if entry.armed != before {
        // ENOENT/EBADF: closed while watched; the remaining sources learn it at their re-arm.
        _ = cls_epoll_control(epfd, cls_epoll_ctl_mod, entry.fd, entry.wanted, entry.token)
      }
    }
  }

  /// Forgets `entry` (rule 8): its token goes stale and its sources never fire again. Under
  /// `lock`.
  private func evict(_ entry: IOEntry, from tables: inout Tables) {
    tables.byDescriptor[entry.fd] = nil
    tables.byToken[entry.token] = nil
    entry.evicted = true
  }

  /// Enables `interest` in the registration unless it is armed already (rule 7). Returns
  /// false if the descriptor was closed while watched (`armed` is cleared: the registration
  /// is gone). Under `lock`.
  private func enableLocked(_ entry: IOEntry, _ interest: FDInterest) -> Bool {
    guard entry.armed & interest.epollBit == 0 else { return true }
    entry.armed |= interest.epollBit
    let code = cls_epoll_control(epfd, cls_epoll_ctl_mod, entry.fd, entry.wanted, entry.token)
    if code == ENOENT || code == EBADF {
      entry.armed = 0
      return false
    }
    return true
  }
}
