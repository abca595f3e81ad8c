import Glibc

/// The order operations run in, across every channel of one descriptor (all on `queue`).
///
/// Invariants:
/// 1. **Submission order per lane.** An operation is appended to its lane when it is
///    submitted (or when the barrier before it has run) and only the lane's first operation
///    runs. Reads use `Lane.read`, writes `Lane.write`; so the ten `dispatch_write`s of one
///    buffer reach the file in the order they were called, and two channels writing one
///    socket never interleave their bytes (each write runs to its end before the next).
/// 2. **A STREAM channel's operations on a regular file share one lane** (`Lane.fileStream`):
///    they move one file position, so a read and then a write run one after the other, in
///    submission order, as io.h's "performed serially" says. RANDOM operations carry their
///    own offsets and keep the read and write lanes.
/// 3. **A barrier stops the line.** A barrier and everything submitted after it wait in
///    `held`; the barrier runs once every lane is empty and every finished operation's last
///    handler call has run (`undelivered == 0`), whichever channel of the entry they came
///    from (io.h: a barrier covers every channel on the descriptor). Then the operations
///    after it are placed, up to the next barrier.
/// 4. **The last handler call comes before what waits for it.** A finished operation counts
///    in `undelivered` from the moment its last call is posted until that call has run and
///    hopped back (`IOOperation.post`, `delivered`); barriers, and the channel's leaving
///    (which may end the entry and run the cleanup handlers), wait for it.
extension DescriptorEntry {
  /// Indexes into `lanes`.
  enum Lane {
    static let read = 0
    static let write = 1
    static let fileStream = 2
  }

  /// Takes a submitted operation (its channel checked it: open, usable, not empty).
  func enqueue(_ operation: IOOperation) {
    if !held.isEmpty || operation.isBarrier {
      held.append(operation)
    } else {
      place(operation)
    }
    pump()
  }

  /// Puts an operation in its lane (invariants 1 and 2).
  private func place(_ operation: IOOperation) {
    if case .path = origin { _ = prepare() }
    if isFile && operation.settings.kind == .stream {
      operation.lane = Lane.fileStream
    } else {
      operation.lane = operation.isRead ? Lane.read : Lane.write
    }
    lanes[operation.lane].append(operation)
  }

  /// Runs what may run: barriers whose turn came, then each lane's first operation. Never
  /// recursive (`pumping`).
  func pump() {
    if pumping {
      pumpAgain = true
      return
    }
    pumping = true
    repeat {
      pumpAgain = false
      releaseHeld()
      for lane in lanes.indices {
        guard let first = lanes[lane].first, !first.started else { continue }
        first.started = true
        start(first)
      }
    } while pumpAgain
    pumping = false
  }

  /// Invariant 3: runs the barriers at the head of `held` whose turn came, and places the
  /// operations after each.
  private func releaseHeld() {
    while let first = held.first {
      if case .barrier(let body) = first.direction {
        guard undelivered == 0, lanes.allSatisfy(\.isEmpty) else { return }
        held.removeFirst()
        inBarrier = true
        body()
        inBarrier = false
        first.channel?.operationEnded()
        first.channel = nil
      } else {
        held.removeFirst()
        place(first)
      }
    }
  }

  /// Ends every operation of `channel` not yet finished with `ECANCELED` (a STOP close), in
  /// submission order within each lane: reads, then writes, then a file's stream lane, then
  /// those still held behind a barrier. Barriers stay: they run in their turn.
  func stop(_ channel: IOChannel) {
    for lane in lanes.indices {
      for operation in lanes[lane] where operation.channel === channel {
        finish(operation, error: ECANCELED)
      }
    }
    let cancelled = held.filter { $0.channel === channel && !$0.isBarrier }
    held.removeAll { $0.channel === channel && !$0.isBarrier }
    for operation in cancelled { fail(operation, ECANCELED) }
    pump()
  }

  /// Starts the first operation of a lane.
  private func start(_ operation: IOOperation) {
    let failure = prepare()
    if failure != 0 {
      finish(operation, error: failure)
      return
    }
    if isFile {
      runOnFile(operation)
    } else {
      runOnStream(operation)
    }
  }

  /// The descriptor, ready for use: a path entry opens its file on first use. 0 or the
  /// open's error.
  func prepare() -> Int32 {
    prepare(typeAtCreation: pathType)
  }

  /// Ends an operation that never reached a lane with `error` (0: an empty transfer).
  func fail(_ operation: IOOperation, _ error: Int32) {
    operation.post(done: true, operation.isRead ? Bytes() : operation.pending, error)
  }

  /// Invariant 4: the last handler call of `operation` has run (its `post` hopped back here):
  /// its channel learns it, and what waited for it may run.
  func delivered(_ operation: IOOperation) {
    undelivered -= 1
    operation.channel?.operationEnded()
    operation.channel = nil
    pump()
  }

  /// Takes a finished operation out of its lane and runs what may follow.
  func complete(_ operation: IOOperation) {
    operation.finished = true
    operation.intervalTimer?.cancel()
    operation.intervalTimer = nil
    if operation.lane >= 0 {
      lanes[operation.lane].removeAll { $0 === operation }
    }
    pump()
  }
}
