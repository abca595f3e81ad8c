import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// Registering, re-arming and removing sources: the system-call side of the multiplexing
/// rules in `IOEntry.swift` (the rule numbers below are that file's).
///
/// Two locks, taken in this order and never the other: the driver's `lock` (the tables of
/// entries by descriptor and by token), then an entry's own lock (`IOEntry.state`: its
/// sources, marks and `armed`). The per-event paths take one each, briefly: the poller takes
/// the tables' lock for the token lookup alone, then the entry's lock to fire it; a worker's
/// re-arm takes only its entry's lock. So the `epoll_ctl` a re-arm makes, under its entry's
/// lock, holds up neither another connection's re-arm nor the poller's lookups (except
/// through a `register` or `unregister` of the same entry, which takes both locks): with one
/// lock for everything, the poller and the workers met on it about once per request, each
/// meeting a futex wake.
///
/// Why an entry's lock is enough to keep an `epoll_ctl` off a number that now names another
/// file (rule 8): every `epoll_ctl` naming an entry's number is made under that entry's lock,
/// after checking the entry is not gone (`IOEntry.State.isGone`). An entry goes (evicted, or
/// removed with its registration deleted) under its own lock, inside the tables' lock, and
/// only after that does the same number get a new entry and an `EPOLL_CTL_ADD` (under the
/// tables' lock, still held), or an owned registration (`registerOwned` evicts whatever entry
/// the number still has, the same way). So an `epoll_ctl` for an old entry either comes before
/// the new registration exists (the kernel answers `ENOENT` if the number names another file,
/// or nothing, or a registration the old file still has) or sees the entry gone and makes none.
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
        switch join(entry, core, interest) {
        case .joined: return .success(entry)
        case .refused(let code): return .failure(.init(code: code))
        case .gone:
          // Rule 8. The number was closed while watched (the registration went with its
          // file) and reopened on the same file: same identity, new registration. `join`
          // already marked the entry evicted under its lock (no re-arm can come between);
          // `evict` takes it out of the tables.
          evict(entry, from: &tables)
        }
      }
      let entry = IOEntry(fd: fd, identity: identity, token: tables.nextToken, driver: self)
      tables.nextToken &+= 1
      // Nobody else can see the entry before it is in the tables; the lock is taken because
      // its state lives behind it.
      let code = entry.state.withLock { state in
        state.update(interest) { $0.add(core) }
        state.armed = interest.epollBit
        return cls_epoll_control(epfd, cls_epoll_ctl_add, fd, state.wanted, entry.token)
      }
      if code != 0 { return .failure(.init(code: code)) }
      tables.byDescriptor[fd] = entry
      tables.byToken[entry.token] = entry
      return .success(entry)
    }
  }

  private enum Join {
    case joined
    case refused(Int32)
    /// The registration no longer exists (`ENOENT`); the entry is now evicted.
    case gone
  }

  /// Rule 6: adds `core` to a registered entry, with a system call even if the interest is
  /// armed (once per source, not per event): it proves the registration still exists. Under
  /// the tables' lock.
  private func join(_ entry: IOEntry, _ core: FileDescriptorCore, _ interest: FDInterest)
    -> Join
  {
    entry.state.withLock { state -> Join in
      state.update(interest) { $0.add(core) }
      let before = state.armed
      state.armed |= interest.epollBit
      let code = cls_epoll_control(epfd, cls_epoll_ctl_mod, entry.fd, state.wanted, entry.token)
      if code == 0 { return .joined }
      state.update(interest) { $0.remove(at: $0.cores.count - 1) }
      state.armed = before
      guard code == ENOENT else { return .refused(code) }
      state.evicted = true
      return .gone
    }
  }

  /// Rule 3: `core` finished a delivery. Any thread (the one that ran the handler). Takes only
  /// the entry's lock.
  /// - Returns: false if the descriptor was closed while watched (the kernel dropped the
  ///   registration with the file, so the number no longer names a watched file): the source
  ///   will not fire again, and the caller says so.
  func rearm(_ entry: IOEntry, _ core: FileDescriptorCore) -> Bool {
    let interest = core.interest
    return entry.state.withLock { state in
      guard !state.isGone, let index = state[interest].index(of: core) else { return true }
      let owing = state.update(interest) { sources in
        _ = sources.release(at: index)
        sources.deliveredSinceFire = true
        return sources.owing
      }
      guard owing == 0 else { return true }  // The last to finish re-arms.
      return enable(entry, &state, interest)
    }
  }

  /// Rule 4: `core` did not take the report `dispatch` handed it. Driver thread. Takes only
  /// the entry's lock.
  func decline(_ entry: IOEntry, _ core: FileDescriptorCore, _ interest: FDInterest) {
    entry.state.withLock { state in
      guard !state.isGone, let index = state[interest].index(of: core),
        state.update(interest, { $0.release(at: index) && $0.owing == 0 && $0.deliveredSinceFire })
      else { return }
      // A failure here reaches the sources at their own re-arm (rule 7 does not skip it:
      // `enable` clears `armed`).
      _ = enable(entry, &state, interest)
    }
  }

  /// Rule 5: stops watching for `core`. A poller that took an event before may still hand it
  /// to the core afterwards; the core is cancelled by then, so no handler starts. Any thread.
  func unregister(_ entry: IOEntry, _ core: FileDescriptorCore) {
    let interest = core.interest
    lock.withLock { tables in
      entry.state.withLock { state in
        guard let index = state[interest].index(of: core) else { return }
        state.update(interest) { $0.remove(at: index) }
        guard !state.isGone else { return }
        if state.isEmpty {
          state.removed = true
          state.armed = 0
          tables.byDescriptor[entry.fd] = nil
          tables.byToken[entry.token] = nil
          // ENOENT/EBADF: the descriptor was closed already; nothing to remove.
          _ = cls_epoll_control(epfd, cls_epoll_ctl_del, entry.fd, 0, 0)
          return
        }
        let before = state.armed
        // The leaver counts as having delivered: a later decline of the last mark re-arms.
        state.update(interest) { $0.deliveredSinceFire = true }
        if state[interest].isEmpty {
          state.armed &= ~interest.epollBit
        } else if state[interest].owing == 0 {
          state.armed |= interest.epollBit
        }
        if state.armed != before {
          // ENOENT/EBADF: closed while watched; the remaining sources learn it at their re-arm.
          _ = cls_epoll_control(epfd, cls_epoll_ctl_mod, entry.fd, state.wanted, entry.token)
        }
      }
    }
  }

  /// Rule 2 for a report of `events` the poller took for `entry`: disarms the fired
  /// interests, marks their sources and re-enables the other armed interests. Nil if the
  /// entry went between the poller's lookup and now (its token is stale). Driver thread,
  /// holding the role; takes only the entry's lock.
  func fire(_ entry: IOEntry, events: UInt32) -> IOEntry.Fired? {
    entry.state.withLock { state -> IOEntry.Fired? in
      guard !state.isGone else { return nil }
      let fired = state.fire(events)
      if state.armed != 0 {
        _ = cls_epoll_control(epfd, cls_epoll_ctl_mod, entry.fd, state.wanted, entry.token)
      }
      return fired
    }
  }

  /// Forgets `entry` (rule 8): its token goes stale and its sources never fire again. Under
  /// the tables' lock; takes the entry's. Also for an owned registration's new descriptor
  /// (`registerOwned`).
  func evict(_ entry: IOEntry, from tables: inout Tables) {
    tables.byDescriptor[entry.fd] = nil
    tables.byToken[entry.token] = nil
    entry.state.withLock { $0.evicted = true }
  }

  /// Enables `interest` in the registration unless it is armed already (rule 7). Returns
  /// false if the descriptor was closed while watched (`armed` is cleared: the registration
  /// is gone). Under the entry's lock, with the entry not gone.
  private func enable(_ entry: IOEntry, _ state: inout IOEntry.State, _ interest: FDInterest)
    -> Bool
  {
    guard state.armed & interest.epollBit == 0 else { return true }
    state.armed |= interest.epollBit
    let code = cls_epoll_control(epfd, cls_epoll_ctl_mod, entry.fd, state.wanted, entry.token)
    if code == ENOENT || code == EBADF {
      state.armed = 0
      return false
    }
    return true
  }
}
