@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Parking and waking plain workers without a lock, and who owes which wake-up.
///
/// The idle set is a bitmap (`idleWords`): bit `i` is worker `i`'s. A worker out of work
/// stores 1 in its park word, sets its bit, re-checks every queue, and sleeps on the word
/// while it is 1. A waker claims a set bit by clearing it with a compare-and-swap, then
/// stores 0 in that worker's word and wakes it. Clearing the bit is the claim: exactly one
/// party clears each setting of it — a waker (which then owes the wake-up, and always
/// delivers it: `unpark` follows a successful claim unconditionally), or the worker itself
/// (`withdrawIdle`: it found work in its re-check, timed out to retire, or woke).
///
/// Every access below is sequentially consistent, so all of them sit in one total order S.
/// The parties and what each owes (the model in Tests/PoolModelTests/PoolProtocolModel
/// explores these steps over every interleaving):
/// 1. A submitter publishes its job (the injection queue's `pushed` count or a local queue's
///    tail), then `notifyWork` loads `searching`; if a worker searches, the submitter owes
///    nothing more: the job is the searchers' (rule 3). Otherwise it claims an idle bit and
///    owes that worker its wake (rule 4); if no bit is set, it tells the supervisor
///    (`noteWorkWaiting`, the supervisor's own Dekker pair, `PoolSupervisor.run`). A submitter
///    outside the pool may instead defer the wake while every CPU is taken, and make it before
///    it blocks, the supervisor covering the rest (`WorkerPool+DeferredWake.swift`): the model
///    lets the submitter off the pool defer its last wake-up (`.fixedDeferring`).
/// 2. A parking worker sets its bit, then loads every queue's count (`hasQueuedWork`). In S,
///    either a submitter's loads come after the bit (it sees the bit, or a searcher) or the
///    worker's loads come after the publication (it sees the job and stays up).
/// 3. The last searcher's rule. A spinning worker increments `searching`, loads the queues,
///    and decrements `searching` when it leaves. A submitter that saw `searching > 0` made its
///    load before some searcher's decrement, and its publication before that load; so the
///    publication precedes, in S, every load that searcher makes after its decrement: the
///    scan after its spin found work, or the re-check of the park that follows an empty spin.
///    Either way, once it has taken a job it makes those loads again (`passOnWake`): if any
///    job is still queued it runs `notifyWork` itself, standing for every submitter that left
///    its job to it. Without this, a worker that submits two jobs while another spins and
///    then blocks in the kernel could leave the second job in its own local queue with nobody
///    told (the searcher takes the first): issue 30's stranded job. The model finds it both
///    after a spin that found work and after a re-check that did.
/// 4. The consumed wake. A worker whose bit a waker claimed stands for that waker's
///    submitter, whether it was asleep (woken) or still re-checking (its `withdrawIdle`
///    found the bit already clear). It may take another job than the one the wake was for,
///    so after taking its job it too makes `passOnWake`'s loads, which follow the claim in S
///    (the claim precedes the worker's `withdrawIdle` on the same word, and the submitter's
///    publication precedes its claim). So a worker passes the wake on whenever it leaves a
///    park, whichever way (it cannot tell a stale wake from a fresh one, nor a re-check that
///    follows a spin from one that does not), at the cost of one scan per park.
/// 5. The supervisor, once told, stays awake while jobs wait and rescues what a blocked
///    worker holds: its local queues after a tick without progress, its run-next slot after
///    two ticks (`WorkerPool+RunNext.swift`, rule 4). So a worker that blocks in the kernel
///    with work in its queues never holds it for good: rules 3 and 4 wake a parked worker or
///    tell the supervisor, and the supervisor moves the work within a tick or two.
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
    // Counted before the bit is set: `PoolDiagnostics.isQuiet` sees the bit and then reads
    // the counts (PoolWriteCountTests), and a park counted after it could fall into the next
    // shape's figures while its withdrawal stayed in this one's.
    countSharedWrite(.park)
    countPoolEvent(.park)
    idleWords[word].bitwiseOr(bit, ordering: .sequentiallyConsistent)
  }

  /// Takes `worker` out of the idle set; returns whether its bit was still set (false: a
  /// waker claimed it and owes it a wake-up). Its own thread.
  @inline(__always)
  func withdrawIdle(_ worker: Worker) -> Bool {
    let (word, bit) = idlePosition(worker)
    countSharedWrite(.park)
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
    poolProbe(.notify)
    if searching.load(ordering: .sequentiallyConsistent) > 0 { return }
    if !wakeIdleWorker() { supervisor.noteWorkWaiting() }
  }

  /// Rules 3 and 4: a worker that left a search or a park has taken its job; if work is
  /// still queued, it wakes a worker (or tells the supervisor) for the submitters it stood
  /// for. The loads come after the worker's decrement of `searching` or its `withdrawIdle`.
  /// Its own thread.
  @inline(__always)
  func passOnWake() {
    if hasQueuedWork() { notifyWork() }
  }

  /// Claims and wakes the parked worker with the lowest index. Returns false if none is
  /// parked. Any thread.
  @discardableResult
  func wakeIdleWorker() -> Bool {
    for word in 0..<idleWordCount {
      var bits = idleWords[word].load(ordering: .sequentiallyConsistent)
      while bits != 0 {
        let bit = bits & (~bits &+ 1)  // The lowest set bit.
        poolProbe(.claim)
        countSharedWrite(.wake)  // The claim (each try).
        let (claimed, original) = idleWords[word].compareExchange(
          expected: bits, desired: bits & ~bit, ordering: .sequentiallyConsistent)
        if claimed {
          countSharedWrite(.wake)  // The sleeper's park word (`unpark`).
          countPoolEvent(.wake)
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
    // Before `threads` drops (under the lock `PoolDiagnostics.isQuiet` reads it with).
    countPoolEvent(.workerRetire)
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
