import Glibc
import LoopDispatch

// `dispatch_data_t`: the C objects over LoopDispatch's `Bytes`. The block forms and the empty
// object are in C (Sources/CDispatch/data.c), which passes the empty object across as NULL
// both ways: a NULL handle here is `dispatch_data_empty`, and returning NULL returns it.

/// `dispatch_data_t` (other than the empty object): immutable bytes.
final class CData: CObjectBase, @unchecked Sendable {
  // @unchecked Sendable: `bytes` is an immutable Sendable value; the base's fields are locked.
  let bytes: Bytes
  init(_ bytes: Bytes) { self.bytes = bytes }
}

enum CDataHandle {
  /// The bytes behind a handle (NULL: the empty object), borrowed for the call.
  @inline(__always)
  static func bytes(_ raw: UnsafeMutableRawPointer?, _ call: StaticString) -> Bytes {
    guard let raw else { return .empty }
    return CHandle.withBorrowed(raw, as: CData.self, "dispatch_data_t", call) { $0.bytes }
  }

  /// A +1 handle for `bytes`, or NULL (the empty object) when there are none.
  static func retained(_ bytes: Bytes) -> UnsafeMutableRawPointer? {
    bytes.isEmpty ? nil : Unmanaged.passRetained(CData(bytes)).toOpaque()
  }
}

/// The destructor kinds `data.c` passes (its DATA_* constants).
private enum CDestructorKind: Int32 {
  case copy = 0
  case free = 1
  case unmap = 2
  case custom = 3
}

/// A C destructor and its context, called once (the copied block, in `data.c`).
private struct CDestructor: @unchecked Sendable {
  // @unchecked Sendable: the C caller handed the function and context over for this one call.
  let function: CFinalizer
  let context: UnsafeMutableRawPointer?
}

@_cdecl("_loopdispatch_data_create")
public func cDataCreate(
  _ buffer: UnsafeRawPointer?, _ size: Int, _ kind: Int32, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?, _ destructor: CFinalizer?
) -> UnsafeMutableRawPointer? {
  guard let kind = CDestructorKind(rawValue: kind) else {
    internalBug("data.c passed an unknown destructor kind \(kind)")
  }
  if size > 0 && buffer == nil {
    clientBug("dispatch_data_create called with a NULL buffer of \(size) bytes")
  }
  // Safe: the caller promises `size` readable bytes at `buffer` (the documented contract);
  // for the adopting kinds it also hands the memory over until the destructor runs.
  let region = UnsafeRawBufferPointer(start: buffer, count: size)
  let deallocator: Bytes.Deallocator
  switch kind {
  case .copy: return CDataHandle.retained(Bytes(copying: region))
  case .free: deallocator = .free
  case .unmap: deallocator = .unmap
  case .custom:
    guard let destructor else { internalBug("data.c passed no destructor function") }
    let call = CDestructor(function: destructor, context: context)
    let target =
      queue.map { CHandle.queue($0, "dispatch_data_create") } ?? Queue.global(.default)
    deallocator = .custom(queue: target) { call.function(call.context) }
  }
  if buffer == nil || size == 0 {
    // As libdispatch: nothing to hold, so the destructor runs now; the result is the
    // empty object.
    Bytes.giveBack(region, deallocator)
    return nil
  }
  return CDataHandle.retained(Bytes(noCopy: region, deallocator: deallocator))
}

@_cdecl("_loopdispatch_data_get_size")
public func cDataGetSize(_ data: UnsafeMutableRawPointer?) -> Int {
  CDataHandle.bytes(data, "dispatch_data_get_size").count
}

@_cdecl("_loopdispatch_data_create_map")
public func cDataCreateMap(
  _ data: UnsafeMutableRawPointer?, _ bufferOut: UnsafeMutablePointer<UnsafeRawPointer?>?,
  _ sizeOut: UnsafeMutablePointer<Int>?
) -> UnsafeMutableRawPointer? {
  let whole = CDataHandle.bytes(data, "dispatch_data_create_map").contiguous()
  let handle = CDataHandle.retained(whole)
  // The pointer stays valid while the returned object lives: it is that object's memory.
  bufferOut?.pointee = whole.firstRegionStart
  sizeOut?.pointee = whole.count
  return handle
}

@_cdecl("_loopdispatch_data_create_concat")
public func cDataCreateConcat(
  _ first: UnsafeMutableRawPointer?, _ second: UnsafeMutableRawPointer?
) -> UnsafeMutableRawPointer? {
  let left = CDataHandle.bytes(first, "dispatch_data_create_concat")
  let right = CDataHandle.bytes(second, "dispatch_data_create_concat")
  return CDataHandle.retained(left + right)
}

@_cdecl("_loopdispatch_data_create_subrange")
public func cDataCreateSubrange(
  _ data: UnsafeMutableRawPointer?, _ offset: Int, _ length: Int
) -> UnsafeMutableRawPointer? {
  let bytes = CDataHandle.bytes(data, "dispatch_data_create_subrange")
  // size_t arguments: a value above Int.max arrives negative; both mean "past the end".
  let start = offset < 0 ? bytes.count : Swift.min(offset, bytes.count)
  let available = bytes.count - start
  let end = start + (length < 0 ? available : Swift.min(length, available))
  return CDataHandle.retained(bytes[start..<end])
}

public typealias CDataApplier =
  @convention(c) (
    UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, Int, UnsafeRawPointer?, Int
  ) -> Bool

@_cdecl("_loopdispatch_data_apply_f")
public func cDataApplyF(
  _ data: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ applier: CDataApplier?
) -> Bool {
  guard let applier else { clientBug("dispatch_data_apply called with a NULL applier") }
  let bytes = CDataHandle.bytes(data, "dispatch_data_apply")
  return bytes.forEachRegionValue { offset, region, buffer in
    // The region object lives for the applier's call only, as libdispatch documents.
    let handle = CDataHandle.retained(region)
    defer { if let handle { Unmanaged<CData>.fromOpaque(handle).release() } }
    return applier(context, handle, offset, buffer.baseAddress, buffer.count)
  }
}

@_cdecl("_loopdispatch_data_copy_region")
public func cDataCopyRegion(
  _ data: UnsafeMutableRawPointer?, _ location: Int, _ offsetOut: UnsafeMutablePointer<Int>?
) -> UnsafeMutableRawPointer? {
  let bytes = CDataHandle.bytes(data, "dispatch_data_copy_region")
  guard location >= 0, let (region, offset) = bytes.region(containing: location) else {
    // A location at or past the end: the empty object, its offset the size (libdispatch's
    // answer; the differential test Tests/CDiff/diff_data.c compares).
    offsetOut?.pointee = bytes.count
    return nil
  }
  offsetOut?.pointee = offset
  return CDataHandle.retained(region)
}
