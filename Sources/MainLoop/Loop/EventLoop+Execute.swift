/// Posting work to the loop from any thread.
///
/// Wake-up protocol (one eventfd write for many posts):
/// 1. A producer claims an inbox slot (sequentially consistent compare-exchange on the inbox's
///    tail word), writes its closure and marks the slot ready, then loads `wakePending`
///    (sequentially consistent). Only if it reads false and then wins the false→true
///    exchange does it write the eventfd.
/// 2. The loop, woken by the eventfd, drains the eventfd counter, stores `wakePending = false`
///    (sequentially consistent), then snapshots the inbox's tail (`collect`, a sequentially
///    consistent load) and runs a bounded batch of the slots before it.
/// 3. Either a producer's load comes before the loop's store in the single total order, in
///    which case its claim also comes before the loop's snapshot and is collected; or it reads
///    false and makes sure a new wake-up is written. No post is stranded (Dekker's pattern).
///    A collected slot whose producer has claimed but not yet marked it ready stops the
///    batch and counts as backlog, so step 4 brings the loop back for it.
/// 4. After a bounded batch, leftovers re-signal the eventfd so the next turn polls
///    descriptors and timers before running more posted work.
extension EventLoop {
  /// Runs `job` on the loop thread during a later turn.
  ///
  /// Jobs posted by one thread run in the order posted; jobs ordered by happens-before across
  /// threads run in that order. A job posted from the loop thread runs on a later turn, never
  /// inline. Thread-safety: callable from any thread; lock-free; at most one system call (the
  /// wake-up) per batch of posts.
  @inlinable
  public func execute(_ job: @escaping @Sendable () -> Void) {
    _execute(job)
  }

  @usableFromInline
  func _execute(_ job: @escaping @Sendable () -> Void) {
    inbox.push(job)
    // See the protocol above: load first so a pending wake costs no read-modify-write.
    if !wakePending.load(ordering: .sequentiallyConsistent)
      && !wakePending.exchange(true, ordering: .sequentiallyConsistent)
    {
      wakeWrites.wrappingAdd(1, ordering: .relaxed)
      Syscall.signalEventfd(wakeFD)
    }
  }

  /// Runs when the wake eventfd is readable. Loop thread only.
  func handleWake() {
    Syscall.drainCounter(wakeFD)
    wakePending.store(false, ordering: .sequentiallyConsistent)
    inbox.collect()
    _ = inbox.runBacklog(limit: batchLimit)
    if inbox.hasBacklog && !wakePending.exchange(true, ordering: .sequentiallyConsistent) {
      // More than one batch was waiting: come back after the next poll.
      Syscall.signalEventfd(wakeFD)
    }
  }
}
