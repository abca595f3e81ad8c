import Glibc
import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

// Dispatch sources through the C API: a `CSource` wraps one LoopDispatch source of the kind
// the C type names, with the handle and mask the program passed.

/// `dispatch_source_t`.
final class CSource: CObjectBase, @unchecked Sendable {
  // @unchecked Sendable: immutable; the context (in the base) is behind its lock.
  let source: Source
  let kind: Kind
  let handle: UInt
  let mask: UInt

  enum Kind: Int32 {
    case read = 1
    case write = 2
    case timer = 3
    case signal = 4
    case dataAdd = 5
    case dataOr = 6
    case dataReplace = 7
    case proc = 8
    case memoryPressure = 9
    case vnode = 10

    /// Whether libdispatch accepts `handle` and `mask` for this type (it returns NULL
    /// otherwise): data sources take neither, fd and signal sources no mask, a timer a mask
    /// of its flags (DISPATCH_TIMER_STRICT and the private background bit) and any handle,
    /// a signal source a number from 1 to NSIG - 1. A VNODE source takes a descriptor and
    /// any mask (`vnodeMaskCheck` traps on flags Linux cannot watch).
    func accepts(handle: UInt, mask: UInt) -> Bool {
      switch self {
      case .dataAdd, .dataOr, .dataReplace: return handle == 0 && mask == 0
      case .read, .write: return mask == 0
      case .timer: return mask & ~UInt(0x3) == 0
      case .signal: return mask == 0 && handle >= 1 && handle < 65
      // The masks of these two are checked by the Swift sources, which trap on bits Linux
      // cannot report (a client bug rather than NULL: see CAPI.md).
      case .proc: return handle >= 1 && handle <= UInt(Int32.max)
      case .memoryPressure: return handle == 0
      case .vnode: return true
      }
    }
  }

  /// The C handlers set on the source (to bind their context at activation). Protected by:
  /// its lock.
  fileprivate let cHandlers = LockedValue(CHandlers())
  /// Atomic. Set by the first `dispatch_activate` or `dispatch_resume` that activates.
  let activatedFromC = Atomic<Bool>(false)

  init(source: Source, kind: Kind, handle: UInt, mask: UInt) {
    self.source = source
    self.kind = kind
    self.handle = handle
    self.mask = mask
    super.init()
    sanitizerQueue = CHandle.unretained(source.queue)
  }

  /// `dispatch_set_target_queue` on the source (before activation): its handlers and its
  /// finalizer run there.
  override func setTarget(_ queue: Queue) {
    source.setTarget(queue)
    sanitizerQueue = CHandle.unretained(queue)
    super.setTarget(queue)
  }

  deinit {
    // The program's last dispatch_release: libdispatch stops the source. Cancel it (its
    // cancel handler runs even if it was never activated or is suspended, with the context
    // bound now if it never was); the Swift source goes with this object.
    bindHandlers()
    source.cancel()
  }
}

/// A C source's handlers, kept to bind their context.
private struct CHandlers {
  var event: CSourceHandler?
  var cancel: CSourceHandler?
  var registration: CSourceHandler?
}

extension CHandle {
  static func source(_ raw: UnsafeMutableRawPointer?, _ call: StaticString) -> CSource {
    withBorrowed(raw, as: CSource.self, "source", call) { $0 }
  }
}

@_cdecl("_loopdispatch_source_create")
public func cLoopdispatchSourceCreate(
  _ tag: Int32, _ handle: UInt, _ mask: UInt, _ queue: UnsafeMutableRawPointer?
) -> UnsafeMutableRawPointer? {
  guard let kind = CSource.Kind(rawValue: tag) else {
    clientBug("dispatch_source_create called with an unknown or NULL source type")
  }
  guard kind.accepts(handle: handle, mask: mask) else { return nil }
  if kind == .vnode { checkVnodeMask(mask) }
  // As libdispatch: a NULL queue means the default global queue.
  let target = queue.map { CHandle.queue($0, "dispatch_source_create") } ?? Queue.global()
  let source: Source
  do {
    switch kind {
    case .read: source = try ReadSource(fd: Int32(truncatingIfNeeded: handle), queue: target)
    case .write: source = try WriteSource(fd: Int32(truncatingIfNeeded: handle), queue: target)
    case .timer: source = TimerSource(queue: target)
    case .signal:
      source = try SignalSource(signal: Int32(truncatingIfNeeded: handle), queue: target)
    case .dataAdd: source = DataSource(merge: .add, queue: target)
    case .dataOr: source = DataSource(merge: .or, queue: target)
    case .dataReplace: source = DataSource(merge: .replace, queue: target)
    case .proc:
      source = try procSource(pid: Int32(handle), mask: mask, queue: target)
    case .memoryPressure:
      source = try MemoryPressureSource(
        levels: .init(rawValue: mask), queue: target, label: "dispatch-memorypressure")
    case .vnode:
      source = try FileSource(
        fd: Int32(truncatingIfNeeded: handle), events: FileSource.Events(rawValue: mask),
        queue: target)
    }
  } catch {
    return nil  // libdispatch returns NULL for a source it cannot make.
  }
  return CHandle.retained(CSource(source: source, kind: kind, handle: handle, mask: mask))
}

/// `DISPATCH_SOURCE_TYPE_PROC`: a process that is gone (exited and reaped, or a pid no
/// process has now) gets a source that delivers `DISPATCH_PROC_EXIT` once, at activation, as
/// libdispatch's does where it has process sources: a watcher of a pid from elsewhere need
/// not race the exit. A pid above the kernel's `pid_max` can name no process: NULL.
private func procSource(pid: Int32, mask: UInt, queue: Queue) throws -> Source {
  do {
    return try ProcessSource(
      pid: pid, events: .init(rawValue: mask), queue: queue, label: "dispatch-proc")
  } catch EventLoopError.noSuchProcess {
    guard pid <= maximumPid() else { throw EventLoopError.noSuchProcess(pid) }
    return ProcessSource(
      exitedPid: pid, events: .init(rawValue: mask), queue: queue, label: "dispatch-proc")
  }
}

/// The kernel's `pid_max` (`/proc/sys/kernel/pid_max`; 4,194,304, the most it can be, when
/// it cannot be read).
private func maximumPid() -> Int32 {
  let fd = open("/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC)
  guard fd >= 0 else { return 4_194_304 }
  defer { close(fd) }
  var buffer = [UInt8](repeating: 0, count: 32)
  let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
  guard count > 0 else { return 4_194_304 }
  let text = String(decoding: buffer[..<count], as: UTF8.self)
  return Int32(text.trimmingSuffixNewline()) ?? 4_194_304
}

extension String {
  /// The text without its trailing newlines.
  fileprivate func trimmingSuffixNewline() -> Substring {
    var end = endIndex
    while end > startIndex, self[index(before: end)] == "\n" { end = index(before: end) }
    return self[..<end]
  }
}

/// Traps on VNODE flags Linux cannot watch (libdispatch on BSD and macOS accepts FUNLOCK; an
/// unknown bit makes it return NULL): a program that relies on them should learn at once.
private func checkVnodeMask(_ mask: UInt) {
  let unknown = mask & ~FileSource.Events.all.rawValue
  guard unknown != 0 else { return }
  if unknown & 0x100 != 0 {
    clientBug(
      "dispatch_source_create(DISPATCH_SOURCE_TYPE_VNODE) with DISPATCH_VNODE_FUNLOCK (0x100), "
        + "which Linux cannot watch: inotify reports no lock releases; remove it from the mask")
  }
  clientBug(
    "dispatch_source_create(DISPATCH_SOURCE_TYPE_VNODE) with unknown mask bits "
      + "0x\(String(unknown, radix: 16)); the DISPATCH_VNODE_* flags Linux can watch are DELETE, "
      + "WRITE, EXTEND, ATTRIB, LINK, RENAME and REVOKE (0x7f)")
}

/// A handler set from C: a block (called with its own copy, released when the handler goes)
/// or a function, called with the source's context as it stood when the source was activated
/// (or when the handler was set, on a source already active), as libdispatch binds it.
private final class CSourceHandler: @unchecked Sendable {
  // @unchecked Sendable: `bound` is behind its lock; the rest is immutable; the pointers are
  // the C caller's, given for this use.
  let invoke: @convention(c) (UnsafeMutableRawPointer?) -> Void
  let argument: UnsafeMutableRawPointer?
  let release: (@convention(c) (UnsafeRawPointer?) -> Void)?
  /// A function handler's context, once bound (the bits of the pointer).
  private let bound = LockedValue<UInt?>(nil)

  init(
    invoke: @escaping @convention(c) (UnsafeMutableRawPointer?) -> Void,
    argument: UnsafeMutableRawPointer?, release: (@convention(c) (UnsafeRawPointer?) -> Void)?
  ) {
    self.invoke = invoke
    self.argument = argument
    self.release = release
  }

  /// Fixes the context a function handler will receive (the first call wins).
  func bind(_ context: UnsafeMutableRawPointer?) {
    bound.withLock { if $0 == nil { $0 = UInt(bitPattern: context) } }
  }

  func run() {
    if let argument {
      invoke(argument)
    } else {
      invoke(bound.withLock { $0 }.flatMap { UnsafeMutableRawPointer(bitPattern: $0) })
    }
  }

  deinit {
    if let argument, let release { release(argument) }
  }
}

extension CSource {
  /// Activates (`dispatch_activate`, or the first `dispatch_resume`): binds the function
  /// handlers' context first.
  func activateFromC() {
    activatedFromC.store(true, ordering: .sequentiallyConsistent)
    bindHandlers()
    source.activate()
  }

  fileprivate func bindHandlers() {
    let context = self.context
    for handler in cHandlers.withLock({ [$0.event, $0.cancel, $0.registration] }) {
      handler?.bind(context)
    }
  }
}

@_cdecl("_loopdispatch_source_set_handler")
public func cLoopdispatchSourceSetHandler(
  _ raw: UnsafeMutableRawPointer?, _ which: Int32,
  _ invoke: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
  _ argument: UnsafeMutableRawPointer?,
  _ release: (@convention(c) (UnsafeRawPointer?) -> Void)?
) {
  let owner = CHandle.source(raw, "dispatch_source_set_handler")
  var body: (@Sendable () -> Void)?
  var handler: CSourceHandler?
  if let invoke {
    let made = CSourceHandler(invoke: invoke, argument: argument, release: release)
    // On a source already active the context binds now; otherwise at activation.
    if owner.activatedFromC.load(ordering: .sequentiallyConsistent) { made.bind(owner.context) }
    // The handler does not hold the source: a C program's last dispatch_release then
    // releases it, which cancels it (as libdispatch stops a released source).
    body = { made.run() }
    handler = made
  }
  owner.cHandlers.withLock { handlers in
    switch which {
    case 0: handlers.event = handler
    case 1: handlers.cancel = handler
    default: handlers.registration = handler
    }
  }
  switch which {
  case 0: owner.source.setEventHandler(body)
  case 1: owner.source.setCancelHandler(body)
  default: owner.source.setRegistrationHandler(body)
  }
}

@_cdecl("dispatch_source_cancel")
public func cDispatchSourceCancel(_ raw: UnsafeMutableRawPointer?) {
  CHandle.source(raw, "dispatch_source_cancel").source.cancel()
}

@_cdecl("dispatch_source_testcancel")
public func cDispatchSourceTestcancel(_ raw: UnsafeMutableRawPointer?) -> Int {
  CHandle.source(raw, "dispatch_source_testcancel").source.isCancelled ? 1 : 0
}

@_cdecl("dispatch_source_get_data")
public func cDispatchSourceGetData(_ raw: UnsafeMutableRawPointer?) -> UInt {
  CHandle.source(raw, "dispatch_source_get_data").source.data
}

@_cdecl("dispatch_source_get_handle")
public func cDispatchSourceGetHandle(_ raw: UnsafeMutableRawPointer?) -> UInt {
  CHandle.source(raw, "dispatch_source_get_handle").handle
}

@_cdecl("dispatch_source_get_mask")
public func cDispatchSourceGetMask(_ raw: UnsafeMutableRawPointer?) -> UInt {
  CHandle.source(raw, "dispatch_source_get_mask").mask
}

@_cdecl("dispatch_source_merge_data")
public func cDispatchSourceMergeData(_ raw: UnsafeMutableRawPointer?, _ value: UInt) {
  let owner = CHandle.source(raw, "dispatch_source_merge_data")
  guard let data = owner.source as? DataSource else {
    clientBug(
      "dispatch_source_merge_data on a source that is not DATA_ADD, DATA_OR or DATA_REPLACE")
  }
  data.post(value)
}

@_cdecl("dispatch_source_set_timer")
public func cDispatchSourceSetTimer(
  _ raw: UnsafeMutableRawPointer?, _ start: UInt64, _ interval: UInt64, _ leeway: UInt64
) {
  let owner = CHandle.source(raw, "dispatch_source_set_timer")
  guard let timer = owner.source as? TimerSource else {
    clientBug("dispatch_source_set_timer on a source that is not a timer source")
  }
  let deadline = CTime.deadline(start) ?? .distantFuture  // FOREVER: never fires.
  // DISPATCH_TIME_FOREVER (or 0) as the interval: fires once.
  let repeating: Duration? =
    interval == CTime.forever || interval == 0
    ? nil : .nanoseconds(Int64(min(interval, UInt64(Int64.max))))
  timer.schedule(
    deadline: deadline, repeating: repeating,
    leeway: .nanoseconds(Int64(min(leeway, UInt64(Int64.max)))))
}
