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
    let result: Result<Bytes, IOError> = await withCheckedContinuation { continuation in
      let collected = Collected()
      read(offset: offset, length: length, queue: control) { done, data, error in
        // One call at a time (the operation's handler queue is serial).
        collected.bytes = collected.bytes + data
        guard done else { return }
        continuation.resume(
          returning: error == 0 ? .success(collected.bytes) : .failure(IOError(code: error)))
      }
    }
    return try result.get()
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

/// Bytes an `async` read collects; touched only by its handler, one call at a time.
private final class Collected: @unchecked Sendable {
  // @unchecked Sendable: see the type's comment.
  var bytes = Bytes()
}
