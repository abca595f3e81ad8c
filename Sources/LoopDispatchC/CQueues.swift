import CLoopShims
import Glibc
import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop

// Queues through the C API: creation, the main and global queues, labels, targets, and the
// `_f` submission functions (the block forms are in Sources/CDispatch/blocks.c).

/// Labels as C strings that stay valid for the queue's life: kept on the queue as a specific
/// value that frees the copy when the queue goes away.
private final class CLabel: Sendable {
  // Safe to share: written once in init, freed once in deinit.
  let bits: UInt
  init(_ label: String) { bits = UInt(bitPattern: strdup(label)) }
  var pointer: UnsafePointer<CChar> { UnsafePointer(bitPattern: bits)! }
  deinit { free(UnsafeMutableRawPointer(bitPattern: bits)) }
}

private let labelKey = SpecificKey<CLabel>()

/// The QoS class and relative priority a C queue was created with
/// (`dispatch_queue_get_qos_class`), kept on the queue as a specific value.
private struct CQueueQoS: Sendable {
  let qos: UInt32
  let relativePriority: Int32
}

private let qosKey = SpecificKey<CQueueQoS>()

/// Held while a label is installed on a queue made in Swift; counts the installations.
private let labelInstallation = LockedValue(0)

/// The C labels of the main and global queues (they live as long as the process).
private let processLifetimeLabels: [ObjectIdentifier: CLabel] = {
  var labels = [ObjectIdentifier(Queue.main): CLabel(Queue.main.label)]
  for priority in Priority.allCases {
    for queue in [Queue.global(priority), Queue.global(priority, overcommit: true)] {
      labels[ObjectIdentifier(queue)] = CLabel(queue.label)
    }
  }
  return labels
}()

@_cdecl("_loopdispatch_queue_create")
public func cLoopdispatchQueueCreate(
  _ label: UnsafePointer<CChar>?, _ concurrent: Int32, _ inactive: Int32, _ qos: Int32,
  _ relativePriority: Int32
) -> UnsafeMutableRawPointer {
  var attributes: Queue.Attributes = []
  if concurrent != 0 { attributes.insert(.concurrent) }
  if inactive != 0 { attributes.insert(.initiallyInactive) }
  let text = label.map { String(cString: $0) } ?? ""
  let target = qos == 0 ? nil : Queue.global(priority(ofQoS: qos))
  let queue = Queue(label: text, attributes: attributes, target: target)
  // As libdispatch's serial queues, which target the overcommit root queues: a thread of
  // their own, here only while neighbours crowd the plain workers (`SpinGovernor`, step 4).
  queue.drainsOnOvercommitBesideNeighbours = concurrent == 0
  queue.setSpecific(key: labelKey, value: CLabel(text))
  if qos != 0 {
    queue.setSpecific(
      key: qosKey, value: CQueueQoS(qos: UInt32(qos), relativePriority: relativePriority))
  }
  return CHandle.retained(queue)
}

@_cdecl("dispatch_queue_get_qos_class")
public func cDispatchQueueGetQoSClass(
  _ raw: UnsafeMutableRawPointer?, _ relativePriority: UnsafeMutablePointer<Int32>?
) -> UInt32 {
  let queue = CHandle.queue(raw, "dispatch_queue_get_qos_class")
  var found = queue.ownSpecific(key: qosKey) ?? CQueueQoS(qos: 0, relativePriority: 0)
  if case .some(let priority) = globalPriority(of: queue) {
    found = CQueueQoS(qos: qosClass(of: priority), relativePriority: 0)
  }
  relativePriority?.pointee = found.relativePriority
  return found.qos
}

/// The priority of a global queue, or nil for any other queue.
private func globalPriority(of queue: Queue) -> Priority? {
  Priority.allCases.first {
    Queue.global($0) === queue || Queue.global($0, overcommit: true) === queue
  }
}

/// The QoS class libdispatch gives each global queue.
private func qosClass(of priority: Priority) -> UInt32 {
  switch priority {
  case .high: return 0x19
  case .default: return 0x15
  case .low: return 0x11
  case .background: return 0x09
  }
}

@_cdecl("dispatch_queue_set_width")
public func cDispatchQueueSetWidth(_ raw: UnsafeMutableRawPointer?, _ width: Int) {
  let queue = CHandle.queue(raw, "dispatch_queue_set_width")
  // The main and global queues keep their widths; the call is ignored (libdispatch traps).
  if queue.livesForTheProcess { return }
  let chosen: Int
  switch width {
  case 0: chosen = 1  // As libdispatch: 0 means 1.
  case 1...: chosen = width
  case -1: chosen = Int(cls_available_cpus())  // DISPATCH_QUEUE_WIDTH_ACTIVE_CPUS
  default: chosen = max(1, sysconf(Int32(_SC_NPROCESSORS_CONF)))  // Physical and logical.
  }
  queue.setWidth(chosen)
}

/// libdispatch's QoS classes on LoopDispatch's four priorities.
private func priority(ofQoS qos: Int32) -> Priority {
  switch qos {
  case 0x21, 0x19: return .high  // User-interactive, user-initiated.
  case 0x11: return .low  // Utility.
  case 0x09, 0x05: return .background  // Background, maintenance.
  default: return .default
  }
}

/// `DISPATCH_QUEUE_OVERCOMMIT` (<dispatch/private.h>).
private let overcommitFlag: UInt = 0x2

@_cdecl("dispatch_get_global_queue")
public func cDispatchGetGlobalQueue(_ identifier: Int, _ flags: UInt) -> UnsafeMutableRawPointer? {
  // As libdispatch: NULL for flags other than DISPATCH_QUEUE_OVERCOMMIT and for an
  // identifier that is neither a priority nor a QoS class.
  guard flags & ~overcommitFlag == 0 else { return nil }
  let chosen: Priority
  switch identifier {
  case 2: chosen = .high  // DISPATCH_QUEUE_PRIORITY_HIGH
  case -2: chosen = .low  // DISPATCH_QUEUE_PRIORITY_LOW
  case Int(Int16.min): chosen = .background  // DISPATCH_QUEUE_PRIORITY_BACKGROUND
  case 0: chosen = .default
  case 0x05, 0x09, 0x11, 0x15, 0x19, 0x21: chosen = priority(ofQoS: Int32(identifier))
  default: return nil
  }
  return CHandle.unretained(Queue.global(chosen, overcommit: flags & overcommitFlag != 0))
}

@_cdecl("dispatch_get_main_queue")
public func cDispatchGetMainQueue() -> UnsafeMutableRawPointer {
  CHandle.unretained(Queue.main)
}

@_cdecl("dispatch_get_current_queue")
public func cDispatchGetCurrentQueue() -> UnsafeMutableRawPointer {
  // As libdispatch: outside any queue's work, the main queue on the main thread, else the
  // default global queue.
  if let current = Queue.current { return CHandle.unretained(current) }
  return CHandle.unretained(EventLoop.main.isInLoopThread ? Queue.main : Queue.global())
}

@_cdecl("dispatch_queue_get_label")
public func cDispatchQueueGetLabel(_ raw: UnsafeMutableRawPointer?) -> UnsafePointer<CChar> {
  let queue: Queue
  if let raw {
    queue = CHandle.queue(raw, "dispatch_queue_get_label")
  } else {
    // DISPATCH_CURRENT_QUEUE_LABEL.
    queue = Queue.current ?? (EventLoop.main.isInLoopThread ? Queue.main : Queue.global())
  }
  if let fixed = processLifetimeLabels[ObjectIdentifier(queue)] { return fixed.pointer }
  // The queue's own label, never one up its target chain (a Swift-made queue targeting a
  // C-made one has none until it is made below).
  if let label = queue.ownSpecific(key: labelKey) { return label.pointer }
  // A queue made in Swift: give it its C label now (kept for its life). Under a lock, so
  // that two first calls at once cannot each install one and free the other's, whose
  // pointer a caller already holds.
  return labelInstallation.withLock { installs in
    if let label = queue.ownSpecific(key: labelKey) { return label.pointer }
    installs &+= 1
    let label = CLabel(queue.label)
    queue.setSpecific(key: labelKey, value: label)
    return label.pointer
  }
}

@_cdecl("dispatch_set_target_queue")
public func cDispatchSetTargetQueue(
  _ object: UnsafeMutableRawPointer?, _ target: UnsafeMutableRawPointer?
) {
  // DISPATCH_TARGET_QUEUE_DEFAULT (NULL): the default-priority global queue.
  let newTarget = target.map { CHandle.queue($0, "dispatch_set_target_queue") } ?? Queue.global()
  switch CHandle.object(nonNull(object, "dispatch_set_target_queue")) {
  case let queue as Queue:
    // The main and global queues keep their place, as in libdispatch (no effect).
    if queue.livesForTheProcess { return }
    queue.setTarget(newTarget)
  case let source as CSource: source.setTarget(newTarget)
  // Groups and semaphores: the target is where their finalizer runs.
  case let other as CObjectBase: other.setTarget(newTarget)
  default: wrongKind("dispatch_set_target_queue", "a dispatch object")
  }
}

@_cdecl("dispatch_async_f")
public func cDispatchAsyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let call = CFunctionCall(function: cWork(work, "dispatch_async_f"), context: context)
  CHandle.withQueue(queue, "dispatch_async_f") { $0.async(call, barrier: false) }
}

@_cdecl("dispatch_barrier_async_f")
public func cDispatchBarrierAsyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let call = CFunctionCall(function: cWork(work, "dispatch_barrier_async_f"), context: context)
  CHandle.withQueue(queue, "dispatch_barrier_async_f") { $0.async(call, barrier: true) }
}

@_cdecl("dispatch_sync_f")
public func cDispatchSyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let function = cWork(work, "dispatch_sync_f")
  // One call into LoopDispatch, whose fast path calls the function itself.
  CHandle.withQueue(queue, "dispatch_sync_f") { $0.syncFunction(context: context, function) }
}

@_cdecl("dispatch_barrier_sync_f")
public func cDispatchBarrierSyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let function = cWork(work, "dispatch_barrier_sync_f")
  CHandle.withQueue(queue, "dispatch_barrier_sync_f") {
    $0.syncFunction(context: context, barrier: true, function)
  }
}

@_cdecl("dispatch_apply_f")
public func cDispatchApplyF(
  _ iterations: UInt, _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?, UInt) -> Void)?
) {
  guard let work else { clientBug("dispatch_apply_f called with a NULL function") }
  // DISPATCH_APPLY_AUTO (NULL): the default global queue.
  let target = queue.map { CHandle.queue($0, "dispatch_apply_f") } ?? Queue.global()
  let call = CIndexedWork(function: work, context: context)
  // `size_t` counts: more than Int.max iterations could not finish anyway.
  target.apply(iterations: Int(min(iterations, UInt(Int.max)))) { index in
    call.run(UInt(index))
  }
}

/// `dispatch_apply_f`'s function and context (see `CWork` for why it may cross threads).
private struct CIndexedWork: @unchecked Sendable {
  // @unchecked Sendable: the C caller's pointers, passed for exactly this use.
  let function: @convention(c) (UnsafeMutableRawPointer?, UInt) -> Void
  let context: UnsafeMutableRawPointer?
  func run(_ index: UInt) { function(context, index) }
}

@_cdecl("dispatch_after_f")
public func cDispatchAfterF(
  _ when: UInt64, _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  cLoopdispatchAfterF(when, queue, context, work, 0)
}

/// `dispatch_after_f`, as a barrier when `barrier` is not 0 (a DISPATCH_BLOCK_BARRIER block
/// object passed to `dispatch_after`).
@_cdecl("_loopdispatch_after_f")
public func cLoopdispatchAfterF(
  _ when: UInt64, _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?, _ barrier: Int32
) {
  let function = cWork(work, "dispatch_after_f")
  let target = CHandle.queue(queue, "dispatch_after_f")
  guard let deadline = CTime.deadline(when) else { return }  // FOREVER: never.
  if barrier != 0, !target.livesForTheProcess {
    // A barrier on a custom queue (concurrent, or serial and perhaps made wide by
    // set_width): when the time comes, submit it as a barrier (the timer itself lives beside
    // the queue's global queue).
    let call = CWork(function: function, context: context)
    Queue.global().after(deadline: deadline) { target.async(flags: .barrier) { call.run() } }
    return
  }
  // The function and context ride in the timer itself: no closure to allocate.
  target.after(deadline: deadline, CFunctionCall(function: function, context: context))
}

@_cdecl("dispatch_main")
public func cDispatchMain() -> Never {
  Queue.runMain()
}

@_cdecl("loopdispatch_main_event_base")
public func cLoopdispatchMainEventBase() -> OpaquePointer {
  EventLoop.main.rawBase
}

/// The function of an `_f` call, or a client-bug crash for NULL.
@inline(__always)
func cWork(
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?, _ call: StaticString
) -> @convention(c) (UnsafeMutableRawPointer?) -> Void {
  guard let work else { nullFunction(call) }
  return work
}

/// The client-bug crash for a NULL function; out of line (see `CHandle.nullHandle`).
@inline(never)
func nullFunction(_ call: StaticString) -> Never {
  clientBug("\(call) called with a NULL function")
}

@_cdecl("dispatch_assert_queue")
public func cDispatchAssertQueue(_ raw: UnsafeMutableRawPointer?) {
  let queue = CHandle.queue(raw, "dispatch_assert_queue")
  if !queue.isCurrent {
    clientBug("dispatch_assert_queue: not running on queue \"\(queue.label)\"")
  }
}

@_cdecl("dispatch_assert_queue_barrier")
public func cDispatchAssertQueueBarrier(_ raw: UnsafeMutableRawPointer?) {
  let queue = CHandle.queue(raw, "dispatch_assert_queue_barrier")
  // On a serial queue every item runs alone; on a concurrent one only a barrier does, and
  // LoopDispatch marks the thread's hold on the queue as exclusive for it.
  if !queue.isCurrent || !queue.isHeldExclusivelyByCurrentThread {
    clientBug("dispatch_assert_queue_barrier: not running alone on queue \"\(queue.label)\"")
  }
}

@_cdecl("dispatch_assert_queue_not")
public func cDispatchAssertQueueNot(_ raw: UnsafeMutableRawPointer?) {
  let queue = CHandle.queue(raw, "dispatch_assert_queue_not")
  if queue.isCurrent {
    clientBug("dispatch_assert_queue_not: running on queue \"\(queue.label)\"")
  }
}
