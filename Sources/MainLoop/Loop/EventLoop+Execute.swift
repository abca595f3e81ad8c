import CLoopShims

/// Posting work to the loop from any thread, and the loop's side: when it must be woken.
///
/// `wakePending` means "the loop will look at the inbox before it next sleeps": while it is
/// true, a post needs no system call. The loop keeps it true while it is awake and clears it
/// only as the last step before sleeping in `epoll_wait`.
///
/// Wake-up protocol (no eventfd write while the loop is awake, one per sleep otherwise):
/// 1. A producer claims an inbox slot (sequentially consistent compare-exchange on the inbox's
///    tail word), writes its closure and marks the slot ready, then loads `wakePending`
///    (sequentially consistent). Only if it reads false and then wins the false→true
///    exchange does it write the eventfd. A post from the loop's own thread never writes it
///    (that thread checks the inbox before it next sleeps); the loop also sets the flag as
///    each of its handlers starts, so other threads posting during a turn skip the write.
/// 2. After every poll the loop stores `wakePending = true` (it is awake) and runs a batch of
///    posts if the poll did not (`finishTurn`). Before the next poll (`prepareToSleep`): if
///    posts wait, the poll does not block; if the loop was just busy with posted work it
///    spins briefly watching the inbox (`spinForPosts`); then it stores
///    `wakePending = false` (sequentially consistent) and loads the inbox's tail
///    (sequentially consistent). Posts found there make the poll non-blocking; otherwise it
///    sleeps.
/// 3. Either a producer's flag load comes before the loop's clearing store in the single total
///    order, in which case its claim also comes before the loop's tail load and is found; or
///    it reads false and writes the eventfd, which ends the sleep. No post is stranded
///    (Dekker's pattern). A collected slot whose producer has claimed but not yet marked it
///    ready stops the batch and counts as waiting, so the loop comes back for it.
/// 4. Each batch runs at most `batchLimit` posts; leftovers make the next poll non-blocking,
///    so descriptors and timers are polled between batches.
extension EventLoop {
  /// Runs `job` on the loop thread during a later turn.
  ///
  /// Jobs posted by one thread run in the order posted; jobs ordered by happens-before across
  /// threads run in that order. A job posted from the loop thread runs later, never inline.
  /// Thread-safety: callable from any thread; lock-free; a system call (the wake-up) only
  /// when the loop is asleep or about to sleep, once per sleep.
  @inlinable
  public func execute(_ job: @escaping @Sendable () -> Void) {
    _execute(job)
  }

  @usableFromInline
  func _execute(_ job: @escaping @Sendable () -> Void) {
    inbox.push(job)
    wakeUnlessAwake()
  }

  /// Step 1's second half, after a push (to the inbox or the pending timers): writes the
  /// eventfd if the loop may be asleep. Load first so an awake loop costs no
  /// read-modify-write; the loop's own thread never needs a wake (it checks before it sleeps).
  @usableFromInline
  func wakeUnlessAwake() {
    if !wakePending.load(ordering: .sequentiallyConsistent) && !isInLoopThread
      && !wakePending.exchange(true, ordering: .sequentiallyConsistent)
    {
      wakeWrites.wrappingAdd(1, ordering: .relaxed)
      Syscall.signalEventfd(wakeFD)
    }
  }

  /// Whether posts or timers scheduled from other threads wait. Loop thread only.
  var hasWork: Bool { inbox.hasPosts || pendingInsertions.load(ordering: .relaxed) != 0 }

  /// Runs when the wake eventfd is readable. Loop thread only.
  func handleWake() {
    Syscall.drainCounter(wakeFD)
    insertPendingTimers()
    runPosted()
  }

  /// Runs a bounded batch of the posts made so far. Loop thread only.
  func runPosted() {
    batchRanThisTurn = true
    inbox.collect()
    if inbox.runBacklog(limit: batchLimit) > 0 { ranPostsSinceSleepCheck = true }
  }

  /// Marks the loop awake after a poll (step 2). Loop thread only.
  @inline(__always)
  func noteAwake() {
    // Relaxed: a producer that sees it skips its wake-up, which is safe because the loop
    // always clears the flag and re-checks the inbox (sequentially consistent) before sleeping.
    wakePending.store(true, ordering: .relaxed)
  }

  /// Step 2, before a poll: whether it may block. It may not when posts wait (they run after
  /// the poll, see `finishTurn`), including posts that arrive during a short spin when the
  /// loop was just busy with posted work. Otherwise the flag is cleared. Loop thread only.
  func prepareToSleep() -> Bool {
    let wasBusy = ranPostsSinceSleepCheck
    ranPostsSinceSleepCheck = false
    if hasWork { return false }
    if wasBusy && idleSpinLimitNanoseconds > 0 && spinForPosts() { return false }
    wakePending.store(false, ordering: .sequentiallyConsistent)
    if inbox.hasPostsSequentiallyConsistent
      || pendingInsertions.load(ordering: .sequentiallyConsistent) != 0
    {
      noteAwake()
      return false
    }
    return true
  }

  /// After a poll: marks the loop awake and, if the poll ran no batch of posts (no eventfd
  /// wake-up was written for them), runs one. A turn is thus: ready descriptors and signals,
  /// due timers, then at most one batch of posts. Loop thread only.
  func finishTurn() {
    noteAwake()
    insertPendingTimers()
    if !batchRanThisTurn && inbox.hasPosts { runPosted() }
    batchRanThisTurn = false
  }

  /// Watches the inbox for up to `spinBudgetNanoseconds`: a reply that comes back within tens
  /// of microseconds of the loop's last post then finds it awake, with no eventfd write and
  /// no `epoll_wait` sleep. Only after a turn that ran posted work (so an idle loop never
  /// spins). A spin that finds a post restores the full budget; one that finds none shrinks
  /// the next by a quarter, but never below `idleSpinFloorNanoseconds`: the budget must stay
  /// longer than a sleeping thread takes to wake (10–40 µs here), or a round trip whose two
  /// sides both fell asleep once would stay asleep (each side's spin expiring before the
  /// other's reply) — an adaptive spin that decays to nothing has that second, slow, steady
  /// state. Returns whether a post arrived. Loop thread only; the flag stays true meanwhile.
  private func spinForPosts() -> Bool {
    let start = Deadline.now.uptimeNanoseconds
    let end = start &+ spinBudgetNanoseconds
    while true {
      for _ in 0..<32 {
        if hasWork {
          spinBudgetNanoseconds = idleSpinLimitNanoseconds
          return true
        }
        cls_cpu_relax()
      }
      if Deadline.now.uptimeNanoseconds >= end { break }
    }
    spinBudgetNanoseconds = Swift.max(
      idleSpinFloorNanoseconds, spinBudgetNanoseconds - spinBudgetNanoseconds / 4)
    return false
  }
}
