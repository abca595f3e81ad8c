import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// The biased `sync` lock (`Queue+SyncBias.swift`): granted to a thread that keeps `sync`ing
/// a queue, and revoked, without losing or overlapping anything, by the first other user.
///
/// Each test biases its own queue on a thread it starts (`biasedQueue`), so that no other
/// test's work touches the queue and the owner is a thread the test controls.
@Suite(
  .enabled(if: SyncBias.available, "the kernel refuses membarrier, or LOOPDISPATCH_SYNC_BIAS=0"))
struct SyncBiasTests {
  @Test func aThreadThatKeepsSyncingAQueueGetsItsLockBiased() {
    let owner = OwnerThread()
    let queue = Queue(label: "bias.grant")
    let count = Shared(0)
    let biasedAfter = owner.run {
      var seen: Int? = nil
      for index in 1...Int(SyncBias.threshold) + 8 {
        queue.sync { count.value += 1 }
        if seen == nil && queue.isSyncBiased { seen = index }
      }
      return seen ?? -1
    }
    // The grant comes with the release of the sync that completes the streak, and not
    // before: a queue used a few times from a thread is never biased.
    #expect(biasedAfter == Int(SyncBias.threshold) + 1)
    #expect(owner.run { queue.sync { count.value } } == Int(SyncBias.threshold) + 8)
    #expect(queue.isSyncBiased)
    owner.stop()
  }

  @Test func syncsFromTwoThreadsInTurnNeverBiasTheLock() {
    let queue = Queue(label: "bias.alternating")
    let first = OwnerThread()
    let second = OwnerThread()
    for _ in 0..<Int(SyncBias.threshold) * 3 {
      first.run { queue.sync {} }
      second.run { queue.sync {} }
    }
    #expect(!queue.isSyncBiased)
    first.stop()
    second.stop()
  }

  /// A drain of the queue, or a `sync` through a child queue, between two of one thread's
  /// `sync`s breaks its streak: a queue other threads also use is never biased to it.
  @Test func aDrainOrAChildsSyncBetweenTheOwnersSyncsBreaksTheStreak() {
    let owner = OwnerThread()
    let fed = Queue(label: "bias.fed")
    let parent = Queue(label: "bias.parent-of-child")
    let child = Queue(label: "bias.child-of-parent", target: parent)
    for _ in 0..<Int(SyncBias.threshold) * 3 {
      owner.run {
        fed.sync {}
        parent.sync {}
      }
      let ran = Latch()
      fed.async { ran.open() }
      #expect(ran.wait(seconds: 30))
      child.sync {}
    }
    #expect(!fed.isSyncBiased)
    #expect(!parent.isSyncBiased)
    // Never granted at all (a grant that the next submission revoked would leave neither
    // queue biased at the end, but would spend its streak).
    let fedStreak = fed.biasStreak.load(ordering: .relaxed)
    let parentStreak = parent.biasStreak.load(ordering: .relaxed)
    #expect(fedStreak != SyncBias.spent)
    #expect(parentStreak != SyncBias.spent)
    owner.stop()
  }

  #if DEBUG
    /// An owner that meets a revocation under way waits for it (a short spin, then asleep on
    /// `SyncBias.revocationsEnded`) and is woken when it ends: the revoker is parked between
    /// setting REVOKING and its verdict while the owner's `sync` starts. Without the wake, the
    /// owner would sleep for good and the `sync` never return.
    @Test func anOwnerMeetingARevocationUnderWayWaitsForItsEnd() {
      let (queue, owner) = biasedQueue("bias.parked-revoker")
      let parked = Latch()
      let release = Semaphore(value: 0)
      SyncBiasHooks.setAfterRevokingSet { revoked in
        guard revoked === queue else { return }
        parked.open()
        release.wait()
      }
      let ownerAsleep = Latch()
      SyncBiasHooks.setOwnerSleeps { waiting in
        if waiting === queue { ownerAsleep.open() }
      }
      defer {
        SyncBiasHooks.setAfterRevokingSet(nil)
        SyncBiasHooks.setOwnerSleeps(nil)
      }
      let itemRan = Latch()
      let revoker = startThread { queue.async { itemRan.open() } }
      #expect(parked.wait(seconds: 30))
      let syncReturned = Latch()
      let order = Shared([String]())
      owner.submit {
        queue.sync { order.value.append("sync") }
        syncReturned.open()
      }
      // The owner found REVOKING, spun, and is about to sleep; only the revoker's end wakes it.
      #expect(ownerAsleep.wait(seconds: 30))
      release.signal()
      #expect(syncReturned.wait(seconds: 30))
      #expect(itemRan.wait(seconds: 30))
      pthread_join(revoker, nil)
      #expect(!queue.isSyncBiased)
      let verdict = queue.biasVerdict.load(ordering: .acquiring)
      #expect(verdict == SyncBiasVerdict.released || verdict == SyncBiasVerdict.handed)
      #expect(owner.run { queue.sync { order.value } } == ["sync"])
      owner.stop()
    }
  #endif

  /// An item submitted from another thread ends the bias (the owner is outside its `sync`:
  /// the revoker releases the lock) and runs; the owner's next `sync` takes the plain path
  /// and comes after it.
  @Test func anAsyncFromAnotherThreadRevokesTheBiasAndRuns() {
    let (queue, owner) = biasedQueue("bias.async")
    let ran = Latch()
    let value = Shared(0)
    queue.async {
      value.value = 1
      ran.open()
    }
    #expect(ran.wait(seconds: 30))
    #expect(!queue.isSyncBiased)
    let verdict = queue.biasVerdict.load(ordering: .acquiring)
    #expect(verdict == SyncBiasVerdict.released)
    #expect(owner.run { queue.sync { value.value } } == 1)
    owner.stop()
  }

  /// A revocation while the owner is inside its `sync` hands the lock to the owner: the item
  /// runs after the owner's body, never beside it, and is not stranded (the owner releases
  /// the lock it was handed).
  @Test func aRevocationDuringTheOwnersSyncHandsItTheLock() {
    let (queue, owner) = biasedQueue("bias.handed")
    let inBody = Flag()
    let overlapped = Flag()
    let ran = Latch()
    let seenInBody = owner.run {
      queue.sync {
        inBody.value.store(true, ordering: .sequentiallyConsistent)
        // The revoking submission returns only after the revocation's verdict is written:
        // joined here, inside the body, it must have found the owner busy.
        let submitter = startThread {
          queue.async {
            overlapped.value.store(
              inBody.value.load(ordering: .sequentiallyConsistent), ordering: .relaxed)
            ran.open()
          }
        }
        pthread_join(submitter, nil)
        let seen = (queue.biasVerdict.load(ordering: .acquiring), queue.isSyncBiased)
        inBody.value.store(false, ordering: .sequentiallyConsistent)
        return seen
      }
    }
    #expect(seenInBody.0 == SyncBiasVerdict.handed)
    #expect(!seenInBody.1)
    #expect(ran.wait(seconds: 30))
    let overlap = overlapped.value.load(ordering: .relaxed)
    #expect(!overlap)
    owner.stop()
  }

  /// The owner's own `async` from inside its biased `sync` revokes its own bias (the
  /// membarrier finds its own busy word set) and runs after the `sync`.
  @Test func theOwnersAsyncFromInsideItsSyncRunsAfterIt() {
    let (queue, owner) = biasedQueue("bias.self")
    let order = Shared([Int]())
    let ran = Latch()
    owner.run {
      queue.sync {
        queue.async {
          order.value.append(2)
          ran.open()
        }
        order.value.append(1)
      }
    }
    #expect(ran.wait(seconds: 30))
    #expect(owner.run { queue.sync { order.value } } == [1, 2])
    owner.stop()
  }

  /// Another thread's `sync` pushes a waiter, which revokes the bias; it runs, and so does
  /// the owner's next `sync`.
  @Test func aSyncFromAnotherThreadRevokesTheBias() {
    let (queue, owner) = biasedQueue("bias.othersync")
    let value = Shared(0)
    queue.sync { value.value = 5 }
    #expect(!queue.isSyncBiased)
    #expect(owner.run { queue.sync { value.value } } == 5)
    owner.stop()
  }

  /// A child queue's `sync` (its lock chain cannot take the biased parent) and `async` (its
  /// drain is an item of the parent) both end the bias and run.
  @Test func aChildQueueRevokesItsParentsBias() {
    let (parent, owner) = biasedQueue("bias.parent")
    let child = Queue(label: "bias.child", target: parent)
    #expect(child.sync { 3 } == 3)
    #expect(!parent.isSyncBiased)
    let ran = Latch()
    child.async { ran.open() }
    #expect(ran.wait(seconds: 30))
    owner.stop()
  }

  /// A suspended queue holds the owner's `sync` until it is resumed, as it holds anyone's:
  /// the owner steps aside from its bias and waits in the list like any other caller.
  @Test func aSuspendedBiasedQueueHoldsTheOwnersSync() {
    let (queue, owner) = biasedQueue("bias.suspended")
    let ran = Flag()
    let done = Latch()
    queue.suspend()
    owner.submit {
      queue.sync { ran.value.store(true, ordering: .sequentiallyConsistent) }
      done.open()
    }
    // The owner's waiter reaches the list (it left the bias first); nothing ran.
    let deadline = Deadline.now + .seconds(60)
    while !queue.serialHasPendingItems && Deadline.now < deadline { sched_yield() }
    let ranWhileSuspended = ran.value.load(ordering: .sequentiallyConsistent)
    #expect(!ranWhileSuspended)
    #expect(!queue.isSyncBiased)
    queue.resume()
    #expect(done.wait(seconds: 30))
    let ranAfterResume = ran.value.load(ordering: .sequentiallyConsistent)
    #expect(ranAfterResume)
    owner.stop()
  }

  /// A `sync` onto the queue from inside the owner's biased `sync` is the same client bug as
  /// on a plain lock, with the same message (the owner's busy word sends it to the plain
  /// path, which finds the queue held by this thread).
  @Test func aSyncOntoTheQueueFromInsideABiasedSyncIsReported() async {
    let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
      let queue = Queue(label: "biased-mine")
      for _ in 0...Int(SyncBias.threshold) { queue.sync {} }
      precondition(queue.isSyncBiased, "the queue was not biased")
      queue.sync { queue.sync {} }
    }
    expectMessage(result, "sync onto queue \"biased-mine\" already owned by this thread")
  }

  /// Many queues, each biased to one thread and then used from other threads while the owner
  /// keeps `sync`ing: every body runs alone (an atomic "inside" flag), every item runs
  /// exactly once, and the owner's `sync`s all return.
  @Test func revocationsRacingTheOwnersSyncsLoseAndOverlapNothing() {
    let queues = scaled(200)
    let owner = OwnerThread()
    let otherThreads = 2
    let perOther = 50
    for _ in 0..<queues {
      // One label for all: the stats registry keeps a bounded number of released labels.
      let queue = Queue(label: "bias.race")
      let inside = Flag()
      let overlaps = Counter()
      let bodies = Shared(0)
      @Sendable func body() {
        if inside.value.exchange(true, ordering: .sequentiallyConsistent) {
          overlaps.add(1)
        }
        bodies.value += 1
        inside.value.store(false, ordering: .sequentiallyConsistent)
      }
      owner.run { for _ in 0...Int(SyncBias.threshold) { queue.sync(execute: body) } }
      #expect(queue.isSyncBiased)
      // The other threads start when the owner is already `sync`ing under the bias, and the
      // owner goes on until they are done: their revocation meets the owner inside its
      // `sync`, entering it or leaving it, as often as outside.
      let othersDone = Counter()
      let othersFinished = Latch()
      let ownerDone = Latch()
      let ownerSyncs = Shared(0)  // Only the owner thread touches it until `ownerDone`.
      let started = Latch()
      owner.submit {
        started.open()
        while othersDone.current < otherThreads {
          queue.sync(execute: body)
          ownerSyncs.value += 1
        }
        ownerDone.open()
      }
      #expect(started.wait(seconds: 60))
      for other in 0..<otherThreads {
        _ = startThreadDetached {
          for index in 0..<perOther {
            if (index + other) % 3 == 0 {
              queue.sync(execute: body)
            } else {
              queue.async(execute: body)
            }
          }
          if othersDone.increment() == otherThreads { othersFinished.open() }
        }
      }
      let finished = othersFinished.wait(seconds: 60) && ownerDone.wait(seconds: 60)
      #expect(finished)
      guard finished else { break }
      let read = Latch()
      let total = Shared(0)
      queue.async {
        total.value = bodies.value
        read.open()
      }
      #expect(read.wait(seconds: 60))
      let expected = Int(SyncBias.threshold) + 1 + ownerSyncs.value + otherThreads * perOther
      #expect(total.value == expected)
      #expect(overlaps.current == 0)
      if total.value != expected || overlaps.current != 0 { break }
    }
    owner.stop()
  }
}

/// A queue whose `sync` lock is biased to a fresh thread, and that thread.
private func biasedQueue(_ label: String) -> (Queue, OwnerThread) {
  let owner = OwnerThread()
  let queue = Queue(label: label)
  owner.run { for _ in 0...Int(SyncBias.threshold) { queue.sync {} } }
  #expect(queue.isSyncBiased)
  return (queue, owner)
}

/// A flag several threads read and write.
private final class Flag: Sendable {
  let value = Atomic<Bool>(false)
}

/// Starts a thread that is never joined (it ends on its own).
private func startThreadDetached(_ body: @escaping @Sendable () -> Void) -> pthread_t {
  let thread = startThread(body)
  pthread_detach(thread)
  return thread
}

/// One pthread that runs the closures it is given, one at a time, in order: the bias owner.
private final class OwnerThread: @unchecked Sendable {
  // @unchecked Sendable: `jobs` is only touched under `lock`; the thread handle is written
  // once, before any other thread can see the object, and read by `stop` on the creator.
  private let lock = Locked<[@Sendable () -> Void]>([])
  private let pending = Semaphore(value: 0)
  private var thread = pthread_t()
  private let stopped = Atomic<Bool>(false)

  init() {
    thread = startThread { [self] in
      while true {
        pending.wait()
        let job = lock.withLock { $0.removeFirst() }
        job()
        if stopped.load(ordering: .acquiring) && lock.value.isEmpty { return }
      }
    }
  }

  /// Runs `body` on the thread, without waiting for it.
  func submit(_ body: @escaping @Sendable () -> Void) {
    lock.withLock { $0.append(body) }
    pending.signal()
  }

  /// Runs `body` on the thread and returns its result.
  func run<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
    let result = Locked<T?>(nil)
    let done = Latch()
    submit {
      let value = body()
      result.withLock { $0 = value }
      done.open()
    }
    precondition(done.wait(seconds: 60), "the owner thread did not finish its job")
    return result.value!
  }

  /// Ends the thread after the jobs already given, and joins it.
  func stop() {
    stopped.store(true, ordering: .releasing)
    submit {}
    pthread_join(thread, nil)
  }
}
