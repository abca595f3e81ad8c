@_spi(LoopDispatchRuntime) import MainLoop

/// An `errno` value from an ``IOChannel`` operation.
public struct IOError: Error, Equatable, Sendable {
  /// The `errno` value (`ECANCELED` for an operation on a closed channel).
  public let code: Int32
  /// An error for the `errno` value `code`.
  public init(code: Int32) { self.code = code }
}

extension IOChannel {
  /// Reads `length` bytes (`Int.max`: to the end of the file) at `offset` (random channels)
  /// and returns them all.
  /// - Throws: ``IOError`` with the `errno` of a failed read; the bytes read before it are
  ///   lost to the caller, so use ``read(offset:length:queue:handler:)`` to keep them.
  public func read(offset: Int64 = 0, length: Int) async throws(IOError) -> Bytes {
    let collected = Collected()
    let error: Int32 = await withCheckedContinuation { continuation in
      read(offset: offset, length: length, queue: control) { done, data, error in
        collected.append(data)
        if done { continuation.resume(returning: error) }
      }
    }
    if error != 0 { throw IOError(code: error) }
    return collected.bytes
  }

  /// Writes all of `data` at `offset` (random channels).
  /// - Throws: ``IOError`` with the `errno` of a failed write.
  public func write(offset: Int64 = 0, _ data: Bytes) async throws(IOError) {
    let error: Int32 = await withCheckedContinuation { continuation in
      write(offset: offset, data: data, queue: control) { done, _, error in
        if done { continuation.resume(returning: error) }
      }
    }
    if error != 0 { throw IOError(code: error) }
  }
}

/// Bytes an `async` read collects, handed to the awaiting task through a lock rather than in
/// the continuation's value: a continuation resumed before its task even suspends is taken
/// on a fast path whose ordering ThreadSanitizer cannot see, and it then reports the task's
/// first read of the bytes (made on the channel's queue) as a race. The lock's release and
/// acquire are an edge it sees, and order the same accesses.
private final class Collected: Sendable {
  private let collected = LockedValue(Bytes())
  func append(_ data: Bytes) { collected.withLock { $0 = $0 + data } }
  var bytes: Bytes { collected.withLock { $0 } }
}
