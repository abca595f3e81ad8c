import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// Descriptors a source owns outright (a process's pidfd, a memory-pressure trigger): one
/// registration for one source, never shared with another, so none of `IOEntry`'s
/// multiplexing applies. The rules:
///
/// 1. **One-shot, fixed events.** `registerOwned` adds the descriptor with its events
///    (`EPOLLIN` for a pidfd, `EPOLLPRI` for a pressure trigger) and `EPOLLONESHOT`, under a
///    token from the same counter as the entries' (so the two kinds never share a token).
/// 2. **A report disarms.** `dispatch` finds the registration by its token, clears `armed`
///    under the driver's lock, and hands the events to the watcher (driver thread). The
///    watcher's source then delivers as any fd source does: inline on an idle serial queue,
///    else queued on its target.
/// 3. **The watcher re-arms when it wants the next report** (`rearmOwned`, one
///    `epoll_ctl(MOD)`, made by the thread that finished the delivery); a re-arm while `armed`
///    is set makes no system call (the kernel has it enabled, or `dispatch` is about to clear
///    it and hand the report over, whose delivery re-arms). A watcher that never re-arms (a
///    process exit, reported once) gets exactly one report: a pidfd stays readable after the
///    exit, and a disarmed registration cannot make the poller spin on it.
/// 4. **Removal is final.** `unregisterOwned` deletes the registration under the lock; once it
///    returns no `epoll_ctl` touches the descriptor again, so the owner may close it. A poller
///    that took a report before may still hand it to the watcher, whose source is cancelled
///    by then (no handler starts).
final class OwnedRegistration: @unchecked Sendable {
  // @unchecked Sendable: `armed` and `removed` are protected by `IODriver.lock`; the rest is
  // immutable.
  let fd: Int32
  let events: UInt32
  let token: UInt64
  let driver: IODriver
  /// Held until the registration is removed (the watcher drops its registration then, which
  /// breaks the cycle).
  let watcher: any OwnedDescriptorWatcher
  /// Protected by: `IODriver.lock`. Whether the kernel has the registration enabled (rule 1).
  var armed = true
  /// Protected by: `IODriver.lock`. Deleted from the epoll set (rule 4).
  var removed = false

  init(
    fd: Int32, events: UInt32, token: UInt64, driver: IODriver,
    watcher: any OwnedDescriptorWatcher
  ) {
    self.fd = fd
    self.events = events
    self.token = token
    self.driver = driver
    self.watcher = watcher
  }
}

/// A source's core that owns descriptors registered with `IODriver.registerOwned`.
protocol OwnedDescriptorWatcher: AnyObject, Sendable {
  /// The driver saw `events` on `registration`, which is now disarmed (rule 2). Driver thread.
  func ownedDescriptorFired(_ registration: OwnedRegistration, events: UInt32)
}

extension IODriver {
  /// Watches `fd` (owned by `watcher`) for `events`, one-shot (rule 1). Any thread.
  ///
  /// `edgeTriggered: true` registers the descriptor persistent and edge-triggered
  /// (`EPOLLET`) instead, for a descriptor whose every new readiness is worth one report
  /// without the watcher consuming it (the driver timers' timerfd: the kernel reports each
  /// expiry, read or not): no `epoll_ctl` per report, and rule 3 does not apply (`armed` is
  /// never read for it).
  /// - Returns: the registration to re-arm and unregister with, or an errno.
  func registerOwned(
    fd: Int32, events: UInt32, edgeTriggered: Bool = false, watcher: any OwnedDescriptorWatcher
  ) -> Result<OwnedRegistration, IORegistrationError> {
    lock.withLock { tables -> Result<OwnedRegistration, IORegistrationError> in
      if let stale = tables.byDescriptor[fd] {
        // The runtime just opened `fd`, so an entry under its number watched a file that was
        // closed while watched (`IOEntry.swift`, rule 8): evict it before the new
        // registration exists, or its re-arm or removal would reach this one.
        evict(stale, from: &tables)
      }
      let registration = OwnedRegistration(
        fd: fd, events: events, token: tables.nextToken, driver: self, watcher: watcher)
      tables.nextToken &+= 1
      let code = cls_epoll_control(
        epfd, cls_epoll_ctl_add, fd,
        edgeTriggered ? events | cls_epollet : events | cls_epolloneshot, registration.token)
      if code != 0 { return .failure(.init(code: code)) }
      tables.owned[registration.token] = registration
      return .success(registration)
    }
  }

  /// Rule 3: enables the next report unless it is enabled already or the registration was
  /// removed. Any thread.
  func rearmOwned(_ registration: OwnedRegistration) {
    lock.withLock { _ in
      guard !registration.removed, !registration.armed else { return }
      registration.armed = true
      // The descriptor is the watcher's own and open until after `unregisterOwned`: the
      // modification cannot fail but for a bug.
      let code = cls_epoll_control(
        epfd, cls_epoll_ctl_mod, registration.fd, registration.events | cls_epolloneshot,
        registration.token)
      if code != 0 {
        internalBug("epoll_ctl(MOD) of owned descriptor \(registration.fd) failed (errno \(code))")
      }
    }
  }

  /// Whether `registration` has reported and not been re-armed yet (rule 2 to rule 3): its
  /// watcher's delivery is still under way. False once removed. Any thread.
  func isDisarmed(_ registration: OwnedRegistration) -> Bool {
    lock.withLock { _ in !registration.removed && !registration.armed }
  }

  /// Rule 4: stops watching; afterwards the owner may close the descriptor. Any thread.
  func unregisterOwned(_ registration: OwnedRegistration) {
    lock.withLock { tables in
      guard !registration.removed else { return }
      registration.removed = true
      registration.armed = false
      tables.owned[registration.token] = nil
      _ = cls_epoll_control(epfd, cls_epoll_ctl_del, registration.fd, 0, 0)
    }
  }

  /// Rule 2, under the lock: the registration of `token`, disarmed, or nil if the token is not
  /// an owned registration's (or is stale).
  func takeOwnedReport(_ tables: inout Tables, token: UInt64) -> OwnedRegistration? {
    guard let registration = tables.owned[token] else { return nil }
    registration.armed = false
    return registration
  }
}
