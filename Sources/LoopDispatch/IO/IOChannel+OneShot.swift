import MainLoop
import Synchronization

extension IOChannel {
  // MARK: One-shot reads and writes (`dispatch_read`, `dispatch_write`)

  /// Reads up to `length` bytes (`Int.max`: to the end of the file) from `fd` at its current
  /// position and calls `handler` once on `queue` with them, or with what arrived before an
  /// error and the error's `errno`. A file is read to `length` or its end; a stream (a pipe,
  /// a socket) until `length`, its end, or, as libdispatch's `dispatch_read`, the first time
  /// a read finds nothing more after some bytes arrived: what is there now, not a full
  /// `length`. The handler runs once no channel uses the descriptor any more (its flags
  /// restored), so it may close it; as libdispatch's, it therefore waits for any other
  /// channel still open on the same descriptor to be closed.
  public static func read(
    from fd: Int32, length: Int, queue: Queue,
    handler: @escaping @Sendable (_ data: Bytes, _ error: Int32) -> Void
  ) {
    let (channel, outcome) = oneShot(fd: fd, queue: queue, handler: handler)
    channel.presetLowWater(Int.max)
    channel.read(
      offset: 0, length: length, endsWhenDrained: true, queue: channel.control
    ) { done, data, error in
      // One call at a time, in order (the operation's handler queue is serial).
      outcome.collect(data)
      guard done else { return }
      outcome.arrive(error: error)
      channel.closeOnControl()
    }
  }

  /// Writes `data` to `fd` and calls `handler` once on `queue` with what could not be
  /// written (empty when all was) and the error's `errno` (0: none), once no channel uses the
  /// descriptor any more (as for ``read(from:length:queue:handler:)``).
  public static func write(
    to fd: Int32, data: Bytes, queue: Queue,
    handler: @escaping @Sendable (_ remaining: Bytes, _ error: Int32) -> Void
  ) {
    let (channel, outcome) = oneShot(fd: fd, queue: queue, handler: handler)
    channel.write(data: data, queue: channel.control) { done, remaining, error in
      guard done else { return }
      outcome.collect(remaining)
      outcome.arrive(error: error)
      channel.closeOnControl()
    }
  }

  /// A stream channel for one read or write, and the outcome that calls `handler` on `queue`
  /// once both the operation has ended and the channel has given the descriptor back.
  private static func oneShot(
    fd: Int32, queue: Queue, handler: @escaping @Sendable (Bytes, Int32) -> Void
  ) -> (IOChannel, OneShotOutcome) {
    let outcome = OneShotOutcome(queue: queue, handler: handler)
    let channel = IOChannel(kind: .stream, fd: fd, queue: queue) { cleanupError in
      outcome.arrive(cleanupError: cleanupError)
    }
    return (channel, outcome)
  }
}

/// What a one-shot read or write ends with, and the join of its two ends: the operation's
/// last handler call and the channel's cleanup (which may come in either order: a descriptor
/// that is not open is given up before the operation's failure is reported). `finish` runs
/// once, after both, under the lock.
private final class OneShotOutcome: Sendable {
  private struct State {
    var bytes = Bytes()
    var error: Int32 = 0
    var cleanupError: Int32 = 0
    var arrived = 0
  }
  /// Inline in the object (a `Mutex`, not a separate lock object): one allocation less per
  /// `dispatch_read` and `dispatch_write`.
  private let state = Mutex(State())
  private let queue: Queue
  private let handler: @Sendable (Bytes, Int32) -> Void

  init(queue: Queue, handler: @escaping @Sendable (Bytes, Int32) -> Void) {
    self.queue = queue
    self.handler = handler
  }

  func collect(_ data: Bytes) { state.withLock { $0.bytes = $0.bytes + data } }

  func arrive(error: Int32) { arrive { $0.error = error } }

  func arrive(cleanupError: Int32) { arrive { $0.cleanupError = cleanupError } }

  private func arrive(_ change: (inout State) -> Void) {
    let ready = state.withLock { state -> (Bytes, Int32)? in
      change(&state)
      state.arrived += 1
      guard state.arrived == 2 else { return nil }
      return (state.bytes, state.error != 0 ? state.error : state.cleanupError)
    }
    guard let (bytes, error) = ready else { return }
    let handler = handler
    queue.async { handler(bytes, error) }
  }
}
