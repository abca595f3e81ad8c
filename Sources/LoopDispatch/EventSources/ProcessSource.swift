import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop

/// Delivers the exit of a process to a queue, once. ``Source/data`` is
/// ``Events-swift.struct/exit`` (libdispatch's `DISPATCH_PROC_EXIT`, `0x80000000`).
///
/// The process may be a child of this one or any process the caller may see. Watching does
/// not reap: after the handler runs, the program's own `waitpid` still collects a child's
/// status (the source only learns that the process ended, through a `pidfd` that becomes
/// readable). A process that has already exited but not been reaped (a zombie) fires at once
/// on activation.
///
/// Linux reports only the exit of a process to a watcher: asking for
/// ``Events-swift.struct/fork``, ``Events-swift.struct/exec`` or
/// ``Events-swift.struct/signal`` is a client bug and traps, rather than giving a source that
/// never fires.
///
/// The process is pinned when the source is created, so a process id reused after the exit
/// cannot be mistaken for it.
///
/// Thread-safety: every method may be called from any thread.
public final class ProcessSource: Source, @unchecked Sendable {
  /// Process events a source may name, with libdispatch's values (`DISPATCH_PROC_*`). Only
  /// ``exit`` can be watched on Linux.
  public struct Events: OptionSet, Sendable, Hashable {
    /// The bits, as `DISPATCH_PROC_*`.
    public let rawValue: UInt
    /// Events with the given `DISPATCH_PROC_*` bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }
    /// The process exited (`DISPATCH_PROC_EXIT`).
    public static let exit = Events(rawValue: 0x8000_0000)
    /// The process forked (`DISPATCH_PROC_FORK`); not reportable on Linux: a client bug.
    public static let fork = Events(rawValue: 0x4000_0000)
    /// The process called exec (`DISPATCH_PROC_EXEC`); not reportable on Linux: a client bug.
    public static let exec = Events(rawValue: 0x2000_0000)
    /// The process was sent a signal (`DISPATCH_PROC_SIGNAL`); not reportable on Linux: a
    /// client bug.
    public static let signal = Events(rawValue: 0x0800_0000)

    static let known: Events = [.exit, .fork, .exec, .signal]
  }

  /// The watched process.
  public let pid: Int32
  /// The events asked for (always ``Events-swift.struct/exit``), as C's
  /// `dispatch_source_get_mask`.
  public let mask: Events

  /// Creates an inactive source for the exit of process `pid`, whose handler runs on `queue`.
  ///
  /// - Parameters:
  ///   - pid: the process to watch; it must exist now (a zombie counts).
  ///   - events: must be ``Events-swift.struct/exit``; any other event, unknown bits or no
  ///     event at all is a client bug and traps.
  ///   - queue: the handlers' queue (the main queue works too).
  ///   - label: a name for diagnostics.
  /// - Throws: ``EventLoopError/noSuchProcess(_:)`` if no process has this id (or it is not
  ///   positive); ``EventLoopError/unsupported(feature:reason:)`` where the kernel lacks
  ///   `pidfd_open` (Linux before 5.3); ``EventLoopError/registrationFailed(errno:)`` for any
  ///   other refusal (such as no descriptor left, `EMFILE`).
  /// Thread-safety: any thread.
  public init(
    pid: Int32, events: Events = .exit, queue: Queue = .global(), label: String = "process-source"
  ) throws(EventLoopError) {
    Self.checkEvents(events, label: label)
    self.pid = pid
    self.mask = events
    let core = try ProcessCore(pid: pid, queue: queue, label: "process source \"\(label)\"")
    super.init(core: core, label: label)
  }

  /// A source for a process that has already exited and been reaped (or, indistinguishably,
  /// never existed): it fires ``Events-swift.struct/exit`` once, at activation. The C API's
  /// `DISPATCH_SOURCE_TYPE_PROC` makes one where the Swift initializer throws
  /// ``EventLoopError/noSuchProcess(_:)``, as libdispatch does where it has process sources:
  /// C code that watches a pid it got from elsewhere must not have to race the exit. The
  /// Swift API throws instead: a caller that can handle the error learns that the pid named
  /// nothing, rather than an exit that may never have been its process's.
  package init(
    exitedPid pid: Int32, events: Events, queue: Queue, label: String
  ) {
    Self.checkEvents(events, label: label)
    self.pid = pid
    self.mask = events
    let core = ProcessCore(exitedPid: pid, queue: queue, label: "process source \"\(label)\"")
    super.init(core: core, label: label)
  }

  /// Traps for any event but `exit`: Linux cannot report them, and silence would hide it.
  private static func checkEvents(_ events: Events, label: String) {
    let unknown = events.rawValue & ~Events.known.rawValue
    if unknown != 0 {
      clientBug(
        "process source \"\(label)\" given unknown event bits 0x\(String(unknown, radix: 16)); "
          + "the only event Linux reports is DISPATCH_PROC_EXIT (.exit, 0x80000000)")
    }
    for (event, name) in [
      (Events.fork, "DISPATCH_PROC_FORK (.fork)"), (.exec, "DISPATCH_PROC_EXEC (.exec)"),
      (.signal, "DISPATCH_PROC_SIGNAL (.signal)"),
    ] where events.contains(event) {
      clientBug(
        "process source \"\(label)\" asks for \(name), which Linux cannot report; "
          + "only DISPATCH_PROC_EXIT (.exit) is supported")
    }
    if !events.contains(.exit) {
      clientBug(
        "process source \"\(label)\" asks for no event; pass DISPATCH_PROC_EXIT (.exit)")
    }
  }
}

/// The engine of a ``ProcessSource``: a pidfd, owned, registered with the I/O driver.
///
/// Walk-through:
/// 1. `init` opens a pidfd for the process (`pidfd_open`): this pins the process, so a
///    reused id cannot be confused with it. The descriptor is the source's own.
/// 2. `arm` (activation) registers it with the I/O driver for `EPOLLIN`, one-shot
///    (`Delivery/IODriver+Owned.swift`), for every target, the main queue included: the
///    main loop's libevent watch would do too, but one path serves all targets.
/// 3. When the process exits the pidfd becomes readable; the driver thread merges
///    `DISPATCH_PROC_EXIT` and schedules the delivery (inline on an idle serial queue, else
///    queued on the target: one hop, to the main thread for a main-queue source).
/// 4. Nothing re-arms it: the registration stays disarmed, so the pidfd, which stays readable
///    for good, is reported once and never makes the poller spin. Reading readiness never
///    reaps the process.
/// 5. Teardown (cancel) removes the registration, then closes the pidfd.
final class ProcessCore: SourceCore, OwnedDescriptorWatcher, @unchecked Sendable {
  // @unchecked Sendable: `watchState` is behind its lock; `pidfd` and `label` are immutable;
  // the base documents the rest.
  let pidfd: Int32
  let label: String

  private struct WatchState {
    var registration: OwnedRegistration?
    /// Set by teardown, which closes the pidfd: `arm` must then register nothing.
    var tornDown = false
  }
  /// Protected by: its lock.
  private let watchState = LockedValue(WatchState())

  init(pid: Int32, queue: Queue, label: String) throws(EventLoopError) {
    guard pid > 0 else { throw .noSuchProcess(pid) }
    let fd = cls_pidfd_open(pid)
    if fd < 0 {
      switch errno {
      case ESRCH: throw .noSuchProcess(pid)
      case ENOSYS:
        throw .unsupported(
          feature: "watching a process's exit",
          reason: "the kernel has no pidfd_open system call (ENOSYS; Linux 5.3 or later has it)")
      case let code: throw .registrationFailed(errno: code)
      }
    }
    pidfd = fd  // pidfd_open always sets close-on-exec.
    self.label = label
    super.init(queue: queue, merge: .or)
  }

  /// A process already gone: no pidfd (-1); the exit is signalled at activation.
  init(exitedPid pid: Int32, queue: Queue, label: String) {
    pidfd = -1
    self.label = label
    super.init(queue: queue, merge: .or)
  }

  override func arm() {
    guard pidfd >= 0 else {
      // From `activate()`: never inside the client's call.
      signal(UInt(ProcessSource.Events.exit.rawValue), mayRunInline: false)
      return
    }
    watchState.withLock { state in
      guard !state.tornDown else { return }
      let registered = IODriver.start().flatMap {
        $0.registerOwned(fd: pidfd, events: cls_epollin, watcher: self)
      }
      switch registered {
      case .success(let registration): state.registration = registration
      case .failure(let error):
        let failure = EventLoopError.registrationFailed(errno: error.code)
        recordRegistrationError(failure)
        writeStandardError(
          "LoopDispatch: \(label) could not watch its process: \(failure); the source will not fire\n"
        )
      }
    }
  }

  /// Driver thread: the process exited (step 3). Never re-armed (step 4).
  func ownedDescriptorFired(_ registration: OwnedRegistration, events: UInt32) {
    signal(UInt(ProcessSource.Events.exit.rawValue))
  }

  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    let registration = watchState.withLock { state -> OwnedRegistration? in
      state.tornDown = true
      defer { state.registration = nil }
      return state.registration
    }
    if let registration { registration.driver.unregisterOwned(registration) }
    // No epoll_ctl touches the pidfd any more (rule 4 of `IODriver+Owned.swift`).
    if pidfd >= 0 { close(pidfd) }
    completion()
  }
}
