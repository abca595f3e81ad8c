import LoopDispatch
import MainLoop
import Synchronization

// Dispatch block objects (`dispatch_block_create` and friends): each is a LoopDispatch
// `WorkItem` kept in a registry under an id the C block captures (Sources/CDispatch/blocks.c
// explains how a block is recognised). Ids are never reused.
//
// Lifetime: a record stays until its block has run uncancelled (then `dispatch_block_wait`,
// `notify` and `testcancel` on the block see "done" from the record's absence), or for the
// process's life if the block was cancelled or never run; the registry keeps it reachable,
// so LeakSanitizer reports nothing, at the cost of a few dozen bytes per such block.

/// One block object: its item (which runs the program's block copy) and its flags.
private final class CBlockRecord: @unchecked Sendable {
  // @unchecked Sendable: immutable; the pointers are the C caller's, handed over for this.
  let item: WorkItem
  let flags: UInt
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
  // Absent: it ran already (a block object runs once; later runs do nothing).
  guard let made = record(id) else { return }
  made.item.perform()
  if !made.item.isCancelled {
    blockRecords.withLock { _ = $0.removeValue(forKey: id) }
  }
}

@_cdecl("_loopdispatch_block_wait")
public func cLoopdispatchBlockWait(_ id: UInt64, _ timeout: UInt64) -> Int {
  guard let made = record(id) else { return 0 }
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
  made.item.notify(queue: target) { call.run() }
}

@_cdecl("_loopdispatch_block_cancel")
public func cLoopdispatchBlockCancel(_ id: UInt64) {
  record(id)?.item.cancel()
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
