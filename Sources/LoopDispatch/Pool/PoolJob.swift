/// Something a queue hands to the pool for a worker to run.
protocol PoolRunnable: AnyObject, Sendable {
  /// Runs on a worker thread.
  func runFromPool()
}

/// One unit of pool work: a global queue's own item, a custom concurrent queue's item on its
/// way through the global queue, or a serial queue to drain.
///
/// A job lives in a `JobNode` and is moved, never copied, from submission to run: the
/// payload's reference counts are touched once when it is made and once when it is dropped.
enum PoolJob: Sendable {
  /// An item submitted to a global queue itself: the worker shows its own thread name.
  case closure(@Sendable () -> Void)
  /// An item of a custom queue targeting a global queue: it names the thread itself.
  case childItem(@Sendable () -> Void)
  case runnable(any PoolRunnable)
  /// An item submitted to a global queue with `async(group:)`: leaves the group when done.
  /// (Carried in the job itself, not in a wrapping closure: one allocation less per item.)
  /// The group is not retained per item: it keeps itself alive while its count is not zero
  /// (`Group.enter`), and this item's count is not released before its `leave`.
  case grouped(@Sendable () -> Void, GroupReference)
  /// A C function and its context (`dispatch_async_f`): no closure, no allocation.
  case function(CFunctionCall)
  /// `dispatch_group_async_f` onto a global queue.
  case groupedFunction(CFunctionCall, GroupReference)
  /// A started item of a custom concurrent queue whose target is a global queue
  /// (`Queue.forward`): no wrapping closure.
  /// The queue is held unretained: it keeps itself alive while items are in flight.
  case concurrentItem(QueueReference, QueueWork, enqueuedAt: UInt64)
  /// A Swift task's job for `PoolExecutor` or the installed default executor: run as that
  /// executor, with no closure around it (one allocation less per job).
  case task(UnownedJob, UnownedTaskExecutor)
  /// A serial queue's drain sent to an overcommit lane instead of `root`, the plain global
  /// queue it targets (`Queue.drainsOnOvercommitBesideNeighbours`). The overcommit worker
  /// shows `root` as the current global queue while it runs (`divertedFrom`), so that what
  /// the queue's items see (`dispatch_assert_queue`) does not depend on the machine's load.
  /// It holds a slot of `WorkerPool.divertedDrainLimit`, given back (or passed on to the
  /// queue's next drain) when it has run (`WorkerPool.runDivertedDrain`).
  case divertedDrain(Queue, from: Queue)

  /// The plain global queue a `divertedDrain` came from, or nil.
  var divertedFrom: Queue? {
    if case .divertedDrain(_, let root) = self { return root }
    return nil
  }

  /// The group a `grouped` or `groupedFunction` job leaves when done, else nil.
  @inline(__always)
  var group: GroupReference? {
    switch self {
    case .grouped(_, let group), .groupedFunction(_, let group): return group
    default: return nil
    }
  }

  /// Runs a `grouped` or `groupedFunction` job without its `leave`, which the caller owes
  /// (`Worker.flushDeferredLeaves`).
  @inline(__always)
  func runLeavingGroupToCaller() {
    switch self {
    case .grouped(let body, _):
      ThreadName.showOwnName()
      body()
    case .groupedFunction(let call, _):
      ThreadName.showOwnName()
      call.run()
    default: run()
    }
  }

  @inline(__always)
  func run() {
    switch self {
    case .closure(let body):
      ThreadName.showOwnName()
      body()
    case .childItem(let body): body()
    case .runnable(let target): target.runFromPool()
    case .grouped(_, let group), .groupedFunction(_, let group):
      runLeavingGroupToCaller()
      group.leave()
    case .function(let call):
      ThreadName.showOwnName()
      call.run()
    case .concurrentItem(let queue, let work, let enqueuedAt):
      // Borrowed for the call: `runConcurrentItem` may drop the queue's last reference
      // as its last step (rule 4 of `Queue+Concurrent.swift`).
      queue.queue._withUnsafeGuaranteedRef { queue in
        // A top-level item: a queue that does not name threads shows the worker's own name
        // (`ThreadName.showEnclosingQueue`); `runConcurrentItem` wants the label otherwise.
        if !queue.namesThreads { ThreadName.showOwnName() }
        queue.runConcurrentItem(work, enqueuedAt: enqueuedAt)
      }
    case .task(let job, let executor):
      ThreadName.showOwnName()
      job.runSynchronously(on: executor)
    case .divertedDrain(let queue, _): WorkerPool.shared.runDivertedDrain(of: queue)
    }
  }
}

/// A group an item entered, held without a retain (see `PoolJob.grouped`).
struct GroupReference: @unchecked Sendable {
  // @unchecked Sendable: `Group` is Sendable; this only carries it unretained.
  let group: Unmanaged<Group>

  init(_ group: Group) { self.group = Unmanaged.passUnretained(group) }

  /// Leaves the group. The group may be freed by this very call (its last count), so the
  /// reference is guaranteed for the call only, with no retain or release around it.
  @inline(__always)
  func leave() { group._withUnsafeGuaranteedRef { $0.leave() } }

  /// Leaves the group `count` times at once (see `leave()`).
  @inline(__always)
  func leave(count: UInt32) { group._withUnsafeGuaranteedRef { $0.leave(count: count) } }
}

/// A concurrent queue an item runs on, held without a retain (see `PoolJob.concurrentItem`).
struct QueueReference: @unchecked Sendable {
  // @unchecked Sendable: `Queue` is Sendable; this only carries it unretained.
  let queue: Unmanaged<Queue>

  init(_ queue: Queue) { self.queue = Unmanaged.passUnretained(queue) }
}
