import Glibc
import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop

// Groups, semaphores, time and queue-specific values through the C API.

@_cdecl("dispatch_group_create")
public func cDispatchGroupCreate() -> UnsafeMutableRawPointer {
  CHandle.retained(CGroup())
}

@_cdecl("dispatch_group_enter")
public func cDispatchGroupEnter(_ group: UnsafeMutableRawPointer?) {
  CHandle.withGroup(group, "dispatch_group_enter") { $0.group.enter() }
}

@_cdecl("dispatch_group_leave")
public func cDispatchGroupLeave(_ group: UnsafeMutableRawPointer?) {
  CHandle.withGroup(group, "dispatch_group_leave") { $0.group.leave() }
}

@_cdecl("dispatch_group_async_f")
public func cDispatchGroupAsyncF(
  _ group: UnsafeMutableRawPointer?, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  cLoopdispatchGroupAsyncF(group, queue, context, work, 0)
}

/// `dispatch_group_async_f`, as a barrier when `barrier` is not 0 (a DISPATCH_BLOCK_BARRIER
/// block object passed to `dispatch_group_async`).
@_cdecl("_loopdispatch_group_async_f")
public func cLoopdispatchGroupAsyncF(
  _ group: UnsafeMutableRawPointer?, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?, _ barrier: Int32
) {
  let call = CFunctionCall(function: cWork(work, "dispatch_group_async_f"), context: context)
  CHandle.withGroup(group, "dispatch_group_async_f") { owner in
    CHandle.withQueue(queue, "dispatch_group_async_f") { target in
      // The group object stays alive until the work has left it: a group with work
      // outstanding keeps its C object alive (`Group.keepAlive(by:)`, set by `CGroup`).
      target.async(group: owner.group, call, barrier: barrier != 0)
    }
  }
}

@_cdecl("dispatch_group_wait")
public func cDispatchGroupWait(_ group: UnsafeMutableRawPointer?, _ timeout: UInt64) -> Int {
  let owner = CHandle.group(group, "dispatch_group_wait")
  let result = owner.group.wait(timeout: CTime.deadline(timeout) ?? .distantFuture)
  return result == .success ? 0 : 1
}

@_cdecl("dispatch_group_notify_f")
public func cDispatchGroupNotifyF(
  _ group: UnsafeMutableRawPointer?, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?,
  _ work: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let call = CWork(function: cWork(work, "dispatch_group_notify_f"), context: context)
  let owner = CHandle.group(group, "dispatch_group_notify_f")
  let target = CHandle.queue(queue, "dispatch_group_notify_f")
  owner.group.notify(queue: target) { withExtendedLifetime(owner) { call.run() } }
}

@_cdecl("dispatch_semaphore_create")
public func cDispatchSemaphoreCreate(_ value: Int) -> UnsafeMutableRawPointer? {
  // As libdispatch: a negative value is refused with NULL.
  if value < 0 { return nil }
  return CHandle.retained(CSemaphore(value: value))
}

@_cdecl("dispatch_semaphore_wait")
public func cDispatchSemaphoreWait(_ semaphore: UnsafeMutableRawPointer?, _ timeout: UInt64)
  -> Int
{
  let owner = CHandle.semaphore(semaphore, "dispatch_semaphore_wait")
  let result = owner.semaphore.wait(timeout: CTime.deadline(timeout) ?? .distantFuture)
  return result == .success ? 0 : 1
}

@_cdecl("dispatch_semaphore_signal")
public func cDispatchSemaphoreSignal(_ semaphore: UnsafeMutableRawPointer?) -> Int {
  CHandle.semaphore(semaphore, "dispatch_semaphore_signal").semaphore.signal() ? 1 : 0
}

// MARK: Time

/// `dispatch_time_t` values: 0 is "now" (`DISPATCH_TIME_NOW`), all ones is "forever". A
/// monotonic time is its `CLOCK_MONOTONIC` nanoseconds (below 2^63); a wall time has the top
/// bit set over its nanoseconds since the epoch (`dispatch_walltime`).
enum CTime {
  static let forever = UInt64.max
  static let wallBit: UInt64 = 1 << 63
  /// `DISPATCH_WALLTIME_NOW`.
  static let wallNow = UInt64.max - 1

  /// The monotonic deadline of `time`; nil for "forever".
  static func deadline(_ time: UInt64) -> Deadline? {
    if time == forever { return nil }
    if time == 0 { return .now }
    if time == wallNow { return .now }
    if time & wallBit != 0 {
      let wall = WallDeadline(nanosecondsSinceEpoch: time & ~wallBit)
      return wall.monotonicEquivalent
    }
    return Deadline(uptimeNanoseconds: time)
  }

  /// A wall time of `nanoseconds` since the epoch; one too far ahead to encode (2^63 ns is
  /// the year 2262) is "forever", as libdispatch's walltime saturates to it.
  static func wall(_ nanoseconds: UInt64) -> UInt64 {
    nanoseconds >= wallBit - 2 ? forever : wallBit | nanoseconds
  }

  static func adding(_ base: UInt64, _ delta: Int64) -> UInt64 {
    let magnitude = delta.magnitude
    let sum =
      delta >= 0
      ? base.addingReportingOverflow(magnitude) : base.subtractingReportingOverflow(magnitude)
    if sum.overflow { return delta >= 0 ? .max : 1 }
    return sum.partialValue
  }
}

@_cdecl("dispatch_time")
public func cDispatchTime(_ when: UInt64, _ delta: Int64) -> UInt64 {
  if when == CTime.forever { return CTime.forever }
  if when == CTime.wallNow { return cDispatchWalltime(nil, delta) }
  if when & CTime.wallBit != 0 { return CTime.wall(CTime.adding(when & ~CTime.wallBit, delta)) }
  let base = when == 0 ? Deadline.now.uptimeNanoseconds : when
  // Never 0 (that would read as "now"); past what the encoding holds, "forever" (as
  // libdispatch saturates).
  let sum = CTime.adding(base, delta)
  return sum >= CTime.wallBit - 1 ? CTime.forever : max(sum, 1)
}

@_cdecl("dispatch_walltime")
public func cDispatchWalltime(_ when: UnsafePointer<timespec>?, _ delta: Int64) -> UInt64 {
  let base: UInt64
  if let when {
    // Saturating: a far-future timespec is "forever", never an overflow.
    let seconds = UInt64(max(0, when.pointee.tv_sec))
    let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    let (sum, carry) = scaled.addingReportingOverflow(UInt64(max(0, when.pointee.tv_nsec)))
    base = overflow || carry ? .max : sum
  } else {
    base = WallDeadline.now.nanosecondsSinceEpoch
  }
  return CTime.wall(CTime.adding(base, delta))
}

// MARK: Queue-specific values

/// One `SpecificKey` per C key pointer (keys are addresses the program owns, used only as
/// identities). Created on first use and kept for the process's life, as key pointers are
/// usually static.
private let specificKeys = LockedValue<[UInt: SpecificKey<CSpecificValue>]>([:])

private func specificKey(_ key: UnsafeRawPointer?) -> SpecificKey<CSpecificValue> {
  guard let key else { clientBug("a queue-specific key must not be NULL") }
  return specificKeys.withLock { keys in
    if let existing = keys[UInt(bitPattern: key)] { return existing }
    let made = SpecificKey<CSpecificValue>()
    keys[UInt(bitPattern: key)] = made
    return made
  }
}

/// A context stored under a key, with its destructor (run when replaced or when the queue
/// goes away).
private final class CSpecificValue: @unchecked Sendable {
  // @unchecked Sendable: immutable; the pointers are the C caller's.
  let context: UnsafeMutableRawPointer?
  let destructor: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
  init(
    context: UnsafeMutableRawPointer?,
    destructor: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
  ) {
    self.context = context
    self.destructor = destructor
  }
  deinit { destructor?(context) }
}

@_cdecl("dispatch_queue_set_specific")
public func cDispatchQueueSetSpecific(
  _ queue: UnsafeMutableRawPointer?, _ key: UnsafeRawPointer?,
  _ context: UnsafeMutableRawPointer?,
  _ destructor: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let target = CHandle.queue(queue, "dispatch_queue_set_specific")
  let value = context == nil ? nil : CSpecificValue(context: context, destructor: destructor)
  target.setSpecific(key: specificKey(key), value: value)
}

@_cdecl("dispatch_queue_get_specific")
public func cDispatchQueueGetSpecific(
  _ queue: UnsafeMutableRawPointer?, _ key: UnsafeRawPointer?
) -> UnsafeMutableRawPointer? {
  // The queue's own value: only `dispatch_get_specific` walks the target chain.
  CHandle.queue(queue, "dispatch_queue_get_specific").ownSpecific(key: specificKey(key))?.context
}

@_cdecl("dispatch_get_specific")
public func cDispatchGetSpecific(_ key: UnsafeRawPointer?) -> UnsafeMutableRawPointer? {
  Queue.getSpecific(key: specificKey(key))?.context
}
