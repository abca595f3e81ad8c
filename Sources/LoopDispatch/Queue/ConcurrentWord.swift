/// A custom concurrent queue's state word: what its lock-free paths read and change.
///
/// Bit table (one `UInt64`, `Queue.concurrentWord`):
///
/// | bits | name | meaning | written by |
/// |---|---|---|---|
/// | 0–31 | running | plain items started and not finished | any thread, read-modify-write |
/// | 32 | BARRIER | a barrier runs (alone) | any thread, read-modify-write |
/// | 33 | PENDING | items wait in `ConcurrentState.pending` | the holder of the queue's lock |
/// | 34 | STOPPED | the queue is suspended or inactive | the holder of the queue's lock |
/// | 35 | BARRIER_HEAD | the oldest waiting item is a barrier | the holder of the queue's lock |
///
/// Invariants:
/// - PENDING, STOPPED and BARRIER_HEAD change only under the lock, so a lock holder sees
///   them stable; the counts change under it too (finishers do not need the lock).
/// - An item starts without the lock only when PENDING and STOPPED are clear: nothing waits
///   ahead of it, so submission order is kept.
/// - While PENDING is set and STOPPED clear, the finish that makes room for the oldest waiting
///   item (BARRIER_HEAD: the last item in flight; otherwise any finish that leaves room under
///   the width) takes the lock and starts it. Because the head's kind is in the word, the
///   other finishes (a reader ahead of a waiting barrier) touch no lock.
struct ConcurrentWord: Equatable {
  var raw: UInt64

  init(_ raw: UInt64) { self.raw = raw }

  static let runningMask: UInt64 = (1 << 32) - 1
  static let barrier: UInt64 = 1 << 32
  static let pending: UInt64 = 1 << 33
  static let stopped: UInt64 = 1 << 34
  static let barrierHead: UInt64 = 1 << 35

  var running: Int { Int(raw & Self.runningMask) }
  var barrierRunning: Bool { raw & Self.barrier != 0 }
  var hasPending: Bool { raw & Self.pending != 0 }
  var isStopped: Bool { raw & Self.stopped != 0 }
  var barrierAtHead: Bool { raw & Self.barrierHead != 0 }

  /// Items started and not finished (a running barrier counts one).
  var inFlight: Int { running + (barrierRunning ? 1 : 0) }

  /// Whether the items in flight leave room for one more: a plain item while no barrier runs
  /// and fewer than `width` run, a barrier when nothing runs.
  @inline(__always)
  func hasRoom(barrier: Bool, width: Int) -> Bool {
    if barrierRunning { return false }
    return barrier ? running == 0 : running < width
  }

  /// Whether a new item may start at once, without the lock: nothing waits and nothing stops
  /// the queue.
  @inline(__always)
  func admits(barrier: Bool, width: Int) -> Bool {
    raw & (Self.pending | Self.stopped) == 0 && hasRoom(barrier: barrier, width: width)
  }

  /// Whether the oldest waiting item may start now (the finisher that leaves this word
  /// must then take the lock and start it).
  @inline(__always)
  func headMayStart(width: Int) -> Bool {
    raw & (Self.pending | Self.stopped) == Self.pending
      && hasRoom(barrier: barrierAtHead, width: width)
  }

  /// The word with one more item of this kind in flight.
  @inline(__always)
  func starting(barrier: Bool) -> ConcurrentWord {
    ConcurrentWord(barrier ? raw | Self.barrier : raw &+ 1)
  }

  /// The word with one item of this kind fewer in flight.
  @inline(__always)
  func finishing(barrier: Bool) -> ConcurrentWord {
    ConcurrentWord(barrier ? raw & ~Self.barrier : raw &- 1)
  }
}
