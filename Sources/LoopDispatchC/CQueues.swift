import Glibc
import LoopDispatch
import MainLoop

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

/// Held while a label is installed on a queue made in Swift; counts the installations.
private let labelInstallation = LockedValue(0)

/// The C labels of the main and global queues (they live as long as the process).
private let processLifetimeLabels: [ObjectIdentifier: CLabel] = {
  var labels = [ObjectIdentifier(Queue.main): CLabel(Queue.main.label)]
  for priority in Priority.allCases {
    let queue = Queue.global(priority)
    labels[ObjectIdentifier(queue)] = CLabel(queue.label)
  }
  return labels
}()

@_cdecl("_loopdispatch_queue_create")
public func cLoopdispatchQueueCreate(
  _ label: UnsafePointer<CChar>?, _ concurrent: Int32, _ inactive: Int32, _ qos: Int32
) -> UnsafeMutableRawPointer {
  var attributes: Queue.Attributes = []
  if concurrent != 0 { attributes.insert(.concurrent) }
  if inactive != 0 { attributes.insert(.initiallyInactive) }
  let text = label.map { String(cString: $0) } ?? ""
  let target = qos == 0 ? nil : Queue.global(priority(ofQoS: qos))
  let queue = Queue(label: text, attributes: attributes, target: target)
  queue.setSpecific(key: labelKey, value: CLabel(text))
  return CHandle.retained(queue)
}

/// libdispatch's QoS classes on LoopDispatch's four priorities.
private func priority(ofQoS qos: Int32) -> Priority {
  switch qos {
  case 0x21, 0x19: return .high  // User-interactive, user-initiated.
  case 0x11: return .low  // Utility.
  case 0x09: return .background
  default: return .default
  }
}

@_cdecl("dispatch_get_global_queue")
public func cDispatchGetGlobalQueue(_ identifier: Int, _ flags: UInt) -> UnsafeMutableRawPointer {
  let chosen: Priority
  switch identifier {
  case 2: chosen = .high  // DISPATCH_QUEUE_PRIORITY_HIGH
  case -2: chosen = .low  // DISPATCH_QUEUE_PRIORITY_LOW
  case Int(Int16.min): chosen = .background  // DISPATCH_QUEUE_PRIORITY_BACKGROUND
  case 0: chosen = .default
  default: chosen = priority(ofQoS: Int32(truncatingIfNeeded: identifier))  // A QoS class.
  }
  return CHandle.unretained(Queue.global(chosen))
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
  if let label = queue.getSpecific(key: labelKey) { return label.pointer }
  // A queue made in Swift: give it its C label now (kept for its life). Under a lock, so
  // that two first calls at once cannot each install one and free the other's, whose
  // pointer a caller already holds.
  return labelInstallation.withLock { installs in
    if let label = queue.getSpecific(key: labelKey) { return label.pointer }
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
  if let object, CHandle.object(object) is CSource {
    clientBug(
      "dispatch_set_target_queue on a source: LoopDispatch binds a source to the queue it was "
        + "created with (create it with the queue it should deliver to)")
  }
  let queue = CHandle.queue(object, "dispatch_set_target_queue")
  let newTarget = target.map { CHandle.queue($0, "dispatch_set_target_queue") } ?? Queue.global()
  queue.setTarget(newTarget)
}

@_cdecl("dispatch_async_f")
public func cDispatchAsyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let call = CWork(function: cWork(work, "dispatch_async_f"), context: context)
  CHandle.withQueue(queue, "dispatch_async_f") { $0.async { call.run() } }
}

@_cdecl("dispatch_barrier_async_f")
public func cDispatchBarrierAsyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let call = CWork(function: cWork(work, "dispatch_barrier_async_f"), context: context)
  CHandle.queue(queue, "dispatch_barrier_async_f").async(flags: .barrier) { call.run() }
}

@_cdecl("dispatch_sync_f")
public func cDispatchSyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let function = cWork(work, "dispatch_sync_f")
  CHandle.withQueue(queue, "dispatch_sync_f") { $0.sync { function(context) } }
}

@_cdecl("dispatch_barrier_sync_f")
public func cDispatchBarrierSyncF(
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let function = cWork(work, "dispatch_barrier_sync_f")
  CHandle.queue(queue, "dispatch_barrier_sync_f").sync(flags: .barrier) { function(context) }
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
  let call = CWork(function: cWork(work, "dispatch_after_f"), context: context)
  let target = CHandle.queue(queue, "dispatch_after_f")
  guard let deadline = CTime.deadline(when) else { return }  // FOREVER: never.
  target.after(deadline: deadline) { call.run() }
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
  guard let work else { clientBug("\(call) called with a NULL function") }
  return work
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
