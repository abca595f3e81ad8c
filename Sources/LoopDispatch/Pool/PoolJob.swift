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

  @inline(__always)
  func run() {
    switch self {
    case .closure(let body):
      ThreadName.showOwnName()
      body()
    case .childItem(let body): body()
    case .runnable(let target): target.runFromPool()
    }
  }
}
