import Synchronization

/// Parking and waking plain workers without a lock.
///
/// The idle set is a bitmap (`idleWords`): bit `i` is worker `i`'s. A worker out of work
/// stores 1 in its park word, sets its bit, re-checks every queue, and sleeps on the word
/// while it is 1. A waker claims a set bit by clearing it with a compare-and-swap, then
/// stores 0 in that worker's word and wakes it. Clearing the bit is the claim: exactly one
/// party clears each setting of it — a waker (which then owes the wake-up), or the worker
/// itself (`withdrawIdle`: it found work in its re-check, timed out to retire, or woke).
///
/// No lost wake-up (Dekker's pattern; every access below is sequentially consistent):
/// - a submitter publishes its job (the injection queue's `pushed` count or a local queue's
///   tail), then `notifyWork` loads `searching` and the idle set;
/// - a parking worker sets its bit, then loads every queue's count (`hasQueuedWork`);
/// - a spinning worker increments `searching`, then loads the queues.
/// In the single total order of these operations, either the submitter's loads come after
/// the worker's write (it sees the spinner and leaves the job to it, or sees the bit and
/// wakes the worker), or the worker's loads come after the publication (it sees the job).
///
/// A stale wake-up (a waker that claimed the bit of a worker which then found work on its
/// own) may land in a later park of that worker: it wakes with nothing to do, withdraws its
/// bit if still set, and goes round its loop again. The cost is one futile check.
///
/// Which worker: the lowest set bit, so the base workers (started first, lowest indices)
/// are preferred and the extra ones stay parked long enough to retire.
extension WorkerPool {
  /// Announces `worker` idle (before its re-check). Its own thread.
  @inline(__always)
  func announceIdle(_ worker: Worker) {
    let (word, bit) = idlePosition(worker)
    idleWords[word].bitwiseOr(bit, ordering: .sequentiallyConsistent)
  }

  /// Takes `worker` out of the idle set; returns whether its bit was still set (false: a
  /// waker claimed it and owes it a wake-up). Its own thread.
  @inline(__always)
  func withdrawIdle(_ worker: Worker) -> Bool {
    let (word, bit) = idlePosition(worker)
    return idleWords[word].bitwiseAnd(~bit, ordering: .sequentiallyConsistent).oldValue & bit != 0
  }

  @inline(__always)
  private func idlePosition(_ worker: Worker) -> (Int, UInt64) {
    (worker.index / 64, UInt64(1) << UInt64(worker.index % 64))
  }

  /// After publishing work: wakes one parked worker unless a worker is searching; when none
  /// is parked either, makes sure the supervisor watches (every worker is busy, and may be
  /// blocked). Any thread.
  @inline(__always)
  func notifyWork() {
    if searching.load(ordering: .sequentiallyConsistent) > 0 { return }
    if !wakeIdleWorker() { supervisor.noteWorkWaiting() }
  }

  /// Claims and wakes the parked worker with the lowest index. Returns false if none is
  /// parked. Any thread.
  @discardableResult
  func wakeIdleWorker() -> Bool {
    for word in 0..<idleWordCount {
      var bits = idleWords[word].load(ordering: .sequentiallyConsistent)
      while bits != 0 {
        let bit = bits & (~bits &+ 1)  // The lowest set bit.
        let (claimed, original) = idleWords[word].compareExchange(
          expected: bits, desired: bits & ~bit, ordering: .sequentiallyConsistent)
        if claimed {
          unmanagedWorker(at: word * 64 + bit.trailingZeroBitCount)._withUnsafeGuaranteedRef {
            $0.unpark()
          }
          return true
        }
        bits = original
      }
    }
    return false
  }

  /// An extra worker that timed out in the idle set and withdrew itself: it leaves the pool.
  /// Its queues are empty (it parked after finding no work anywhere, and only it fills
  /// them) and its slot too; the object stays in the table for the next start.
  /// The worker's own thread, just before it exits.
  func retire(_ worker: Worker) {
    supervisor.unregister(worker)
    let call = state.withLock { state -> OvercommitCall in
      state.threads -= 1
      state.retired.append(worker.index)
      // The freed slot goes to overcommit jobs waiting for one (rule 5 of `Overcommit.swift`).
      return callOvercommitWorker(&state)
    }
    perform(call)
  }
}
