import Synchronization

/// Shared state of one `apply` call.
///
/// Walk-through:
/// 1. The caller and up to (CPUs − 1) pool helpers claim chunks of iterations from `next`
///    with a relaxed fetch-add (striding keeps the counter off the hot path).
/// 2. Each participant adds the iterations it finished to `finished` (releasing).
/// 3. The caller waits until `finished == iterations` (acquiring), so every iteration has
///    returned; helpers that start later find nothing to claim and never touch `work`.
/// 4. The caller always participates, so a nested `apply` completes even if no helper runs.
private final class ApplyRun: @unchecked Sendable {
  // @unchecked Sendable: `work` is written once before publication and cleared by the caller
  // only after every claimed iteration has finished (step 3); counters are atomic.
  let iterations: Int
  let chunk: Int
  var work: (@Sendable (Int) -> Void)?
  let queue: Queue
  let next = Atomic<Int>(0)
  let finished = Atomic<Int>(0)
  let allDone = OneShotEvent()

  init(iterations: Int, chunk: Int, queue: Queue, work: @escaping @Sendable (Int) -> Void) {
    self.iterations = iterations
    self.chunk = chunk
    self.queue = queue
    self.work = work
  }

  func participate() {
    ThreadFrame.with(queue, exclusive: false) {
      while true {
        let start = next.wrappingAdd(chunk, ordering: .relaxed).oldValue
        if start >= iterations { return }
        let end = Swift.min(start + chunk, iterations)
        do {
          let body = work!
          for index in start..<end { body(index) }
        }
        // Releasing; pairs with the acquiring load in the caller's wait.
        let total = finished.wrappingAdd(end - start, ordering: .acquiringAndReleasing).newValue
        if total == iterations { allDone.signal() }
      }
    }
  }
}

extension Queue {
  /// Runs `work(0) … work(iterations - 1)` and returns when every call has returned.
  ///
  /// On a serial queue the calls run one after another on the queue (like `sync`). On a
  /// global queue they spread over the pool, the calling thread taking part. On a custom
  /// concurrent queue (or a serial queue made wide by ``setWidth(_:)``) they run as work of that queue: the call waits, as a `sync` would, for
  /// a barrier that runs or waits ahead of it and for the queue to be resumed or activated,
  /// and the helpers are items of the queue, so its width holds (libdispatch reserves the
  /// queue's width for apply). A nested call never deadlocks: an `apply` onto a concurrent
  /// queue from work already running on it runs its iterations on the calling thread.
  public func apply(iterations: Int, execute work: @Sendable (Int) -> Void) {
    if iterations <= 0 { return }
    let shares = kind == .concurrent || isWide
    if isSerialLike && !shares {
      sync {
        // A width change submitted before this call has applied by the time of this turn.
        if isWide {
          spread(iterations: iterations, helpersOnQueue: true, work)
        } else {
          for index in 0..<iterations { work(index) }
        }
      }
      return
    }
    guard shares else {
      spread(iterations: iterations, helpersOnQueue: false, work)
      return
    }
    if isCurrent {
      // Nested: this thread already holds a share of the queue. Taking more (the sync
      // below, or helpers) could wait on width that only this call's return frees.
      ThreadFrame.with(self, exclusive: false) { for index in 0..<iterations { work(index) } }
      return
    }
    sync { spread(iterations: iterations, helpersOnQueue: true, work) }
  }

  /// Runs the iterations on the calling thread and up to (CPUs − 1) helpers: pool jobs at
  /// this queue's priority, or, with `helpersOnQueue`, items of this (concurrent) queue. A
  /// helper that starts after the iterations are all claimed returns without touching
  /// `work`, so one that waited behind a barrier (or for width) does no harm.
  private func spread(
    iterations: Int, helpersOnQueue: Bool, _ work: @Sendable (Int) -> Void
  ) {
    let pool = WorkerPool.shared
    let participants = Swift.min(iterations, Swift.max(1, Swift.min(width, pool.baseThreads)))
    if participants == 1 {
      ThreadFrame.with(self, exclusive: false) { for index in 0..<iterations { work(index) } }
      return
    }
    // About 8 chunks per participant balances load against counter traffic.
    let chunk = Swift.max(1, iterations / (participants * 8))
    withoutActuallyEscaping(work) { escapable in
      let run = ApplyRun(iterations: iterations, chunk: chunk, queue: self, work: escapable)
      for _ in 1..<participants {
        if helpersOnQueue {
          concurrentEnqueue(.closure({ run.participate() }, barrier: false))
        } else {
          // This global queue's own submission: its lane, plain or overcommit.
          async { run.participate() }
        }
      }
      // Helpers are a request for parallelism: a wake-up their submission deferred because
      // every CPU looked taken (`WorkerPool+DeferredWake.swift`) is made now.
      WorkerPool.payOwedWake()
      run.participate()
      if run.finished.load(ordering: .acquiring) != iterations { run.allDone.wait() }
      run.work = nil
    }
  }

  /// Runs `work` for each index in `0..<iterations` across the pool at the calling queue's
  /// priority, and returns when all are done.
  public static func concurrentPerform(
    iterations: Int, execute work: @Sendable (Int) -> Void
  ) {
    let priority = current?.priority ?? .default
    global(priority).apply(iterations: iterations, execute: work)
  }
}
