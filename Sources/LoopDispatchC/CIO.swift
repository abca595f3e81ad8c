import Glibc
import LoopDispatch

// `dispatch_io_t` and `dispatch_read`/`dispatch_write`: the C objects over LoopDispatch's
// `IOChannel`. The block forms are in C (Sources/CDispatch/io.c), which passes each block as
// a context with the C functions that call and release it.

/// `dispatch_io_t`.
final class CIO: CObjectBase, @unchecked Sendable {
  // @unchecked Sendable: `channel` is Sendable and never reassigned; the base's fields are
  // locked.
  let channel: IOChannel
  init(_ channel: IOChannel) { self.channel = channel }
}

public typealias CCleanupFunction = @convention(c) (UnsafeMutableRawPointer?, Int32) -> Void
public typealias CIOFunction =
  @convention(c) (
    UnsafeMutableRawPointer?, Bool, UnsafeMutableRawPointer?, Int32, Bool
  ) -> Void
public typealias COnceFunction =
  @convention(c) (
    UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, Int32, Bool
  ) -> Void
public typealias CReleaseFunction = @convention(c) (UnsafeMutableRawPointer?) -> Void

/// A C callback and the copied block it calls, carried to whichever thread runs it.
private struct CCallback<Function>: @unchecked Sendable {
  // @unchecked Sendable: the block was copied for exactly this use (io.c), and each call
  // happens on the queue the C caller named, one at a time (`IOOperation` posts its calls to
  // a serial queue).
  let context: UnsafeMutableRawPointer?
  let function: Function
}

/// Calls `body` with a handle for `bytes` valid for the call (NULL: the empty object).
private func withDataHandle(_ bytes: Bytes, _ body: (UnsafeMutableRawPointer?) -> Void) {
  guard let handle = CDataHandle.retained(bytes) else {
    body(nil)
    return
  }
  body(handle)
  Unmanaged<CData>.fromOpaque(handle).release()
}

/// The C `type` argument as a channel kind, or nil (libdispatch returns NULL for others).
private func channelKind(_ type: UInt) -> IOChannel.Kind? {
  switch type {
  case 0: return .stream
  case 1: return .random
  default: return nil
  }
}

/// The cleanup handler for a C block (nil when the caller gave none).
private func cleanupHandler(
  _ context: UnsafeMutableRawPointer?, _ function: CCleanupFunction?
) -> (@Sendable (Int32) -> Void)? {
  guard let function else { return nil }
  let callback = CCallback(context: context, function: function)
  return { error in callback.function(callback.context, error) }
}

@_cdecl("_loopdispatch_io_create")
public func cIOCreate(
  _ type: UInt, _ fd: Int32, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?, _ cleanup: CCleanupFunction?
) -> UnsafeMutableRawPointer? {
  // io.c checked the type.
  let handler = cleanupHandler(context, cleanup)
  let kind = channelKind(type) ?? .stream
  let target = queue.map { CHandle.queue($0, "dispatch_io_create") } ?? .global()
  let channel = IOChannel(kind: kind, fd: fd, queue: target, cleanup: handler)
  return Unmanaged.passRetained(CIO(channel)).toOpaque()
}

@_cdecl("_loopdispatch_io_create_with_path")
public func cIOCreateWithPath(
  _ type: UInt, _ path: UnsafePointer<CChar>?, _ flags: Int32, _ mode: UInt32,
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ cleanup: CCleanupFunction?
) -> UnsafeMutableRawPointer? {
  // io.c checked the type and that the path is absolute.
  let handler = cleanupHandler(context, cleanup)
  let target = queue.map { CHandle.queue($0, "dispatch_io_create_with_path") } ?? .global()
  guard let path,
    let channel = IOChannel(
      kind: channelKind(type) ?? .stream, path: String(cString: path), flags: flags,
      mode: mode_t(mode), queue: target, cleanup: handler)
  else { internalBug("io.c passed a path that is not absolute") }
  return Unmanaged.passRetained(CIO(channel)).toOpaque()
}

@_cdecl("_loopdispatch_io_create_with_io")
public func cIOCreateWithIO(
  _ type: UInt, _ io: UnsafeMutableRawPointer?, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?, _ cleanup: CCleanupFunction?
) -> UnsafeMutableRawPointer? {
  // io.c checked the type.
  let handler = cleanupHandler(context, cleanup)
  let other = CHandle.withBorrowed(io, as: CIO.self, "channel", "dispatch_io_create_with_io") {
    $0.channel
  }
  let kind = channelKind(type) ?? .stream
  let target = queue.map { CHandle.queue($0, "dispatch_io_create_with_io") } ?? .global()
  let channel = IOChannel(kind: kind, sharing: other, queue: target, cleanup: handler)
  return Unmanaged.passRetained(CIO(channel)).toOpaque()
}

/// The C object behind a handle, retained until `release()`: an operation or barrier keeps
/// its channel's handle valid until it has finished (its blocks may use the handle, as in
/// libdispatch, where operations retain their channel).
private struct HeldChannel: @unchecked Sendable {
  // @unchecked Sendable: an `Unmanaged` reference to a Sendable object (`CIO`), released once.
  let object: Unmanaged<CIO>
  init(_ raw: UnsafeMutableRawPointer?, _ call: StaticString) {
    object = CHandle.withBorrowed(raw, as: CIO.self, "channel", call) {
      Unmanaged.passUnretained($0).retain()
    }
  }
  func release() { object.release() }
}

/// The channel behind a handle, borrowed for the call.
private func withChannel<Result>(
  _ raw: UnsafeMutableRawPointer?, _ call: StaticString, _ body: (IOChannel) -> Result
) -> Result {
  CHandle.withBorrowed(raw, as: CIO.self, "channel", call) { body($0.channel) }
}

@_cdecl("_loopdispatch_io_read")
public func cIORead(
  _ raw: UnsafeMutableRawPointer?, _ offset: Int64, _ length: Int,
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ call: CIOFunction?, _ release: CReleaseFunction?
) {
  guard let call, let release else { internalBug("io.c passed no handler functions") }
  let target = CHandle.queue(queue, "dispatch_io_read")
  let callback = CCallback(context: context, function: (call, release))
  let held = HeldChannel(raw, "dispatch_io_read")
  // size_t SIZE_MAX arrives as -1: to the end of the file.
  held.object.takeUnretainedValue().channel.read(
    offset: offset, length: length < 0 ? Int.max : length, queue: target
  ) { done, data, error in
    withDataHandle(data) { handle in
      callback.function.0(callback.context, done, handle, error, data.isEmpty && error != 0)
    }
    if done {
      callback.function.1(callback.context)
      held.release()
    }
  }
}

@_cdecl("_loopdispatch_io_write")
public func cIOWrite(
  _ raw: UnsafeMutableRawPointer?, _ offset: Int64, _ data: UnsafeMutableRawPointer?,
  _ queue: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ call: CIOFunction?, _ release: CReleaseFunction?
) {
  guard let call, let release else { internalBug("io.c passed no handler functions") }
  let bytes = CDataHandle.bytes(data, "dispatch_io_write")
  let target = CHandle.queue(queue, "dispatch_io_write")
  let callback = CCallback(context: context, function: (call, release))
  let held = HeldChannel(raw, "dispatch_io_write")
  held.object.takeUnretainedValue().channel.write(offset: offset, data: bytes, queue: target) {
    done, remaining, error in
    // Nothing left: no data (NULL), as libdispatch.
    withDataHandle(remaining) { handle in
      callback.function.0(callback.context, done, handle, error, remaining.isEmpty)
    }
    if done {
      callback.function.1(callback.context)
      held.release()
    }
  }
}

@_cdecl("dispatch_io_close")
public func cIOClose(_ raw: UnsafeMutableRawPointer?, _ flags: UInt) {
  withChannel(raw, "dispatch_io_close") { $0.close(stop: flags & 1 != 0) }
}

@_cdecl("_loopdispatch_io_barrier_f")
public func cIOBarrierF(
  _ raw: UnsafeMutableRawPointer?, _ context: UnsafeMutableRawPointer?,
  _ function: CFinalizer?
) {
  guard let function else { internalBug("io.c passed no barrier function") }
  let work = CWork(function: function, context: context)
  let held = HeldChannel(raw, "dispatch_io_barrier")
  held.object.takeUnretainedValue().channel.barrier {
    work.run()
    held.release()
  }
}

@_cdecl("dispatch_io_get_descriptor")
public func cIOGetDescriptor(_ raw: UnsafeMutableRawPointer?) -> Int32 {
  withChannel(raw, "dispatch_io_get_descriptor") { $0.fileDescriptor }
}

@_cdecl("dispatch_io_set_high_water")
public func cIOSetHighWater(_ raw: UnsafeMutableRawPointer?, _ bytes: Int) {
  withChannel(raw, "dispatch_io_set_high_water") { $0.setHighWater(bytes < 0 ? Int.max : bytes) }
}

@_cdecl("dispatch_io_set_low_water")
public func cIOSetLowWater(_ raw: UnsafeMutableRawPointer?, _ bytes: Int) {
  withChannel(raw, "dispatch_io_set_low_water") { $0.setLowWater(bytes < 0 ? Int.max : bytes) }
}

@_cdecl("dispatch_io_set_interval")
public func cIOSetInterval(_ raw: UnsafeMutableRawPointer?, _ interval: UInt64, _ flags: UInt) {
  withChannel(raw, "dispatch_io_set_interval") {
    $0.setInterval(.nanoseconds(Int64(clamping: interval)), strict: flags & 1 != 0)
  }
}

@_cdecl("_loopdispatch_read")
public func cRead(
  _ fd: Int32, _ length: Int, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?, _ call: COnceFunction?
) {
  guard let call else { internalBug("io.c passed no handler function") }
  let target = CHandle.queue(queue, "dispatch_read")
  let callback = CCallback(context: context, function: call)
  IOChannel.read(from: fd, length: length < 0 ? Int.max : length, queue: target) {
    data, error in
    withDataHandle(data) { handle in
      callback.function(callback.context, handle, error, false)
    }
  }
}

@_cdecl("_loopdispatch_write")
public func cWrite(
  _ fd: Int32, _ data: UnsafeMutableRawPointer?, _ queue: UnsafeMutableRawPointer?,
  _ context: UnsafeMutableRawPointer?, _ call: COnceFunction?
) {
  guard let call else { internalBug("io.c passed no handler function") }
  let bytes = CDataHandle.bytes(data, "dispatch_write")
  let target = CHandle.queue(queue, "dispatch_write")
  let callback = CCallback(context: context, function: call)
  IOChannel.write(to: fd, data: bytes, queue: target) { remaining, error in
    withDataHandle(remaining) { handle in
      callback.function(callback.context, handle, error, remaining.isEmpty)
    }
  }
}
