/// One read, write or barrier of an ``IOChannel``, from submission to its last handler call.
///
/// Thread-safety: the mutable fields are touched only on the entry's queue (the channel's
/// `control`); handlers are submitted to the operation's own queue, in order (`post`).
final class IOOperation: @unchecked Sendable {
  // @unchecked Sendable: see the type's comment (one serial queue owns the fields).

  /// The settings an operation takes from its channel when it is submitted (libdispatch
  /// copies the channel's parameters into each operation): a later `setLowWater` does not
  /// change an operation already on its way.
  struct Settings {
    var kind: IOChannel.Kind = .stream
    /// Random channels: the file position offsets count from.
    var base: Int64 = 0
    var lowWater: Int? = IOChannel.defaultLowWater
    var highWater = Int.max
    var interval: (nanoseconds: UInt64, strict: Bool)?
  }

  enum Direction {
    case read(length: Int)
    case write(Bytes)
    case barrier(@Sendable () -> Void)
  }

  let direction: Direction
  /// The channel it was submitted on (held until the operation has ended: the channel's
  /// entry use lasts until its operations' handlers have run).
  var channel: IOChannel?
  var settings = Settings()
  /// Which of the entry's lanes it waits in (`DescriptorEntry.Lane`), once placed.
  var lane = -1
  /// Whether the entry has started it (the first in its lane).
  var started = false
  /// Random channels: where the operation starts, from the channel's base offset.
  let offset: Int64
  /// The queue the caller named for the handler.
  let target: Queue?
  /// Where the handler runs: the caller's queue when it is serial, else a serial queue
  /// targeting it (`IOChannel.handlerQueue(for:)`), so that the calls of one operation run
  /// one at a time and in order even on a concurrent queue. Set on `control` at submission.
  var queue: Queue?
  private let readHandler: IOChannel.ReadHandler?
  private let writeHandler: IOChannel.WriteHandler?

  /// A read: bytes received and not yet handed over. A write: its data, of which the first
  /// `writeOffset` bytes have gone out.
  var pending: Bytes
  /// A write: how many bytes of `pending` have gone out.
  var writeOffset = 0
  /// A write: the bytes not yet written.
  var unwritten: Bytes { pending[writeOffset..<pending.count] }
  /// Bytes read or written so far.
  var transferred = 0
  /// A file operation: where its next chunk goes (-1 until its first chunk).
  var filePosition: Int64 = -1
  /// A write: bytes written since the handler last heard (for the low water mark).
  var sinceReport = 0
  /// A one-shot read (`IOChannel.read(from:length:queue:handler:)`): on a stream it ends as
  /// soon as a read finds nothing more after some bytes arrived, as libdispatch's
  /// `dispatch_read` does. Set before submission.
  var endsWhenDrained = false
  /// Set once its `done` call is posted; nothing runs for it afterwards.
  var finished = false
  /// `IOChannel.setInterval`'s timer, while a read runs.
  var intervalTimer: TimerSource?

  init(
    direction: Direction, offset: Int64, queue: Queue,
    readHandler: IOChannel.ReadHandler?, writeHandler: IOChannel.WriteHandler?
  ) {
    self.direction = direction
    self.offset = offset
    target = queue
    self.readHandler = readHandler
    self.writeHandler = writeHandler
    if case .write(let data) = direction {
      pending = data
    } else {
      pending = Bytes()
    }
  }

  init(barrier body: @escaping @Sendable () -> Void) {
    direction = .barrier(body)
    offset = 0
    target = nil
    readHandler = nil
    writeHandler = nil
    pending = Bytes()
  }

  /// Submits one handler call. Calls of one operation go to its queue in order. With `done`
  /// the operation is finished, and after the handler a block on the entry's queue counts
  /// the last call as delivered (`DescriptorEntry.delivered`): what waits for the handler (a
  /// barrier, the channel's leaving) waits for that block.
  ///
  /// When the handler's queue is a serial queue whose chain is idle (nothing queued, nothing
  /// running, not suspended) the call runs here, on the entry's thread, with the chain
  /// claimed as an uncontended `sync` would (`trySyncLockChain`): one hop less, as fd
  /// sources' inline handlers. Order holds: an idle queue has no earlier call of this
  /// operation still waiting. The delivered block then goes to the entry's queue, which this
  /// thread is running: no wake-up. A busy queue gets the call as a block, in order.
  func post(done: Bool, _ data: Bytes, _ error: Int32) {
    guard let queue else { return }
    let entry = done ? channel?.entry : nil
    if done {
      finished = true
      entry?.undelivered += 1
    }
    // The entry's own queue (a one-shot's or an `async` read's handler), which this thread
    // is running: the call runs here, in order with the earlier ones (each ran here too).
    if let entry = channel?.entry, queue === entry.queue {
      call(done, data, error)
      if done { entry.queue.async { [self] in entry.delivered(self) } }
      return
    }
    if queue.kind == .serial, queue.trySyncLockChain(lowestPriority: .default) {
      queue.withLockedChainFrames { call(done, data, error) }
      queue.unlockSyncChain()
      if let entry { entry.queue.async { [self] in entry.delivered(self) } }
      return
    }
    queue.async { [self] in
      call(done, data, error)
      guard let entry else { return }
      entry.queue.async { [self] in entry.delivered(self) }
    }
  }

  /// Calls the handler.
  private func call(_ done: Bool, _ data: Bytes, _ error: Int32) {
    if let readHandler {
      readHandler(done, data, error)
    } else if let writeHandler {
      writeHandler(done, data, error)
    }
  }

  /// Whether this is a read of no bytes or a write of none: done as soon as submitted.
  var isEmptyTransfer: Bool {
    switch direction {
    case .read(let length): return length == 0
    case .write(let data): return data.isEmpty
    case .barrier: return false
    }
  }

  /// Whether this is a read.
  var isRead: Bool {
    if case .read = direction { return true }
    return false
  }

  /// Whether this is a barrier.
  var isBarrier: Bool {
    if case .barrier = direction { return true }
    return false
  }
}
