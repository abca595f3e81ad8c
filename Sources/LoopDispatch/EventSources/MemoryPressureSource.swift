import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Delivers the system's memory pressure to a queue, from Linux's pressure stall information
/// (PSI). ``Source/data`` holds the ``Levels-swift.struct`` seen since the last handler run
/// (merged with OR, as in libdispatch), limited to those asked for.
///
/// The levels, each measured over a 2-second window (the shortest a process without
/// `CAP_SYS_RESOURCE` may ask the kernel for):
/// - ``Levels-swift.struct/warning``: some task spent at least 300 ms of the window (15 %)
///   stalled waiting for memory (PSI trigger `some 300000 2000000`).
/// - ``Levels-swift.struct/critical``: every non-idle task at once spent at least 200 ms of the
///   window (10 %) stalled on memory (`full 200000 2000000`).
/// - ``Levels-swift.struct/normal``: after a warning or critical report, two whole windows
///   (4 seconds) passed with no further report; reported once per episode. While a warning
///   or critical report still waits for its handler (a busy queue), the wait starts again:
///   `normal` never comes before the report it ends. A source that asks
///   only for `normal` still watches the warning trigger, to know when an episode starts.
///
/// While pressure lasts the kernel reports at most once per window, so a handler sees a
/// warning or critical level about every 2 seconds.
///
/// The pressure file is the process's cgroup v2 `memory.pressure` when the process is in a
/// cgroup v2 that has one, else `/proc/pressure/memory` (the whole system). Creation fails
/// where neither exists (a kernel built without PSI, or booted with `psi=0`).
///
/// Thread-safety: every method may be called from any thread.
public final class MemoryPressureSource: Source, @unchecked Sendable {
  /// Memory pressure levels, with libdispatch's values (`DISPATCH_MEMORYPRESSURE_*`).
  public struct Levels: OptionSet, Sendable, Hashable {
    /// The bits, as `DISPATCH_MEMORYPRESSURE_*`.
    public let rawValue: UInt
    /// Levels with the given `DISPATCH_MEMORYPRESSURE_*` bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }
    /// Pressure fell back after a warning or critical report (`DISPATCH_MEMORYPRESSURE_NORMAL`).
    public static let normal = Levels(rawValue: 0x1)
    /// Tasks stall on memory (`DISPATCH_MEMORYPRESSURE_WARN`).
    public static let warning = Levels(rawValue: 0x2)
    /// The whole workload stalls on memory (`DISPATCH_MEMORYPRESSURE_CRITICAL`).
    public static let critical = Levels(rawValue: 0x4)
    /// Every level.
    public static let all: Levels = [.normal, .warning, .critical]
  }

  /// The levels asked for, as C's `dispatch_source_get_mask`.
  public let mask: Levels

  /// Quiet periods that ended while a report was still being delivered, and started again
  /// (step 5 of `MemoryPressureCore`), in this process; for tests.
  package static let quietPeriodsRestarted = Atomic<Int>(0)

  /// The pressure file a source created now would watch (for tests and diagnostics).
  package static var defaultPressureFile: String { MemoryPressureCore.defaultPressureFile() }

  /// Creates an inactive memory-pressure source whose handler runs on `queue`.
  ///
  /// - Parameters:
  ///   - levels: the levels to report; unknown bits or no level at all are a client bug and
  ///     trap.
  ///   - queue: the handlers' queue (the main queue works too).
  ///   - label: a name for diagnostics.
  /// - Throws: ``EventLoopError/unsupported(feature:reason:)`` naming the pressure file when
  ///   the system has no pressure stall information or refuses the trigger (a write that
  ///   takes only part of it included).
  /// Thread-safety: any thread.
  public convenience init(
    levels: Levels = .all, queue: Queue = .global(), label: String = "memory-pressure-source"
  ) throws(EventLoopError) {
    try self.init(
      levels: levels, pressureFile: MemoryPressureCore.defaultPressureFile(), queue: queue,
      label: label)
  }

  /// As the public initialiser, with the pressure file named (tests point it at a file that
  /// does not exist) and the quiet period before `normal` chosen.
  package convenience init(
    levels: Levels, pressureFile: String, quietPeriod: Duration = MemoryPressureCore.quietPeriod,
    queue: Queue, label: String
  ) throws(EventLoopError) {
    Self.checkLevels(levels, label: label)
    let triggers = try MemoryPressureCore.openTriggers(pressureFile, for: levels)
    self.init(
      levels: levels, triggers: triggers, quietPeriod: quietPeriod, queue: queue, label: label)
  }

  /// A source on descriptors already set up, each reporting one level when it signals
  /// `EPOLLPRI` (tests use sockets with urgent data). The source owns and closes them.
  package convenience init(
    levels: Levels, descriptors: [(fd: Int32, level: Levels)], quietPeriod: Duration,
    queue: Queue, label: String
  ) {
    Self.checkLevels(levels, label: label)
    let triggers = descriptors.map {
      MemoryPressureCore.Trigger(fd: $0.fd, level: $0.level.rawValue)
    }
    self.init(
      levels: levels, triggers: triggers, quietPeriod: quietPeriod, queue: queue, label: label)
  }

  private init(
    levels: Levels, triggers: [MemoryPressureCore.Trigger], quietPeriod: Duration, queue: Queue,
    label: String
  ) {
    mask = levels
    let core = MemoryPressureCore(
      triggers: triggers, reported: levels.rawValue, quietPeriod: quietPeriod, queue: queue,
      label: "memory pressure source \"\(label)\"")
    super.init(core: core, label: label)
  }

  private static func checkLevels(_ levels: Levels, label: String) {
    let unknown = levels.rawValue & ~Levels.all.rawValue
    if unknown != 0 {
      clientBug(
        "memory pressure source \"\(label)\" given unknown level bits 0x\(String(unknown, radix: 16)); "
          + "the levels are DISPATCH_MEMORYPRESSURE_NORMAL (0x1), DISPATCH_MEMORYPRESSURE_WARN (0x2) "
          + "and DISPATCH_MEMORYPRESSURE_CRITICAL (0x4)")
    }
    if levels.isEmpty {
      clientBug(
        "memory pressure source \"\(label)\" asks for no level; pass DISPATCH_MEMORYPRESSURE_NORMAL, "
          + "_WARN or _CRITICAL (.normal, .warning, .critical)")
    }
  }
}

/// The engine of a ``MemoryPressureSource``: one PSI trigger descriptor per level watched,
/// owned, registered with the I/O driver for `EPOLLPRI`.
///
/// Walk-through:
/// 1. Creation opens the pressure file once per trigger (warning: for `.warning` or
///    `.normal`; critical: for `.critical`) and writes the trigger to it; the kernel refuses a
///    second trigger on one descriptor, hence two descriptors when both are asked for.
/// 2. `arm` registers each descriptor one-shot for `EPOLLPRI` (`Delivery/IODriver+Owned.swift`).
/// 3. When the stall in the window passes the threshold, the kernel wakes the poller (at most
///    once per window per trigger). The driver thread records the episode (and, if `.normal`
///    is asked for, restarts the quiet timer on the service loop) and merges the level if it
///    was asked for; the delivery is inline on an idle serial queue, else queued. A level
///    that was not asked for (the warning trigger watched only for `.normal`) re-arms at once.
/// 4. After each delivery the thread that ran it re-arms the triggers (`epoll_ctl(MOD)`):
///    polling a trigger consumes its event, so a re-armed trigger reports only a new one.
/// 5. The quiet timer firing with no report since ends the episode and merges `.normal`,
///    unless a report is still being delivered (its registration disarmed until the re-arm
///    of step 4: a handler held up on a busy queue): the pressure may well last, and no
///    later report could have come meanwhile, so the timer starts again instead.
/// 6. Teardown cancels the timer, removes the registrations, then closes the descriptors.
final class MemoryPressureCore: SourceCore, OwnedDescriptorWatcher, @unchecked Sendable {
  // @unchecked Sendable: `state` is behind its lock; the rest is immutable; the base
  // documents its own.

  /// One trigger descriptor and the level it reports.
  struct Trigger {
    let fd: Int32
    let level: UInt
  }

  /// The warning trigger: some task stalled 300 ms of a 2 s window. Windows are multiples of
  /// 2 s: the kernel refuses shorter ones (`EINVAL`) without `CAP_SYS_RESOURCE`.
  static let warningTrigger = "some 300000 2000000"
  /// The critical trigger: all non-idle tasks stalled 200 ms of a 2 s window.
  static let criticalTrigger = "full 200000 2000000"
  /// How long after the last report `.normal` is reported: two trigger windows.
  package static let quietPeriod = Duration.seconds(4)

  let triggers: [Trigger]
  /// The levels asked for.
  let reported: UInt
  let quietPeriod: Duration
  let label: String

  private struct State {
    var registrations: [OwnedRegistration] = []
    var tornDown = false
    /// Whether a warning or critical report came and `.normal` has not followed yet.
    var elevated = false
    /// Counts reports, so a quiet timer started before the latest report does nothing.
    var episodeGeneration: UInt64 = 0
    var quietTimer: LoopTimer?
  }
  /// Protected by: its lock.
  private let state = LockedValue(State())

  init(triggers: [Trigger], reported: UInt, quietPeriod: Duration, queue: Queue, label: String) {
    self.triggers = triggers
    self.reported = reported
    self.quietPeriod = quietPeriod
    self.label = label
    super.init(queue: queue, merge: .or)
  }

  // MARK: Creation

  /// The process's cgroup v2 `memory.pressure` if it has one it may write, else
  /// `/proc/pressure/memory`.
  static func defaultPressureFile() -> String {
    if let group = cgroupV2Path(), group != "/" {
      let candidate = "/sys/fs/cgroup" + group + "/memory.pressure"
      if access(candidate, R_OK | W_OK) == 0 { return candidate }
    }
    return "/proc/pressure/memory"
  }

  /// The path of the `0::` (cgroup v2) line of /proc/self/cgroup, if any.
  private static func cgroupV2Path() -> String? {
    let fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
      let count = read(fd, &chunk, chunk.count)
      if count < 0 && errno == EINTR { continue }
      guard count > 0 else { break }
      bytes += chunk[0..<count]
    }
    for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n")
    where line.hasPrefix("0::") {
      return String(line.dropFirst(3))
    }
    return nil
  }

  /// Opens `path` once per trigger `levels` needs and writes the trigger. Closes what it
  /// opened and throws if the file is missing or refuses a trigger (an error, or a write that
  /// takes only part of it).
  static func openTriggers(
    _ path: String, for levels: MemoryPressureSource.Levels
  ) throws(EventLoopError) -> [Trigger] {
    var wanted: [(String, UInt)] = []
    if !levels.isDisjoint(with: [.warning, .normal]) {
      wanted.append((warningTrigger, MemoryPressureSource.Levels.warning.rawValue))
    }
    if levels.contains(.critical) {
      wanted.append((criticalTrigger, MemoryPressureSource.Levels.critical.rawValue))
    }
    var opened: [Trigger] = []
    for (text, level) in wanted {
      do throws(EventLoopError) {
        opened.append(Trigger(fd: try openTrigger(path, text), level: level))
      } catch {
        for trigger in opened { close(trigger.fd) }
        throw error
      }
    }
    return opened
  }

  private static func openTrigger(_ path: String, _ trigger: String) throws(EventLoopError) -> Int32
  {
    let feature = "memory pressure notification"
    var fd: Int32
    repeat { fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC) } while fd < 0 && errno == EINTR
    if fd < 0 {
      let code = errno
      let reason =
        code == ENOENT
        ? "\(path) does not exist (the kernel has no pressure stall information: it needs "
          + "CONFIG_PSI, and not psi=0 on its command line)"
        : "\(path) cannot be opened for reading and writing (\(errorName(code)))"
      throw .unsupported(feature: feature, reason: reason)
    }
    // The kernel takes the trigger with its terminating NUL, in one write: a write that took
    // only part of it cannot have set the trigger asked for, and a second write with the
    // rest would not make one either (the kernel parses each write alone).
    var bytes = Array(trigger.utf8)
    bytes.append(0)
    var written: Int
    repeat { written = write(fd, &bytes, bytes.count) } while written < 0 && errno == EINTR
    if written < 0 {
      let code = errno
      close(fd)
      throw .unsupported(
        feature: feature,
        reason: "\(path) refused the trigger \"\(trigger)\" (\(errorName(code)))")
    }
    if written != bytes.count {
      close(fd)
      throw .unsupported(
        feature: feature,
        reason: "\(path) took only \(written) of the \(bytes.count) bytes of the trigger "
          + "\"\(trigger)\" (a short write, which sets no trigger)")
    }
    return fd
  }

  private static func errorName(_ code: Int32) -> String {
    switch code {
    case ENOENT: "ENOENT"
    case EOPNOTSUPP: "EOPNOTSUPP: pressure stall information is disabled"
    case EACCES: "EACCES"
    case EPERM: "EPERM"
    case EINVAL: "EINVAL"
    case EBUSY: "EBUSY"
    default: "errno \(code)"
    }
  }

  // MARK: Source hooks

  override func arm() {
    state.withLock { state in
      guard !state.tornDown else { return }
      for trigger in triggers {
        let registered = IODriver.start().flatMap {
          $0.registerOwned(fd: trigger.fd, events: cls_epollpri, watcher: self)
        }
        switch registered {
        case .success(let registration): state.registrations.append(registration)
        case .failure(let error):
          let failure = EventLoopError.registrationFailed(errno: error.code)
          recordRegistrationError(failure)
          writeStandardError(
            "LoopDispatch: \(label) could not watch its pressure trigger: \(failure); "
              + "it will not report that level\n")
        }
      }
    }
  }

  /// Driver thread: a trigger reported (step 3).
  func ownedDescriptorFired(_ registration: OwnedRegistration, events: UInt32) {
    let level = triggers.first { $0.fd == registration.fd }?.level ?? 0
    let live = state.withLock { state -> Bool in
      guard !state.tornDown else { return false }
      state.elevated = true
      state.episodeGeneration &+= 1
      if reported & MemoryPressureSource.Levels.normal.rawValue != 0 {
        state.quietTimer?.cancel()
        let generation = state.episodeGeneration
        // Weak: a cancelled source's timer must not keep its core alive.
        state.quietTimer = ServiceLoop.shared.schedule(after: quietPeriod) { [weak self] in
          self?.quietPeriodEnded(generation)
        }
      }
      return true
    }
    guard live else { return }
    if level & reported != 0 {
      signal(level & reported)
    } else {
      registration.driver.rearmOwned(registration)  // Watched only to start episodes.
    }
  }

  /// Service loop thread (step 5).
  private func quietPeriodEnded(_ generation: UInt64) {
    // Read outside `state`'s lock: the driver's lock is never taken inside it.
    let registrations = state.withLock { $0.registrations }
    let reportInFlight = registrations.contains { $0.driver.isDisarmed($0) }
    let ended = state.withLock { state -> Bool in
      guard !state.tornDown, state.elevated, state.episodeGeneration == generation else {
        return false
      }
      if reportInFlight {
        MemoryPressureSource.quietPeriodsRestarted.wrappingAdd(1, ordering: .relaxed)
        // Weak: as in `ownedDescriptorFired`.
        state.quietTimer = ServiceLoop.shared.schedule(after: quietPeriod) { [weak self] in
          self?.quietPeriodEnded(generation)
        }
        return false
      }
      state.elevated = false
      state.quietTimer = nil
      return true
    }
    if ended { signal(MemoryPressureSource.Levels.normal.rawValue) }
  }

  /// Step 4: re-arms every trigger (a no-op, without a system call, for one still armed).
  override func didDeliver() {
    for registration in state.withLock({ $0.registrations }) {
      registration.driver.rearmOwned(registration)
    }
  }

  override func teardown(_ completion: @escaping @Sendable () -> Void) {
    let (registrations, timer) = state.withLock { state -> ([OwnedRegistration], LoopTimer?) in
      state.tornDown = true
      defer {
        state.registrations = []
        state.quietTimer = nil
      }
      return (state.registrations, state.quietTimer)
    }
    timer?.cancel()
    for registration in registrations { registration.driver.unregisterOwned(registration) }
    // No epoll_ctl touches the descriptors any more (rule 4 of `IODriver+Owned.swift`).
    for trigger in triggers { close(trigger.fd) }
    completion()
  }
}
