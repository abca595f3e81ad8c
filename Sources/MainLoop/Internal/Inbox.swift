import Synchronization

/// One posted closure in the inbox's intrusive list. Allocated by the producer, freed by
/// the consumer after it has moved `job` out.
struct InboxNode {
  var next: UnsafeMutablePointer<InboxNode>?
  var job: @Sendable () -> Void
}

/// A lock-free multi-producer, single-consumer inbox of closures.
///
/// Walk-through:
/// 1. A producer allocates a node and pushes it onto `head` with one CAS (a Treiber stack).
///    Producers never read a node after publishing it, so address reuse (ABA) is harmless.
/// 2. The consumer takes the whole stack with one exchange, reverses it (the stack is LIFO;
///    reversing restores FIFO order for each producer, and for pushes ordered by
///    happens-before across producers), and appends it to its private backlog.
/// 3. The consumer runs a bounded number of backlog items per turn; the caller decides when
///    to come back for the rest.
///
/// Who may touch what: `head` is atomic and touched by everyone; `backlogHead`/`backlogTail`
/// belong to the single consumer (the loop thread).
final class Inbox: @unchecked Sendable {
  // Atomic. Pushes are releasing (publishing the node); the consumer's exchange is acquiring.
  private let head = Atomic<UnsafeMutablePointer<InboxNode>?>(nil)

  // Only touched by the consumer.
  private var backlogHead: UnsafeMutablePointer<InboxNode>?
  // Only touched by the consumer.
  private var backlogTail: UnsafeMutablePointer<InboxNode>?

  init() {}

  deinit {
    // Nothing runs any more: free what is left, releasing captured state without running it.
    collect()
    var node = backlogHead
    while let current = node {
      node = current.pointee.next
      current.deinitialize(count: 1)
      current.deallocate()
    }
  }

  /// Pushes `job`. Safe from any thread. Sequentially consistent, so that a producer's
  /// following load of the loop's wake flag pairs with the consumer's store-then-exchange
  /// (the Dekker pattern documented in `EventLoop+Execute.swift`).
  @inline(__always)
  func push(_ job: @escaping @Sendable () -> Void) {
    // Safe: the node is exclusively ours until the CAS publishes it.
    let node = UnsafeMutablePointer<InboxNode>.allocate(capacity: 1)
    node.initialize(to: InboxNode(next: nil, job: job))
    var expected = head.load(ordering: .relaxed)
    while true {
      node.pointee.next = expected
      let (exchanged, original) = head.compareExchange(
        expected: expected, desired: node, ordering: .sequentiallyConsistent)
      if exchanged { return }
      expected = original
    }
  }

  /// Moves everything pushed so far to the end of the backlog. Consumer only.
  func collect() {
    // Sequentially consistent: pairs with the producers' push CAS (see `push`).
    guard var node = head.exchange(nil, ordering: .sequentiallyConsistent) else { return }
    // Reverse the LIFO chain into FIFO order.
    var reversed: UnsafeMutablePointer<InboxNode>? = nil
    let newTail = node
    while true {
      let next = node.pointee.next
      node.pointee.next = reversed
      reversed = node
      guard let following = next else { break }
      node = following
    }
    if let tail = backlogTail {
      tail.pointee.next = reversed
    } else {
      backlogHead = reversed
    }
    backlogTail = newTail
  }

  /// Whether the consumer's backlog holds items. Consumer only.
  var hasBacklog: Bool { backlogHead != nil }

  /// Runs up to `limit` backlog items in order; returns how many ran. Consumer only.
  func runBacklog(limit: Int) -> Int {
    var ran = 0
    while ran < limit, let node = backlogHead {
      backlogHead = node.pointee.next
      if backlogHead == nil { backlogTail = nil }
      // Move the closure out and free the node before running it.
      let job = node.move().job
      node.deallocate()
      job()
      ran += 1
    }
    return ran
  }
}
