import CLoopShims
import Glibc
import Synchronization

// A serial queue's `sync` lock, biased to the thread that keeps taking it.
//
// An uncontended `sync` onto an idle serial queue costs two locked instructions: the CAS
// that takes SYNC_LOCKED and the subtract that releases it (`trySyncLock`,
// `releaseSyncLock`), as libdispatch's does. On x86 each waits for the store buffer to
// drain; together they are nearly all of the call (perf, `sync_block` on an AMD EPYC VM: 43% of
// the samples after each). A queue that one thread keeps `sync`ing, with nobody else using it (a lock
// around some state, used from one thread most of the time), can do without both, as long as
// the first other user pays for the difference. That is the bias.
//
// The protocol. Words: `state` (the bits BIASED and REVOKING beside SYNC_LOCKED),
// `biasOwner`, `biasBusy` (written by the owner only, with plain stores), `biasVerdict`.
//
// 1. Grant. A thread that took the lock `SyncBias.threshold` times in a row (`biasCandidate`,
//    `biasStreak`, kept by the holder; a drain or a child queue's lock chain in between
//    breaks the streak) keeps SYNC_LOCKED at the release of its next `sync` and
//    adds BIASED (a CAS from exactly SYNC_LOCKED: not suspended, inactive or wide), then
//    checks the list as `releaseSyncLock` does: an item a submitter pushed before it saw
//    BIASED would otherwise wait for a release that no longer comes (step 4 takes it). A
//    queue is biased at most once in its life: after a revocation it stays on the plain lock,
//    so a queue that several threads share pays for one revocation, not one per switch.
//    While BIASED is set, SYNC_LOCKED stays set: to everyone else the queue is held, so every
//    path that finds it held (a submission's `wakeUp`, another thread's `sync`, a child
//    queue's lock chain) behaves as it does for a queue held by a `sync`.
// 2. Owner's `sync`. Store `biasBusy = 1`, load `state`; if BIASED is set and REVOKING,
//    suspension, inactivity and width are not, run the body, then store `biasBusy = 0` and
//    load `state` again: BIASED still set and REVOKING not, and the call is done. No locked
//    instruction: two plain stores and two loads, on one line the owner keeps in its cache.
//    Otherwise the owner resolves (step 5), then takes the plain path.
//    The store and the load that follows it are the two halves of Dekker's pattern, and x86
//    may let the load pass the store (it waits in the store buffer). The owner does not
//    fence: the revoker's `membarrier` stands in for the fence (step 3). Only the compiler
//    is told to keep them in order (`cls_compiler_barrier`).
// 3. Revocation, by any thread whose `wakeUp` finds BIASED (it pushed an item; another
//    thread's `sync`, a child queue's drain and `setWidth` all push one): CAS REVOKING in
//    (if another revoker holds it, return: its release, or the owner's, comes after that
//    revoker's membarrier and so after this push, and sees it). Then
//    `membarrier(PRIVATE_EXPEDITED)`: every thread of the process that was running has
//    executed a full barrier when it returns, and one that was not will before it runs again.
//    So the owner's program is cut at one point: what it stored before the point is now
//    visible here, and what it loads after the point sees REVOKING. Then load `biasBusy`:
//    - 0: the owner is outside (its last `biasBusy = 0` was before the point), or it will
//      see REVOKING at its next check (after the point) and step aside. The revoker now
//      holds SYNC_LOCKED: it writes the verdict "released", subtracts BIASED, REVOKING and
//      SYNC_LOCKED, and checks the list as `releaseSyncLock` does.
//    - 1: the owner is in its body, or between its store and its check. The lock is the
//      owner's: the revoker writes the verdict "handed", subtracts BIASED and REVOKING, and
//      leaves SYNC_LOCKED set. The owner's next check sees the bias gone (step 5).
// 4. The verdict. The revoker writes it before the subtract that clears REVOKING (a
//    sequentially consistent RMW, so releasing); the owner reads it after a load that saw
//    REVOKING cleared (sequentially consistent, so acquiring).
// 5. Owner resolves (`leaveBias`), with `biasBusy` 0: waits while REVOKING is set (a
//    revoker between its CAS and its subtract: a system call, never a body; a short spin,
//    then a sleep on `SyncBias.revocationsEnded`, which each revoker bumps and wakes after
//    its subtract, in case the revoker was preempted). If BIASED is
//    still set, the owner leaves on its own: CAS BIASED out (it now holds a plain
//    SYNC_LOCKED) and releases. Otherwise it reads the verdict and, if handed, releases.
//    Then it clears `biasOwner` and never looks at the verdict again.
//
// `SyncBiasModelTests` explores this protocol over every interleaving under x86's memory
// model, `membarrier` included, and shows that without the `membarrier` (or with the owner
// ignoring REVOKING on its way out) an item runs beside the owner's body or is stranded.
// The memory the bodies touch: the owner's stores before `biasBusy = 0` (releasing) are
// visible to a revoker that reads the 0 (acquiring), and so to the drain it schedules; a
// handed lock is released by `releaseSyncLock`, as any `sync`'s.
//
// Cost to everyone else: `wakeUp`'s held branch tests one more bit of the state it loaded;
// the plain `sync` keeps the streak (the calling thread's id, two loads and a store on the
// line it holds); the first other user of a biased queue pays one `membarrier` (about 0.2 µs
// on an idle 2-CPU machine; an interrupt to each CPU running one of our threads on a busy
// one). The registration for it (`SyncBias.available`) happens once per process, one `sync`
// before the first grant, with no queue held. A source or timer delivering to a biased queue
// revokes on its driver thread like any submitter (its inline delivery cannot take the
// held queue). `LOOPDISPATCH_SYNC_BIAS=0` turns the grant off.

/// What a revocation did with SYNC_LOCKED (`Queue.biasVerdict`, step 4).
enum SyncBiasVerdict {
  static let none: UInt32 = 0
  /// The owner was in its `sync`: SYNC_LOCKED stays set, the owner's to release.
  static let handed: UInt32 = 1
  /// The owner was outside: the revoker released SYNC_LOCKED.
  static let released: UInt32 = 2
}

/// The process-wide side of the bias: whether it may be granted, and the calling thread's id.
enum SyncBias {
  /// `sync`s in a row from one thread (each taking the plain lock) before the queue's lock is
  /// biased to it: enough that a queue used once or twice from a thread never is.
  static let threshold: UInt32 = 32
  /// `Queue.biasStreak` once the bias was granted: never again.
  static let spent = UInt32.max

  /// Whether a bias may be granted: not turned off (`LOOPDISPATCH_SYNC_BIAS=0`), and the
  /// kernel registered the process for the expedited `membarrier` a revocation needs
  /// (Linux 4.14; a seccomp filter may refuse it). Asked once, by the first grant.
  static let available: Bool = {
    if let raw = getenv("LOOPDISPATCH_SYNC_BIAS"), String(cString: raw) == "0" { return false }
    return cls_membarrier_register() == 0
  }()

  /// Evaluates `available` (the registration) if no thread has yet: called with no queue
  /// held, one `sync` before the first grant (`releaseSyncLockKeepingStreak`).
  @inline(never)
  static func prepare() { _ = available }

  /// Bumped, and every sleeper woken, by each revocation when it ends (`revokeBias`); an
  /// owner that finds a revocation under way for longer than a short spin sleeps on it
  /// (`leaveBias`) instead of spinning on a revoker that was preempted. Process-wide:
  /// revocations are rare (at most one per queue), so sharing costs nothing.
  static let revocationsEnded = FutexWord()

  /// Called by a revoker after the subtract that ends its revocation: wakes owners asleep in
  /// `leaveBias` (any queue's; each re-checks its own). One system call per revocation.
  static func wakeOwners() {
    revocationsEnded.atomic.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
    revocationsEnded.wake(Int32.max)
  }

  /// `membarrier(PRIVATE_EXPEDITED)` (step 3), retried while the kernel is short of memory
  /// for its CPU mask (ENOMEM, the one failure a registered process can see). Safe to
  /// retry: the caller holds REVOKING, and the owner waits for it.
  static func barrierAcrossThreads() {
    while cls_membarrier() != 0 {
      let error = cls_errno()
      guard error == ENOMEM || error == EINTR else {
        internalBug("membarrier failed (errno \(error)) while revoking a sync bias")
      }
      sched_yield()
    }
  }

  /// The calling thread's id, as the bias records it: `pthread_self`, unique among live
  /// threads (a dead owner's id reused by a new thread is harmless: the dead one is in no
  /// `sync`, and its bias passes to the new one; what the dead one's last body wrote is
  /// ordered before the new thread by glibc's reuse of the thread's stack and descriptor,
  /// which goes through a lock).
  @inline(__always)
  static var currentThread: UInt { UInt(bitPattern: Int(bitPattern: pthread_self())) }
}

extension Queue {
  /// The owner's `sync` (step 2): runs `body` under the bias and returns true, or returns
  /// false having run nothing (the caller then takes the plain path). For a serial queue
  /// whose target is a global queue.
  @inline(__always)
  func tryBiasedSync(_ body: () -> Void) -> Bool {
    let owner = biasOwner.load(ordering: .relaxed)
    guard owner != 0, owner == SyncBias.currentThread else { return false }
    return runBiased(body)
  }

  /// Step 2, for the owner.
  @inline(__always)
  private func runBiased(_ body: () -> Void) -> Bool {
    // Already 1: a `sync` onto this queue from inside the owner's own biased `sync`. The
    // plain path finds the queue held and reports the deadlock (`checkSyncDeadlock`).
    guard biasBusy.load(ordering: .relaxed) == 0 else { return false }
    // Relaxed: only this thread writes the word. The store may wait in the store buffer past
    // the load below; a revoker's `membarrier` drains it before the revoker reads it.
    biasBusy.store(1, ordering: .relaxed)
    cls_compiler_barrier()
    // Relaxed: the bias was granted by this thread (its own stores), and what other threads
    // did under the lock before the grant was acquired by the CAS that took it then.
    let entry = state.load(ordering: .relaxed)
    guard entry & SerialState.biasCheckMask == SerialState.biased else {
      // Releasing, as at the exit: a revoker that reads this 0 must see what the last body
      // did (off the fast path, so the order costs nothing).
      biasBusy.store(0, ordering: .releasing)
      leaveBias()
      return false
    }
    withHolderCounters { counters in
      countSubmissionHolding(counters)
      ThreadFrame.with(self, exclusive: true, body)
      countCompletionExclusive(counters)
    }
    // Releasing: a revoker that reads this 0 (acquiring) sees everything the body did.
    biasBusy.store(0, ordering: .releasing)
    cls_compiler_barrier()
    let exit = state.load(ordering: .relaxed)
    if exit & (SerialState.biased | SerialState.revoking) != SerialState.biased {
      leaveBias()
    }
    return true
  }

  /// Step 5: the owner, outside any biased `sync` (`biasBusy` is 0), ends its bias: on its
  /// own if nobody revoked it, else by the verdict.
  @inline(never)
  func leaveBias() {
    var current = state.load(ordering: .sequentiallyConsistent)
    var spins = 0
    while true {
      if current & SerialState.revoking != 0 {
        // A revoker between its CAS and its subtract: a system call away, unless it was
        // preempted. Spin a little, then sleep until a revocation ends (the count read
        // before the state, so that an end between the two is not slept through).
        spins += 1
        if spins < 64 {
          cls_cpu_relax()
        } else {
          #if DEBUG
            if spins == 64 { SyncBiasHooks.ownerWillSleep(on: self) }
          #endif
          let ended = SyncBias.revocationsEnded.atomic.pointee.load(
            ordering: .sequentiallyConsistent)
          if state.load(ordering: .sequentiallyConsistent) & SerialState.revoking != 0 {
            SyncBias.revocationsEnded.wait(whileEqualTo: ended)
          }
        }
        current = state.load(ordering: .sequentiallyConsistent)
        continue
      }
      guard current & SerialState.biased != 0 else { break }
      let (exchanged, original) = state.compareExchange(
        expected: current, desired: current & ~SerialState.biased,
        ordering: .sequentiallyConsistent)
      if exchanged {
        // SYNC_LOCKED, set since the grant, is now this thread's plain lock.
        biasOwner.store(0, ordering: .relaxed)
        releaseSyncLock()
        return
      }
      current = original
    }
    // Revoked. The load that saw REVOKING cleared was sequentially consistent (acquiring):
    // the verdict written before that clearing is visible.
    let verdict = biasVerdict.load(ordering: .relaxed)
    biasOwner.store(0, ordering: .relaxed)
    if verdict == SyncBiasVerdict.handed { releaseSyncLock() }
  }

  /// Releases SYNC_LOCKED after a plain `sync` (`runSyncLocked`), keeping the streak of
  /// step 1, and granting the bias to the calling thread when the streak reaches the
  /// threshold. The caller holds SYNC_LOCKED, which protects the streak words.
  @inline(__always)
  func releaseSyncLockKeepingStreak() {
    let streak = biasStreak.load(ordering: .relaxed)
    if streak != SyncBias.spent {
      let me = SyncBias.currentThread
      if biasCandidate.load(ordering: .relaxed) != me {
        biasCandidate.store(me, ordering: .relaxed)
        biasStreak.store(1, ordering: .relaxed)
      } else if streak < SyncBias.threshold {
        biasStreak.store(streak &+ 1, ordering: .relaxed)
        if streak &+ 1 == SyncBias.threshold {
          // The next `sync` of the streak grants the bias. The process registers for the
          // expedited `membarrier` now, once, with the lock released: registering can take
          // the kernel milliseconds where other threads run (it waits for an RCU grace
          // period), and no `sync` should hold a queue that long.
          releaseSyncLock()
          SyncBias.prepare()
          return
        }
      } else {
        releaseSyncLockGrantingBias(to: me)
        return
      }
    }
    releaseSyncLock()
  }

  /// Ends the streak of step 1: the queue was held by something other than a plain `sync`
  /// (a drain, a lock chain from a child queue). The caller holds the queue. A load first,
  /// so that a queue nobody `sync`s costs its drains no store.
  @inline(__always)
  func breakSyncStreak() {
    if biasCandidate.load(ordering: .relaxed) != 0 {
      biasCandidate.store(0, ordering: .relaxed)
    }
  }

  /// Step 1: keeps SYNC_LOCKED and adds BIASED, if the queue is plain (exactly SYNC_LOCKED:
  /// not suspended, inactive or wide) and the process may revoke (`SyncBias.available`);
  /// else releases as usual. Either way the streak is spent.
  @inline(never)
  private func releaseSyncLockGrantingBias(to me: UInt) {
    biasStreak.store(SyncBias.spent, ordering: .relaxed)
    guard kind == .serial, SyncBias.available else {
      releaseSyncLock()
      return
    }
    biasOwner.store(me, ordering: .relaxed)
    let (granted, _) = state.compareExchange(
      expected: SerialState.syncLocked, desired: SerialState.syncLocked | SerialState.biased,
      ordering: .sequentiallyConsistent)
    guard granted else {
      biasOwner.store(0, ordering: .relaxed)
      releaseSyncLock()
      return
    }
    // As in `releaseSyncLock`: a submitter that loaded the state before the CAS (and saw a
    // plain lock, so left its item to the holder) pushed before this load. Such an item
    // ends the bias at once.
    if serialHasPendingItems { leaveBias() }
  }

  /// Step 3: a `wakeUp` that found the queue held under a bias (the caller pushed an item).
  /// Ends the bias and sees that the item runs.
  @inline(never)
  func revokeBias(yielding: Bool, submittedAt: UInt64) {
    var current = state.load(ordering: .sequentiallyConsistent)
    while true {
      guard current & SerialState.biased != 0 else {
        // The bias ended meanwhile (a revoker released, or the owner left): the queue may be
        // free now, after that release's own check of the list. Look again.
        wakeUp(yielding: yielding, submittedAt: submittedAt)
        return
      }
      // Another revoker is under way; its release (or the owner's) comes after this push.
      if current & SerialState.revoking != 0 { return }
      let (exchanged, original) = state.compareExchange(
        expected: current, desired: current | SerialState.revoking,
        ordering: .sequentiallyConsistent)
      if exchanged { break }
      current = original
    }
    #if DEBUG
      SyncBiasHooks.afterRevokingSet(of: self)
    #endif
    // Without the barrier the owner's state cannot be known, and a guess could run two
    // bodies at once: it is retried until it succeeds.
    SyncBias.barrierAcrossThreads()
    // Acquiring: pairs with the owner's releasing `biasBusy = 0` (what its body wrote).
    if biasBusy.load(ordering: .acquiring) == 0 {
      biasVerdict.store(SyncBiasVerdict.released, ordering: .relaxed)
      // Sequentially consistent: the release of SYNC_LOCKED in Dekker's pattern with
      // submitters (`releaseSyncLock`), and the clearing of REVOKING that publishes the
      // verdict to the owner (step 4).
      state.wrappingSubtract(
        SerialState.biased | SerialState.revoking | SerialState.syncLocked,
        ordering: .sequentiallyConsistent)
      SyncBias.wakeOwners()
      // `releaseSyncLock`'s check: this thread's own item, or one pushed since.
      if serialHasPendingItems { wakeUp(yielding: yielding, submittedAt: submittedAt) }
    } else {
      biasVerdict.store(SyncBiasVerdict.handed, ordering: .relaxed)
      // Sequentially consistent: publishes the verdict to the owner (step 4); SYNC_LOCKED
      // stays, the owner's.
      state.wrappingSubtract(
        SerialState.biased | SerialState.revoking, ordering: .sequentiallyConsistent)
      SyncBias.wakeOwners()
    }
  }

  /// Whether this queue's `sync` lock is biased to a thread now (tests). Relaxed: a
  /// snapshot, ordered by whatever the caller used to wait for the grant or revocation.
  package var isSyncBiased: Bool {
    state.load(ordering: .relaxed) & SerialState.biased != 0
  }
}
