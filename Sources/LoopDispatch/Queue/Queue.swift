@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// A GCD-style dispatch queue: the main queue, a global queue, or a custom serial or
/// concurrent queue.
///
/// Custom queues run their work on a target queue (a global queue by default, or another
/// custom queue: hierarchies of any depth). A serial queue runs one item at a time, in
/// submission order; a concurrent queue runs items side by side up to its width, and runs
/// barrier items alone.
///
/// Thread-safety: every method may be called from any thread.
public final class Queue: @unchecked Sendable {
  // @unchecked Sendable: the serial state is atomic (see `Queue+Serial.swift`), the
  // concurrent state is behind a mutex, the item list is taken from only by the thread that
  // holds the SCHEDULED bit, and the rest is immutable or behind a mutex.

  /// Options for creating a queue.
  public struct Attributes: OptionSet, Sendable {
    /// The attribute bits.
    public let rawValue: Int
    /// Creates attributes from their bits; use the named attributes instead.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Items may run side by side (up to the width); barriers run alone.
    public static let concurrent = Attributes(rawValue: 1)
    /// The queue runs nothing until ``Queue/activate()``.
    public static let initiallyInactive = Attributes(rawValue: 2)
  }

  /// Options for one submission.
  public struct Flags: OptionSet, Sendable {
    /// The flag bits.
    public let rawValue: Int
    /// Creates flags from their bits; use the named flags instead.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// On a custom concurrent queue: wait for running items, run alone, then let the rest
    /// continue. On serial and global queues a barrier is an ordinary submission.
    public static let barrier = Flags(rawValue: 1)
  }

  enum Kind: Equatable {
    /// A global queue: plain (one worker per CPU) or overcommit (`Pool/Overcommit.swift`).
    case root(Priority, overcommit: Bool)
    case serial
    case concurrent
    /// The main queue: serial, drained by `EventLoop.main` on the process main thread.
    case main
  }

  /// Serial queues and the main queue share the lock-free serial machinery.
  var isSerialLike: Bool { kind == .serial || kind == .main }

  // MARK: The layout ThreadSanitizer reads (keep these two first)
  //
  // A C client built with -fsanitize=thread runs the TSan runtime's libdispatch
  // interceptors, which read a queue's target and width straight from the object behind
  // the handle, at the offsets LoopDispatch exports in `dispatch_queue_offsets`
  // (Sources/CDispatch/tsan.c): the target at byte 16 (8 bytes, NULL at the end of the
  // chain), the width at byte 24 (2 bytes, 1 for serial). A Swift class instance is a
  // 16-byte header followed by its stored properties in declaration order, so these two
  // must stay the first stored properties (`test_sanitizer_layout` in the C suite checks).

  /// Atomic. The current target, unretained; kept alive by `firstTarget` or by
  /// `extras.targetsKeptAlive`, so a racing reader never sees a freed queue. Byte 16.
  private let targetPointer = Atomic<UnsafeMutableRawPointer?>(nil)
  /// The width as ThreadSanitizer's interceptors read it (byte 24): 1 for serial queues and
  /// the main queue, the width (at most `UInt16.max`) for others. Written at creation and
  /// by `setWidth` (under the concurrent state's lock); no Swift code reads it.
  var sanitizerWidth: UInt16 = 1

  /// The queue's name, shown in diagnostics and thread names.
  public let label: String
  let kind: Kind

  // MARK: Serial state (see Queue+Serial.swift for the protocol)

  /// Keeps the serial state off the line of the fields every submission reads and nobody
  /// writes after creation (`kind`, `label`, the target), and the words below on lines of
  /// their own, by who writes them:
  /// - `state`: read by every submission (`wakeUp`) and by the drainer before each item
  ///   (the suspension check), written only when the queue is scheduled, released,
  ///   suspended or locked by `sync` (not per item while a drain runs);
  /// - `incoming`: exchanged by every submission, swapped back to nil by the drainer that
  ///   takes the last item (with `concurrentWord`, a concurrent queue's equivalent);
  /// - `head`: written per item by the drainer, and by a submission into an empty list
  ///   (the drainer also swaps `incoming` back to nil when it takes the last item).
  /// With all of them on one line, four threads feeding one serial queue made the drainer
  /// miss the cache on `state` and on its list after every producer's exchange (perf: a
  /// third of the drain's samples on those two), and each producer miss on `kind`. Each pad
  /// is 128 bytes (`CacheLinePad`). Never read.
  private let serialPadKind = CacheLinePad()
  /// Atomic state word; bit table in `Queue+Serial.swift`.
  let state = Atomic<UInt64>(0)
  /// Atomic. When the drain under way was scheduled, in ticks (`Queue+Serial.swift`, step
  /// 5), or 0: written by the thread whose `wakeUp` set SCHEDULED, before it hands the
  /// drain on (not for the main queue), and set to 0 by a drain that yields; read by the
  /// drain. Only the holder of SCHEDULED touches it. On `state`'s line, which both have just
  /// touched. Relaxed: the hand-off of the drain (the pool's or the event loop's queue)
  /// publishes it.
  let drainScheduledAt = Atomic<UInt64>(0)
  /// Atomic. The thread (`pthread_self`) this queue's `sync` lock is biased to
  /// (`Queue+SyncBias.swift`), or 0: written when the bias is granted (under SYNC_LOCKED) and
  /// cleared by that thread when it leaves the bias; read by every `sync` of the queue.
  let biasOwner = Atomic<UInt>(0)
  /// Atomic. 1 while the bias owner is in (or entering) a biased `sync`, else 0. Written
  /// only by the owner, with plain stores (no locked instruction: the point of the bias);
  /// read by the owner and by a revoker after its `membarrier`.
  let biasBusy = Atomic<UInt32>(0)
  /// Atomic. What a revocation did with SYNC_LOCKED (`SyncBiasVerdict`): written by the
  /// revoker before it clears REVOKING, read by the owner after it saw REVOKING cleared.
  let biasVerdict = Atomic<UInt32>(0)
  /// Atomic. The thread of the last plain `sync` that took this queue's lock, or 0 after a
  /// drain or a child's lock chain held it (the streak is broken). Touched only by the
  /// thread holding the queue (SYNC_LOCKED or SCHEDULED).
  let biasCandidate = Atomic<UInt>(0)
  /// Atomic. How many plain `sync`s in a row `biasCandidate` took, or `SyncBias.spent`
  /// once the bias was granted (never again). Touched only by the holder of SYNC_LOCKED.
  /// The five bias words sit after `state`, on the same side of the pad (on its line or
  /// the next, by where the allocator put the queue): a `sync` has just touched them.
  let biasStreak = Atomic<UInt32>(0)
  private let serialPadState = CacheLinePad()
  /// Atomic. The newest node of the item list (its tail, `Queue+Serial.swift`), nil when the
  /// list is empty: exchanged by every submission.
  let incoming = Atomic<JobNodePointer?>(nil)
  /// Atomic. A custom concurrent queue's state word (`ConcurrentWord.swift`); 0 otherwise.
  /// On `incoming`'s line: each is the word every submission and completion of its kind of
  /// queue writes, and a queue uses one of them (a serial queue made wide uses both, its
  /// front's and its back's), so the word gets a line of its own without another pad.
  let concurrentWord = Atomic<UInt64>(0)
  private let serialPadIncoming = CacheLinePad()
  /// Atomic. The oldest item not yet taken (the list's head, `Queue+Serial.swift`), or nil.
  /// Written by the thread holding SCHEDULED (per item), and by a submission that found the
  /// list empty.
  let head = Atomic<JobNodePointer?>(nil)
  /// The other side of the head (see `serialPadKind`). Never read.
  private let serialPadHead = CacheLinePad()

  /// The next queue up the target chain whose SYNC_LOCKED was taken together with this
  /// queue's (nil: none), so the holder releases exactly what it locked even if `setTarget`
  /// moves the chain meanwhile. Only touched by the thread holding this queue's SYNC_LOCKED
  /// (written after the acquiring CAS, read before the releasing subtract). Unretained:
  /// every target a queue ever had stays retained for the queue's life (`firstTarget`,
  /// `extras.targetsKeptAlive`), and the holder keeps the queue itself alive.
  var syncChainNext: Unmanaged<Queue>?

  // MARK: Concurrent state

  /// Present for custom concurrent queues. Protected by its own lock.
  private let ownConcurrentState: LockedValue<ConcurrentState>?
  /// Atomic. A serial queue made wide (`Queue+Wide.swift`): its concurrent state, retained
  /// until deinit, published before the WIDE bit of `state`; nil until then.
  let wideStatePointer = Atomic<UnsafeMutableRawPointer?>(nil)
  /// Atomic. A custom concurrent queue's width, for its lock-free paths: written under its
  /// lock (`ConcurrentState.width` is the copy the lock holder uses), read relaxed.
  let concurrentWidth = Atomic<Int>(Int.max)
  /// Atomic. A hint, for submitters to a custom concurrent queue (or a wide serial queue's
  /// back): true while items wait in `ConcurrentState.pending`. Written (relaxed) only under
  /// the lock, when PENDING is set or cleared in `concurrentWord`, and only if it changes;
  /// read relaxed. A submitter that sees it set goes straight to the lock, without first
  /// reading `concurrentWord`, which every finish writes (Queue+Concurrent.swift, step 1).
  /// Correctness never rests on it: a stale value only costs that submitter one path's
  /// extra work. On this read-mostly line rather than `concurrentWord`'s.
  let concurrentBacklogHint = Atomic<Bool>(false)

  /// The concurrent state, unretained: a custom concurrent queue's, or a wide serial
  /// queue's (nil for a serial queue not made wide, and for the main and global queues).
  /// Safe to use while the queue lives: `ownConcurrentState` is a constant, and a wide
  /// state is retained by this queue until deinit once published (`applyWidth`).
  private var unmanagedConcurrentState: Unmanaged<LockedValue<ConcurrentState>>? {
    if let ownConcurrentState { return Unmanaged.passUnretained(ownConcurrentState) }
    return wideStatePointer.load(ordering: .acquiring).map { Unmanaged.fromOpaque($0) }
  }

  /// Runs `body` under the lock of the concurrent state, borrowed: no retain and release of
  /// the state object around the lock. They were one more shared line written twice per
  /// lock hold, by the submitter and the finishers alike (perf, `rw_barrier`).
  /// The state must exist: the queue is a custom concurrent one, or a wide serial queue
  /// whose caller saw the WIDE bit, which is set after the state's publication
  /// (`Queue+Wide.swift`). The caller's `self` is alive for the call (in
  /// `concurrentFinished`, by its own retain across the lock: rule 4 of
  /// `Queue+Concurrent.swift`).
  @inline(__always)
  func withConcurrentStateLock<Result>(_ body: (inout ConcurrentState) -> Result) -> Result {
    unmanagedConcurrentState!._withUnsafeGuaranteedRef { $0.withLock(body) }
  }

  /// The concurrent state (see `unmanagedConcurrentState`).
  var concurrentState: LockedValue<ConcurrentState>? {
    unmanagedConcurrentState?.takeUnretainedValue()
  }

  /// Maximum items running at once: 1 for serial queues and the main queue, unlimited for
  /// global queues, the width (``setWidth(_:)``) of a concurrent queue or of a serial queue
  /// made wide.
  public var width: Int {
    switch kind {
    case .root: return Int.max
    case .main: return 1
    case .serial: return isWide ? concurrentState!.withLock { $0.width } : 1
    case .concurrent: return concurrentState!.withLock { $0.width }
    }
  }

  // MARK: Target, context, specifics

  /// Atomic. Whether the current target is a global queue (the common, fast case).
  let targetIsRoot = Atomic<Bool>(false)
  /// The target given at creation, retained for the queue's life.
  private let firstTarget: Queue?
  /// Atomic. Rarely used state (context, finalizer, specifics, later targets), allocated on
  /// first use to keep idle queues small: a retained `LockedValue<QueueExtras>`, or nil.
  private let extrasPointer = Atomic<UnsafeMutableRawPointer?>(nil)

  // MARK: Counters (see `QueueCounters.swift`)

  /// Atomic. The queue's `QueueCounters` (retained), created with its first item, or nil:
  /// a queue that never ran anything costs one word here.
  let countersPointer = Atomic<UnsafeMutableRawPointer?>(nil)

  /// Whether a worker draining this queue takes its label as the thread's name. False for the
  /// runtime's own queues (an I/O channel's), which would otherwise cost a rename (`prctl`)
  /// on every hop through them: their top-level drains and items show the worker's own
  /// name, a nested one the enclosing queue's label. Set right after creation, before the
  /// queue is shared.
  var namesThreads = true
  /// Whether this serial queue's drains go to the overcommit queue of its target's priority
  /// while other processes hold CPUs of the process's budget (`SpinGovernor`, step 4) and
  /// its target is a plain global queue: a drain then gets a thread of its own, as every
  /// serial queue's does in libdispatch, instead of waiting for one of the plain workers the
  /// neighbours already crowd. The C API's `dispatch_queue_create` sets it for serial queues
  /// (<doc:ThreadingModel#Overcommit-queues>). Set right after creation, before the queue is
  /// shared.
  package var drainsOnOvercommitBesideNeighbours = false
  /// The label as a thread name (`ThreadName`), computed once: a worker draining the queue
  /// records it with two stores.
  let kernelName: KernelName

  // MARK: Creation

  /// Creates a custom queue.
  ///
  /// - Parameters:
  ///   - label: A name for diagnostics.
  ///   - attributes: `.concurrent` for a concurrent queue (serial otherwise);
  ///     `.initiallyInactive` to configure it before ``activate()``.
  ///   - width: For concurrent queues, how many items may run at once (default: no limit
  ///     beyond the pool). A width below 1, or a width on a serial queue, is a client bug.
  ///   - target: Where the queue's work runs (default: `Queue.global(.default)`, the plain
  ///     global queue, not the overcommit one: see <doc:ThreadingModel>).
  public init(
    label: String, attributes: Attributes = [], width: Int? = nil, target: Queue? = nil
  ) {
    self.label = label
    kernelName = KernelName(label)
    if attributes.contains(.concurrent) {
      kind = .concurrent
      if let width, width < 1 {
        clientBug("concurrent queue width must be at least 1, got \(width) (queue \"\(label)\")")
      }
      sanitizerWidth = UInt16(clamping: width ?? Int.max)
      let inactive = attributes.contains(.initiallyInactive)
      ownConcurrentState = LockedValue(
        ConcurrentState(inactive: inactive, width: width ?? Int.max), adaptive: true)
      concurrentWidth.store(width ?? Int.max, ordering: .relaxed)
      if inactive { concurrentWord.store(ConcurrentWord.stopped, ordering: .relaxed) }
    } else {
      kind = .serial
      if let width {
        clientBug(
          "width \(width) given for serial queue \"\(label)\"; width applies to concurrent queues")
      }
      ownConcurrentState = nil
      if attributes.contains(.initiallyInactive) {
        state.store(SerialState.inactive, ordering: .relaxed)
      }
    }
    let initial = target ?? Queue.global(.default)
    firstTarget = initial
    publishTarget(initial)
    RuntimeCounters.liveQueues.wrappingAdd(1, ordering: .relaxed)
  }

  /// A global (root) queue.
  private init(rootLabel: String, priority: Priority, overcommit: Bool) {
    label = rootLabel
    kernelName = .none
    kind = .root(priority, overcommit: overcommit)
    sanitizerWidth = UInt16.max
    ownConcurrentState = nil
    firstTarget = nil
    // Listed from the start; never released.
    _ = QueueRegistry.shared.register(
      QueueCounters(
        label: rootLabel, kind: .global, rootPriority: priority, rootOvercommit: overcommit))
  }

  /// The main queue.
  private init(mainQueueLabel: String) {
    label = mainQueueLabel
    kernelName = .none
    kind = .main
    ownConcurrentState = nil
    firstTarget = nil
    _ = installCounters()  // Listed from the start; never released.
  }

  deinit {
    // Fold the final figures into the label's totals (QueueRegistry); the registry holds
    // only the counters, so no snapshot can be holding this queue.
    if let raw = countersPointer.load(ordering: .acquiring) {
      let counters = Unmanaged<QueueCounters>.fromOpaque(raw).takeRetainedValue()
      let slot = counters.registrySlot.load(ordering: .acquiring)
      QueueRegistry.shared.unregister(slot: slot, final: counters.figures)
    }
    RuntimeCounters.liveQueues.wrappingSubtract(1, ordering: .relaxed)
    if kind == .serial {
      let pending =
        serialHasPendingItems || (concurrentState?.withLock { !$0.pending.isEmpty } ?? false)
      freeSerialItems()
      if let raw = wideStatePointer.load(ordering: .acquiring) {
        Unmanaged<LockedValue<ConcurrentState>>.fromOpaque(raw).release()
      }
      if pending {
        clientBug(
          "queue \"\(label)\" was released while suspended or inactive with work still queued")
      }
    } else if concurrentState?.withLock({ !$0.pending.isEmpty }) ?? false {
      clientBug(
        "queue \"\(label)\" was released while suspended or inactive with work still queued")
    }
    runFinalizer()
    if let raw = extrasPointer.load(ordering: .acquiring) {
      Unmanaged<LockedValue<QueueExtras>>.fromOpaque(raw).release()
    }
  }

  /// The rarely used state, created on first use.
  var extras: LockedValue<QueueExtras> {
    if let raw = extrasPointer.load(ordering: .acquiring) {
      // Safe: retained by this queue until deinit.
      return Unmanaged<LockedValue<QueueExtras>>.fromOpaque(raw).takeUnretainedValue()
    }
    let fresh = Unmanaged.passRetained(LockedValue(QueueExtras()))
    let (installed, existing) = extrasPointer.compareExchange(
      expected: nil, desired: fresh.toOpaque(), ordering: .acquiringAndReleasing)
    if installed { return fresh.takeUnretainedValue() }
    fresh.release()
    return Unmanaged<LockedValue<QueueExtras>>.fromOpaque(existing!).takeUnretainedValue()
  }

  /// Whether the extras were ever created (no allocation when they were not).
  var hasExtras: Bool { extrasPointer.load(ordering: .acquiring) != nil }

  /// The main queue: serial, run by `EventLoop.main` on the process main thread (see
  /// ``runMain()``). Posts from any thread wake the loop once per batch.
  public static let main = Queue(mainQueueLabel: "loopdispatch.main")

  private static let roots: [Queue] = Priority.allCases.map {
    Queue(rootLabel: "loopdispatch.global.\($0)", priority: $0, overcommit: false)
  }

  private static let overcommitRoots: [Queue] = Priority.allCases.map {
    Queue(rootLabel: "loopdispatch.global.\($0).overcommit", priority: $0, overcommit: true)
  }

  /// The global queue for `priority`: a concurrent queue backed by the worker pool, which
  /// keeps one thread per CPU (and adds threads only while its workers are blocked).
  ///
  /// Thread-safety: any thread; the same queue for the life of the process.
  public static func global(_ priority: Priority = .default) -> Queue {
    roots[priority.rawValue]
  }

  /// The global queue for `priority`, or with `overcommit: true` its overcommit twin (the
  /// queue `dispatch_get_global_queue(priority, DISPATCH_QUEUE_OVERCOMMIT)` returns in
  /// libdispatch): each item starts at once, on an idle overcommit thread or a new one when
  /// none is idle, even while every CPU is busy, up to 255 pool threads in the process.
  ///
  /// Use it for work that waits for other work (spinning, blocking, long-lived loops) and
  /// must not wait for a free CPU; a custom queue may target it. The plain global queues are
  /// unaffected: their threads never run overcommit work, nor the reverse. Idle overcommit
  /// threads exit after a few seconds (see <doc:ThreadingModel>).
  ///
  /// - Parameters:
  ///   - priority: The queue's priority (default ``Priority/default``).
  ///   - overcommit: `true` for the overcommit queue, `false` for ``global(_:)``.
  /// - Returns: One of eight process-lifetime queues, labelled `loopdispatch.global.<priority>`
  ///   or `loopdispatch.global.<priority>.overcommit`.
  ///
  /// Thread-safety: any thread; the same queue for the life of the process.
  public static func global(_ priority: Priority = .default, overcommit: Bool) -> Queue {
    overcommit ? overcommitRoots[priority.rawValue] : roots[priority.rawValue]
  }

  /// Whether this is an overcommit global queue (``global(_:overcommit:)`` with `true`), for
  /// the C API's `DISPATCH_QUEUE_OVERCOMMIT`. False for every other queue, including custom
  /// queues that target an overcommit queue.
  package var isOvercommit: Bool {
    if case .root(_, overcommit: true) = kind { return true }
    return false
  }

  // MARK: Target

  /// The queue this queue's work runs on (`nil` for global queues).
  public var target: Queue? {
    guard let raw = targetPointer.load(ordering: .acquiring) else { return nil }
    // Safe: every target ever installed stays retained (`firstTarget`, `extras`).
    return Unmanaged<Queue>.fromOpaque(raw).takeUnretainedValue()
  }

  /// The current target, unretained (see `targetPointer`), for borrowing on hot paths.
  @inline(__always)
  var unmanagedTarget: Unmanaged<Queue>? {
    guard let raw = targetPointer.load(ordering: .acquiring) else { return nil }
    return Unmanaged<Queue>.fromOpaque(raw)
  }

  /// The root (global) queue at the end of the target chain; its priority is the queue's.
  var root: Queue {
    var queue = self
    while let next = queue.target { queue = next }
    return queue
  }

  /// The priority the queue's work runs at: its root's.
  public var priority: Priority {
    switch root.kind {
    case .root(let priority, _): return priority
    case .main: return .high
    default: return .default
    }
  }

  /// Makes `target` this queue's target. Takes effect for work scheduled afterwards.
  ///
  /// Setting a target on a global queue, or a target that would form a cycle, is a client bug.
  public func setTarget(_ target: Queue) {
    if case .root = kind {
      clientBug("setTarget on global queue \"\(label)\"; global queues have no target")
    }
    if kind == .main { clientBug("setTarget on the main queue; the main queue has no target") }
    // The walk and the publication happen under one process-wide lock: two concurrent calls
    // `a.setTarget(b)` and `b.setTarget(a)` would otherwise each walk a chain without the
    // other's new link, both pass, and form a cycle (after which `root` never returns).
    // Retargeting is rare; submission never takes this lock.
    Self.targetChanges.withLock { changes in
      changes &+= 1
      var walker: Queue? = target
      while let current = walker {
        if current === self {
          clientBug(
            "setTarget(\"\(target.label)\") on queue \"\(label)\" would create a target cycle")
        }
        walker = current.target
      }
      extras.withLock { $0.targetsKeptAlive.append(target) }
      publishTarget(target)
    }
  }

  /// Held by `setTarget` across its cycle check and the publication of the new target; the
  /// value counts the changes. (Not a lock around `()`: ThreadSanitizer reported the accesses
  /// to that zero-size value, made before the mutex is taken, as a race.)
  private static let targetChanges = LockedValue(0)

  /// Makes `target` current. The caller keeps it alive for the queue's life.
  private func publishTarget(_ target: Queue) {
    if case .root = target.kind {
      targetIsRoot.store(true, ordering: .relaxed)
    } else {
      targetIsRoot.store(false, ordering: .relaxed)
    }
    // Releasing; pairs with the acquiring load in `target`.
    targetPointer.store(Unmanaged.passUnretained(target).toOpaque(), ordering: .releasing)
  }

  // MARK: Submission

  /// Schedules `work` to run on this queue and returns at once.
  ///
  /// - Parameters:
  ///   - flags: `.barrier` to run alone on a custom concurrent queue.
  ///   - work: Runs on a pool thread (or the main thread, for the main queue).
  ///
  /// `work` is taken owned (`consuming`): the caller's reference to a capturing closure's
  /// context moves into the queued item, so a submission neither retains nor releases it
  /// (a borrowed parameter cost a retain here and the caller's release after the call,
  /// two atomic operations on the submitting thread per item).
  public func async(flags: Flags = [], execute work: consuming @escaping @Sendable () -> Void) {
    let barrier = flags.contains(.barrier)
    switch kind {
    case .root(let priority, let overcommit):
      if overcommit {
        WorkerPool.shared.submitOvercommit(.closure(consume work), priority: priority)
      } else {
        WorkerPool.shared.submit(.closure(consume work), priority: priority)
      }
    case .serial, .main:
      serialEnqueue(.closure(consume work, barrier: barrier))
    case .concurrent:
      concurrentEnqueue(.closure(consume work, barrier: barrier))
    }
  }

  /// Submits the fired timers' `items` in order, as `async` would one by one, but onto a
  /// global queue as one append with at most one wake-up (for the service loop's batches).
  func asyncBatch<Items: Collection<DelayedWorkItem>>(_ items: Items) {
    switch kind {
    case .root(let priority, let overcommit):
      let jobs = items.lazy.map(\.poolJob)
      if overcommit {
        WorkerPool.shared.submitOvercommitBatch(jobs, priority: priority)
      } else {
        WorkerPool.shared.submitBatch(jobs, priority: priority)
      }
    case .serial, .main:
      for item in items { serialEnqueue(item.queueWork) }
    case .concurrent:
      for item in items { concurrentEnqueue(item.queueWork) }
    }
  }

  /// Hands this queue's drain (for a serial child) to this queue. Called by the child.
  ///
  /// On a plain global queue the drain may take the calling worker's run-next slot (a queue
  /// the running job just made runnable runs on this worker next, without a wake-up), except
  /// when `yielding`: a drain that used up its budget goes to the back of the lane. On an
  /// overcommit queue it starts at once on a thread of its own (rule 7 of `Overcommit.swift`).
  func enqueueDrain(of child: Queue, yielding: Bool = false) {
    switch kind {
    case .root(let priority, let overcommit):
      if overcommit {
        WorkerPool.shared.submitOvercommit(.runnable(child), priority: priority)
      } else {
        WorkerPool.shared.submit(
          .runnable(child), priority: priority, runNext: !yielding, yielding: yielding)
      }
    case .serial, .main:
      serialEnqueue(.drain(child))
    case .concurrent:
      concurrentEnqueue(.drain(child))
    }
  }

  /// Runs one item of this queue on the calling thread (which holds what the item needs).
  @inline(__always)
  func perform(_ work: QueueWork) {
    switch work {
    case .closure(let body, _): body()
    case .function(let call, _): call.run()
    case .drain(let child): child.drainSerial()
    case .syncWaiter(let waiter, _): waiter.handOff()
    case .actorJob(let job, let onMain):
      job.runSynchronously(on: onMain ? Queue.mainActorExecutor : asUnownedSerialExecutor())
    }
  }
}

extension Queue: PoolRunnable {
  /// A serial queue scheduled directly on a global queue is drained by a pool worker.
  /// A queue that does not name threads shows the worker's own name for its drain (a
  /// top-level drain: the worker's previous job may have left its label wanted, see
  /// `ThreadName.showEnclosingQueue`).
  func runFromPool() {
    if !namesThreads { ThreadName.showOwnName() }
    drainSerial()
  }
}

extension Queue: CustomStringConvertible {
  /// `Queue("<label>")`, for logs and diagnostics.
  public var description: String { "Queue(\"\(label)\")" }
}
