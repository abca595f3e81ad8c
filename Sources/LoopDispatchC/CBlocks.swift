import LoopDispatch
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

// Dispatch block objects (`dispatch_block_create` and friends): each is a LoopDispatch
// `WorkItem` kept in a registry under an id the C block holds (Sources/CDispatch/blocks.c
// builds the block and explains how it is recognised). Ids are never reused.
//
// Lifetime: a record lives as long as its block: the block's dispose helper, which the
// blocks runtime calls when the last reference goes (the program's `Block_release` and the
// copies made to queue it), removes it and releases the program's block copy.

/// One block object: its item (which runs the program's block copy) and its flags.
private final class CBlockRecord: @unchecked Sendable {
  // @unchecked Sendable: immutable; the pointers are the C caller's, handed over for this.
  let item: WorkItem
  let flags: UInt
  /// Atomic. How many times the block has been invoked.
  let invocations = Atomic<Int>(0)
  private let block: UnsafeMutableRawPointer?
  private let release: (@convention(c) (UnsafeRawPointer?) -> Void)?

  init(
    flags: UInt, block: UnsafeMutableRawPointer?,
    invoke: @escaping @convention(c) (UnsafeMutableRawPointer?) -> Void,
    release: (@convention(c) (UnsafeRawPointer?) -> Void)?
  ) {
    self.flags = flags
    self.block = block
    self.release = release
    let call = CWork(function: invoke, context: block)
    item = WorkItem { call.run() }
  }

  deinit {
    // Never invoked (or invoked and already complete: then this does nothing): libdispatch
    // runs the notifications of a block object released without running.
    item.completeUnrun()
    if let block, let release { release(block) }
  }
}

private let nextBlockID = Atomic<UInt64>(1)
private let blockRecords = LockedValue<[UInt64: CBlockRecord]>([:])

private func record(_ id: UInt64) -> CBlockRecord? { blockRecords.withLock { $0[id] } }

@_cdecl("_loopdispatch_block_register")
public func cLoopdispatchBlockRegister(
  _ flags: UInt, _ block: UnsafeMutableRawPointer?,
  _ invoke: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
  _ release: (@convention(c) (UnsafeRawPointer?) -> Void)?
) -> UInt64 {
  let made = CBlockRecord(
    flags: flags, block: block, invoke: cWork(invoke, "dispatch_block_create"), release: release)
  let id = nextBlockID.wrappingAdd(1, ordering: .relaxed).oldValue
  blockRecords.withLock { $0[id] = made }
  return id
}

@_cdecl("_loopdispatch_block_run")
public func cLoopdispatchBlockRun(_ id: UInt64) {
  // block.h: a block object may be submitted and called any number of times; each call runs
  // the work unless cancelled, and the first completes it.
  guard let made = record(id) else { return }
  made.invocations.wrappingAdd(1, ordering: .relaxed)
  made.item.invokeAsBlockObject()
}

/// As libdispatch: a block object run more than once has no single execution to wait for
/// or observe.
private func checkObservable(_ made: CBlockRecord, _ call: StaticString) {
  if made.invocations.load(ordering: .relaxed) > 1 {
    clientBug("\(call): a block object may not be both run more than once and waited for")
  }
}

@_cdecl("_loopdispatch_block_dispose")
public func cLoopdispatchBlockDispose(_ id: UInt64) {
  // Released outside the lock: the record's deinit releases the program's block copy.
  let removed = blockRecords.withLock { $0.removeValue(forKey: id) }
  withExtendedLifetime(removed) {}
}

@_cdecl("_loopdispatch_block_wait")
public func cLoopdispatchBlockWait(_ id: UInt64, _ timeout: UInt64) -> Int {
  guard let made = record(id) else { return 0 }  // Only after its last reference: a bug.
  checkObservable(made, "dispatch_block_wait")
  return made.item.wait(timeout: CTime.deadline(timeout) ?? .distantFuture) == .success ? 0 : 1
}

@_cdecl("_loopdispatch_block_notify")
public func cLoopdispatchBlockNotify(
  _ id: UInt64, _ queue: UnsafeMutableRawPointer?, _ block: UnsafeMutableRawPointer?,
  _ invoke: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
) {
  let call = CWork(function: cWork(invoke, "dispatch_block_notify"), context: block)
  let target = CHandle.queue(queue, "dispatch_block_notify")
  guard let made = record(id) else {
    target.async { call.run() }  // Done already.
    return
  }
  checkObservable(made, "dispatch_block_notify")
  made.item.notify(queue: target) { call.run() }
}

@_cdecl("_loopdispatch_block_cancel")
public func cLoopdispatchBlockCancel(_ id: UInt64) {
  // Not a completion: wait and notify still wait for the block's next invocation (or its
  // release), as in libdispatch.
  record(id)?.item.cancelWithoutCompleting()
}

@_cdecl("_loopdispatch_block_testcancel")
public func cLoopdispatchBlockTestcancel(_ id: UInt64) -> Int {
  (record(id)?.item.isCancelled ?? false) ? 1 : 0
}

@_cdecl("_loopdispatch_block_flags")
public func cLoopdispatchBlockFlags(_ id: UInt64) -> UInt {
  record(id)?.flags ?? 0
}

@_cdecl("_loopdispatch_client_bug")
public func cLoopdispatchClientBug(_ message: UnsafePointer<CChar>?) -> Never {
  clientBug(message.map { String(cString: $0) } ?? "")
}

/// The number of live block-object records (for the C suite's lifetime check; not in the
/// header).
@_cdecl("_loopdispatch_block_live_records")
public func cLoopdispatchBlockLiveRecords() -> Int {
  blockRecords.withLock { $0.count }
}
