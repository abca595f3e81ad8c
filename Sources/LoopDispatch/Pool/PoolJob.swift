/// Something a queue hands to the pool for a worker to run.
protocol PoolRunnable: AnyObject, Sendable {
  /// Runs on a worker thread.
  func runFromPool()
}

/// One unit of pool work: a global queue's own item, a custom concurrent queue's item on its
/// way through the global queue, or a serial queue to drain.
enum PoolJob: Sendable {
  /// An item submitted to a global queue itself: the worker shows its own thread name.
  case closure(@Sendable () -> Void)
  /// An item of a custom queue targeting a global queue: it names the thread itself.
  case childItem(@Sendable () -> Void)
  case runnable(any PoolRunnable)
  /// An item submitted to a global queue with `async(group:)`: leaves the group when done.
  /// (Carried in the job itself, not in a wrapping closure: one allocation less per item.)
  case grouped(@Sendable () -> Void, Group)

  @inline(__always)
  func run() {
    switch self {
    case .closure(let body):
      ThreadName.showOwnName()
      body()
    case .childItem(let body): body()
    case .runnable(let target): target.runFromPool()
    case .grouped(let body, let group):
      ThreadName.showOwnName()
      body()
      group.leave()
    }
  }
}
