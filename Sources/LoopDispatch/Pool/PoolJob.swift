/// Something a queue hands to the pool for a worker to run.
protocol PoolRunnable: AnyObject, Sendable {
  /// Runs on a worker thread.
  func runFromPool()
}

/// One unit of pool work: a plain closure (the global queues' items) or a queue to drain.
enum PoolJob: Sendable {
  case closure(@Sendable () -> Void)
  case runnable(any PoolRunnable)

  @inline(__always)
  func run() {
    switch self {
    case .closure(let body): body()
    case .runnable(let target): target.runFromPool()
    }
  }
}
