import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop

// The objects behind the C API's handles, and the calls every object answers (retain,
// release, context, finalizer, activate/suspend/resume).
//
// A handle is an `Unmanaged` pointer to a Swift object: a `Queue`, or a `CGroup` or
// `CSemaphore` (which carry the context and finalizer that C gives every object). The
// reference counts of `dispatch_retain`/`dispatch_release` are the objects' own Swift
// reference counts; a `create` call returns a +1 reference. The main and global queues
// live as long as the process, and retain and release do nothing to them, as in libdispatch.

/// A C function and the context it is called with: the C caller hands both over to the
/// runtime (possibly to another thread), as libdispatch's `_f` functions are documented to.
struct CWork: @unchecked Sendable {
  // @unchecked Sendable: the pointers are the C caller's, who passed them for exactly this
  // use; the runtime only passes `context` back to `function`.
  let function: @convention(c) (UnsafeMutableRawPointer?) -> Void
  let context: UnsafeMutableRawPointer?

  @inline(__always)
  func run() { function(context) }
}

/// A context pointer stored on an object (`dispatch_set_context`), as a Sendable value.
struct CContext: Sendable {
  let bits: UInt
  var pointer: UnsafeMutableRawPointer? { UnsafeMutableRawPointer(bitPattern: bits) }
}

/// The C context, finalizer and target of an object that is not a queue.
class CObjectBase: @unchecked Sendable {
  // @unchecked Sendable: the fields are behind `lock`; `sanitizerQueue` is written only
  // while no handler can run (creation, retarget before activation).

  /// A source's queue handle, unretained (the source holds the queue), at byte 16 of the
  /// object: where ThreadSanitizer's libdispatch interceptors read a source's target
  /// (`dispatch_queue_offsets` in Sources/CDispatch/tsan.c). Keep it the first stored
  /// property. Nil for groups and semaphores, which the interceptors never read.
  var sanitizerQueue: UnsafeMutableRawPointer?
  private struct Fields {
    var context: UnsafeMutableRawPointer?
    var finalizer: CFinalizer?
    /// Where the finalizer runs (`dispatch_set_target_queue`); nil: on the releasing thread.
    var target: Queue?
  }
  private let lock = LockedValue(Fields())

  var context: UnsafeMutableRawPointer? {
    get { lock.withLock { $0.context } }
    set { lock.withLock { $0.context = newValue } }
  }

  func setFinalizer(_ finalizer: CFinalizer?) { lock.withLock { $0.finalizer = finalizer } }

  func setTarget(_ target: Queue) { lock.withLock { $0.target = target } }

  deinit {
    // The last release. As libdispatch: the finalizer runs only for a non-NULL context, on
    // the object's target queue if one was set, else on the releasing thread.
    let fields = lock.withLock { $0 }
    guard let finalizer = fields.finalizer, let context = fields.context else { return }
    let call = CWork(function: finalizer, context: context)
    if let target = fields.target {
      target.async { call.run() }
    } else {
      call.run()
    }
  }
}

public typealias CFinalizer = @convention(c) (UnsafeMutableRawPointer?) -> Void

/// `dispatch_group_t`.
final class CGroup: CObjectBase, @unchecked Sendable {
  let group = Group()

  override init() {
    super.init()
    // Work in flight keeps this object (and so its C handle's finalizer) alive, as
    // libdispatch's groups retain themselves while their count is not zero.
    group.keepAlive(by: self)
  }
}

/// `dispatch_semaphore_t`.
final class CSemaphore: CObjectBase, @unchecked Sendable {
  let semaphore: Semaphore
  let initialValue: Int
  init(value: Int) {
    semaphore = Semaphore(value: value)
    initialValue = value
  }
}

enum CHandle {
  /// The object behind a handle (+0).
  @inline(__always)
  static func object(_ raw: UnsafeMutableRawPointer) -> AnyObject {
    Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue()
  }

  /// Runs `body` with the object of (final) class `Kind` behind a handle, borrowed: no
  /// retain and release around the call (they were about 9 of the 14 ns a C
  /// `dispatch_sync_f` cost over the Swift `Queue.sync`, perf). Safe: the caller's reference
  /// keeps the object alive for the call, as the C API requires of every handle passed in.
  /// `kind` names it in the client-bug crash for NULL or another kind of object.
  @inline(__always)
  static func withBorrowed<Kind: AnyObject, Result>(
    _ raw: UnsafeMutableRawPointer?, as _: Kind.Type, _ kind: StaticString,
    _ call: StaticString, _ body: (Kind) -> Result
  ) -> Result {
    guard let raw else { nullHandle(kind, call) }
    return Unmanaged<AnyObject>.fromOpaque(raw)._withUnsafeGuaranteedRef { object in
      // The classes used here are final: an exact type check is enough, and no cast retains.
      guard type(of: object) == Kind.self else { wrongHandle(kind, call) }
      return body(unsafeDowncast(object, to: Kind.self))
    }
  }

  /// The client-bug crash for a NULL handle; out of line, so that the calls that check their
  /// handles inline (`withBorrowed`) keep the message building off their fast path.
  @inline(never)
  static func nullHandle(_ kind: StaticString, _ call: StaticString) -> Never {
    clientBug("\(call) called with a NULL \(kind)")
  }

  /// The client-bug crash for a handle to another kind of object (see `nullHandle`).
  @inline(never)
  static func wrongHandle(_ kind: StaticString, _ call: StaticString) -> Never {
    clientBug("\(call) called with an object that is not a \(kind)")
  }

  @inline(__always)
  static func withQueue<Result>(
    _ raw: UnsafeMutableRawPointer?, _ call: StaticString, _ body: (Queue) -> Result
  ) -> Result {
    withBorrowed(raw, as: Queue.self, "queue", call, body)
  }

  @inline(__always)
  static func withGroup<Result>(
    _ raw: UnsafeMutableRawPointer?, _ call: StaticString, _ body: (CGroup) -> Result
  ) -> Result {
    withBorrowed(raw, as: CGroup.self, "group", call, body)
  }

  /// The queue behind a handle (a strong reference, for callers that keep it past the call),
  /// or a client-bug crash naming the call.
  static func queue(_ raw: UnsafeMutableRawPointer?, _ call: StaticString) -> Queue {
    withBorrowed(raw, as: Queue.self, "queue", call) { $0 }
  }

  static func group(_ raw: UnsafeMutableRawPointer?, _ call: StaticString) -> CGroup {
    withBorrowed(raw, as: CGroup.self, "group", call) { $0 }
  }

  static func semaphore(_ raw: UnsafeMutableRawPointer?, _ call: StaticString) -> CSemaphore {
    withBorrowed(raw, as: CSemaphore.self, "semaphore", call) { $0 }
  }

  /// A +1 handle for a new object.
  static func retained(_ object: AnyObject) -> UnsafeMutableRawPointer {
    Unmanaged.passRetained(object).toOpaque()
  }

  /// A +0 handle (the main and global queues, `dispatch_get_current_queue`).
  static func unretained(_ object: AnyObject) -> UnsafeMutableRawPointer {
    Unmanaged.passUnretained(object).toOpaque()
  }

  /// Whether the object lives as long as the process (retain and release ignore it).
  static func isProcessLifetime(_ object: AnyObject) -> Bool {
    (object as? Queue)?.livesForTheProcess ?? false
  }
}

// `dispatch_retain` is in C (Sources/CDispatch/data.c): it leaves dispatch_data_empty alone.
@_cdecl("_loopdispatch_retain")
public func cDispatchRetain(_ object: UnsafeMutableRawPointer?) {
  let object = nonNull(object, "dispatch_retain")
  if CHandle.isProcessLifetime(CHandle.object(object)) { return }
  _ = Unmanaged<AnyObject>.fromOpaque(object).retain()
}

// `dispatch_release` is in C (Sources/CDispatch/data.c): it leaves dispatch_data_empty alone.
@_cdecl("_loopdispatch_release")
public func cDispatchRelease(_ object: UnsafeMutableRawPointer?) {
  let object = nonNull(object, "dispatch_release")
  if CHandle.isProcessLifetime(CHandle.object(object)) { return }
  Unmanaged<AnyObject>.fromOpaque(object).release()
}

// `dispatch_get_context` is in C (Sources/CDispatch/data.c): it leaves dispatch_data_empty alone.
@_cdecl("_loopdispatch_get_context")
public func cDispatchGetContext(_ object: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
  let object = nonNull(object, "dispatch_get_context")
  switch CHandle.object(object) {
  case let queue as Queue: return (queue.context as? CContext)?.pointer
  case let other as CObjectBase: return other.context
  default: clientBug("dispatch_get_context called with an unknown object")
  }
}

// `dispatch_set_context` is in C (Sources/CDispatch/data.c): it leaves dispatch_data_empty alone.
@_cdecl("_loopdispatch_set_context")
public func cDispatchSetContext(
  _ object: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?
) {
  let object = nonNull(object, "dispatch_set_context")
  switch CHandle.object(object) {
  case let queue as Queue: queue.context = CContext(bits: UInt(bitPattern: context))
  case let other as CObjectBase: other.context = context
  default: clientBug("dispatch_set_context called with an unknown object")
  }
}

// `dispatch_set_finalizer_f` is in C (Sources/CDispatch/data.c): it leaves dispatch_data_empty alone.
@_cdecl("_loopdispatch_set_finalizer_f")
public func cDispatchSetFinalizerF(
  _ object: UnsafeMutableRawPointer?, _ finalizer: CFinalizer?
) {
  let object = nonNull(object, "dispatch_set_finalizer_f")
  switch CHandle.object(object) {
  case let queue as Queue:
    guard let finalizer else {
      queue.setFinalizer { _ in }
      return
    }
    let call = CWork(function: finalizer, context: nil)
    // As libdispatch: a finalizer is called only for a non-NULL context.
    queue.setFinalizer { value in
      if let context = (value as? CContext)?.pointer { call.function(context) }
    }
  case let other as CObjectBase: other.setFinalizer(finalizer)
  default: clientBug("dispatch_set_finalizer_f called with an unknown object")
  }
}

// dispatch_activate, dispatch_suspend and dispatch_resume act on queues and sources only; on
// any other dispatch object (a channel, a group, a semaphore, data) they do nothing, as in
// libdispatch, which checks for the queue cluster and returns otherwise.

@_cdecl("dispatch_activate")
public func cDispatchActivate(_ object: UnsafeMutableRawPointer?) {
  switch CHandle.object(nonNull(object, "dispatch_activate")) {
  case let queue as Queue: queue.activate()
  case let source as CSource: source.activateFromC()
  case is CObjectBase: return
  default: wrongKind("dispatch_activate", "a queue or source")
  }
}

@_cdecl("dispatch_suspend")
public func cDispatchSuspend(_ object: UnsafeMutableRawPointer?) {
  switch CHandle.object(nonNull(object, "dispatch_suspend")) {
  case let queue as Queue: queue.suspend()
  case let source as CSource: source.source.suspend()
  case is CObjectBase: return
  default: wrongKind("dispatch_suspend", "a queue or source")
  }
}

@_cdecl("dispatch_resume")
public func cDispatchResume(_ object: UnsafeMutableRawPointer?) {
  switch CHandle.object(nonNull(object, "dispatch_resume")) {
  case let queue as Queue: queue.resume()
  // Resuming a source never activated activates it, as in libdispatch.
  case let source as CSource:
    if source.source.resumeWouldActivate {
      source.activateFromC()
    } else {
      source.source.resume()
    }
  case is CObjectBase: return
  default: wrongKind("dispatch_resume", "a queue or source")
  }
}

/// A client-bug crash: `call` got a handle that is not `expected` (e.g. "a queue").
func wrongKind(_ call: StaticString, _ expected: StaticString) -> Never {
  clientBug("\(call) called with an object that is not \(expected)")
}

/// `object`, or a client-bug crash naming `call` for NULL.
func nonNull(_ object: UnsafeMutableRawPointer?, _ call: StaticString) -> UnsafeMutableRawPointer {
  guard let object else { clientBug("\(call) called with NULL") }
  return object
}

@_cdecl("_loopdispatch_describe")
public func cLoopdispatchDescribe(
  _ object: UnsafeMutableRawPointer?, _ buffer: UnsafeMutablePointer<CChar>?, _ size: Int
) {
  guard let buffer, size > 0 else { return }
  let text: String
  if let object {
    switch CHandle.object(object) {
    case let queue as Queue: text = "queue \"\(queue.label)\""
    case is CGroup: text = "group"
    case let source as CSource: text = "source (\(source.kind), handle \(source.handle))"
    case let semaphore as CSemaphore: text = "semaphore (initial value \(semaphore.initialValue))"
    default: text = "object"
    }
  } else {
    text = "NULL"
  }
  let bytes = Array(text.utf8.prefix(size - 1))
  for (index, byte) in bytes.enumerated() { buffer[index] = CChar(bitPattern: byte) }
  buffer[bytes.count] = 0
}
