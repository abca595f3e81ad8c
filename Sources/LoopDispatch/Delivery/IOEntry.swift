import CLoopShims
@_spi(LoopDispatchRuntime) import MainLoop

/// One watched descriptor file: its token, one epoll registration, and every source reading
/// or writing it (any number of each, each on its own target queue).
///
/// Multiplexing one one-shot registration among several sources. The rules, each with its
/// reason (all state below is protected by the entry's lock, `state`; "interest" is read or
/// write):
///
/// 1. **One registration per file.** The entry has one `epoll_ctl` registration, always
///    `EPOLLONESHOT`, whose events are the interests in `armed`. `armed` is what the kernel
///    has enabled, or is about to report: every report passes through `IODriver.fire` (from
///    `dispatch`), which updates `armed` under the entry's lock before handing the event out.
/// 2. **A report disarms the fired interests and hands them to every source of each.** The
///    kernel disabled the whole registration; `State.fire` clears the fired interests from `armed`
///    (the dispatcher re-enables the others at once), marks every source of a fired interest
///    as *owing* a delivery and clears the interest's `deliveredSinceFire`. The marks are made
///    under the lock before any source is signalled, so a delivery that finishes at once on
///    another thread finds its mark.
/// 3. **A finished delivery re-arms only when no source owes one.** `IODriver.rearm` (from
///    `didDeliver`, on the thread that ran the handler) clears the source's mark, sets
///    `deliveredSinceFire`, and re-enables the interest only if no source of it still owes a
///    delivery: level-triggered readiness is reported again once every handler that was
///    handed the event has had its chance to consume it, so a slow handler does not make the
///    others run again and again on data it is about to read. A source that owed nothing (its
///    delivery came from `resume`) re-arms on the same condition.
/// 4. **A source that does not take the event is released at once.** A suspended, cancelled
///    or already pending source returns `.notScheduled`; the dispatcher clears its mark
///    (`IODriver.decline`), so it never holds the others up. If that was the last mark, the
///    interest is re-enabled only if some source delivered since the report: when no source
///    took it (all suspended), the interest stays disarmed, as with a single source, so
///    level-triggered readiness cannot make the poller spin; the first source resumed with
///    the merged data delivers and re-arms by rule 3. A pending source's delivery in flight
///    re-arms by rule 3 when it finishes.
/// 5. **A source leaving releases its mark.** `IODriver.unregister` removes the source; if
///    others of its interest remain and none owes, the interest is re-enabled (the leaver's
///    delivery may never come: a cancelled source skips `didDeliver`). If none remain, the
///    interest is dropped from the registration; if no source is left at all, the
///    registration is deleted and the token forgotten.
/// 6. **A source joining arms its interest at once** (one `epoll_ctl(MOD)`, made even if the
///    interest is armed, since it also proves the registration still exists): its first
///    readiness must not wait for the others' deliveries. Sources owing the current event
///    keep their marks; the extra report merges into their pending data.
/// 7. **A re-arm of an interest already in `armed` makes no system call.** By rule 1 the
///    kernel has it enabled, or `dispatch` is about to handle a report of it (and re-enables
///    what did not fire), so nothing is lost. With several sources, only the last to finish
///    pays the `epoll_ctl`.
/// 8. **Tokens defend against reuse.** A number closed and reused for another file gets a new
///    entry and token (`register` evicts the old entry); so does a number closed while
///    watched and reopened on the same file (same identity, but the joining `MOD` finds no
///    registration: `ENOENT`). A report with a stale token is skipped, and re-arming an
///    evicted or removed entry does nothing.
///
/// Together: an interest stays disarmed only while some source owes a delivery (it will
/// finish or leave: rules 3 and 5) or while no source could take the last report (each holds
/// the data and delivers when resumed: rule 4). So every source of a ready descriptor fires,
/// and cancelling one leaves the others firing.
final class IOEntry: Sendable {
  let fd: Int32
  let identity: FileIdentity
  let token: UInt64
  /// The driver that made the entry. It is never released (published for the process's
  /// life), so the cycle through its tables costs nothing.
  let driver: IODriver
  /// The multiplexing state (rules 1–8) behind the entry's own lock, which also serialises
  /// every `epoll_ctl` on the registration (the lock order and why one lock per entry is
  /// enough: `IODriver+Registration.swift`).
  let state: LockedValue<State>

  init(fd: Int32, identity: FileIdentity, token: UInt64, driver: IODriver) {
    self.fd = fd
    self.identity = identity
    self.token = token
    self.driver = driver
    self.state = LockedValue(State())
  }

  /// What the entry's lock protects.
  struct State {
    /// The read sources, in registration order.
    var readers = InterestSources()
    /// The write sources, in registration order.
    var writers = InterestSources()
    /// The interests enabled in the kernel now (`EPOLLIN`/`EPOLLOUT` bits; rule 1).
    var armed: UInt32 = 0
    /// Removed because its number was reused by another file while it was registered.
    var evicted = false
    /// Removed from the epoll set (its last source unregistered).
    var removed = false

    /// Whether the entry is out of the driver's tables: its registration is gone or belongs
    /// to another entry now, so no `epoll_ctl` may name its number again (rule 8).
    var isGone: Bool { evicted || removed }

    /// The sources of `interest`.
    subscript(interest: FDInterest) -> InterestSources {
      interest == .read ? readers : writers
    }

    /// Changes the sources of `interest` in place (a copy through a setter would copy their
    /// arrays on every change).
    mutating func update<T>(_ interest: FDInterest, _ body: (inout InterestSources) -> T) -> T {
      interest == .read ? body(&readers) : body(&writers)
    }

    var isEmpty: Bool { readers.isEmpty && writers.isEmpty }

    /// The `epoll_ctl` events for the armed interests: always one-shot; with the peer's
    /// half-close only while reading is armed (it is level-triggered: armed for a writer
    /// alone it would fire again and again).
    var wanted: UInt32 {
      armed | cls_epolloneshot | (armed & cls_epollin != 0 ? cls_epollrdhup : 0)
    }

    /// Rule 2 for a report of `events`: disarms the fired interests and marks their sources.
    /// The caller re-enables what stays in `armed`.
    mutating func fire(_ events: UInt32) -> Fired {
      let failed = events & (cls_epollerr | cls_epollhup) != 0
      var fired: UInt32 = 0
      // A peer's half-close (RDHUP) is read readiness: the read returns 0.
      if events & (cls_epollin | cls_epollrdhup) != 0 || failed { fired |= armed & cls_epollin }
      if events & cls_epollout != 0 || failed { fired |= armed & cls_epollout }
      armed &= ~fired
      var result = Fired()
      if fired & cls_epollin != 0 {
        readers.markAllOwing()
        result.readers = readers.cores
      }
      if fired & cls_epollout != 0 {
        writers.markAllOwing()
        result.writers = writers.cores
      }
      return result
    }
  }

  /// The sources of one interest and their marks (rule 2).
  struct InterestSources {
    /// The sources, in registration order. Snapshots of it are handed out by `fire`, so it
    /// changes only when a source joins or leaves, never per event.
    private(set) var cores: [FileDescriptorCore] = []
    /// Whether `cores[i]` owes a delivery of the last report. Never shared, so marking and
    /// releasing write in place (no copy, no allocation per event).
    private var owes: [Bool] = []
    /// How many sources owe a delivery.
    private(set) var owing = 0
    /// Whether a source finished a delivery (or left) since the last report (rules 3–5).
    var deliveredSinceFire = false

    var isEmpty: Bool { cores.isEmpty }

    func index(of core: FileDescriptorCore) -> Int? {
      cores.firstIndex { $0 === core }
    }

    mutating func add(_ core: FileDescriptorCore) {
      cores.append(core)
      owes.append(false)
    }

    /// Removes the source at `index`, releasing its mark.
    mutating func remove(at index: Int) {
      _ = release(at: index)
      cores.remove(at: index)
      owes.remove(at: index)
    }

    /// Clears the mark at `index`; returns whether there was one.
    mutating func release(at index: Int) -> Bool {
      guard owes[index] else { return false }
      owes[index] = false
      owing -= 1
      return true
    }

    /// Rule 2: every source owes a delivery of the new report.
    mutating func markAllOwing() {
      for index in owes.indices { owes[index] = true }
      owing = owes.count
      deliveredSinceFire = false
    }
  }

  /// The sources a report reaches (snapshots: handed out after the lock is released).
  struct Fired {
    var readers: [FileDescriptorCore] = []
    var writers: [FileDescriptorCore] = []
  }
}

/// A registration the kernel refused.
struct IORegistrationError: Error {
  var code: Int32
}

extension FDInterest {
  var epollBit: UInt32 { self == .read ? cls_epollin : cls_epollout }
}
