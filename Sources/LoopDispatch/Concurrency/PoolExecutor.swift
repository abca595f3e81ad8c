import MainLoop

/// The worker pool as a Swift `TaskExecutor`: tasks that prefer it run on LoopDispatch's
/// workers, in the lane that matches their priority.
///
/// ```swift
/// Task(executorPreference: PoolExecutor.shared) { await work() }
/// await withTaskExecutorPreference(PoolExecutor.shared) { ... }
/// ```
public final class PoolExecutor: TaskExecutor, Sendable {
  /// The executor for the process-wide pool.
  public static let shared = PoolExecutor()

  private init() {}

  /// Submits a task's job to the pool lane of the job's priority (see ``Priority/init(_:)``).
  /// A job enqueued by a pool thread (a task it resumed) runs on that thread as soon as its
  /// current job returns, without waking another. Called by the Swift runtime;
  /// thread-safety: any thread.
  public func enqueue(_ job: consuming ExecutorJob) {
    let priority = Priority(job.priority)
    WorkerPool.shared.submit(
      .task(UnownedJob(job), asUnownedTaskExecutor()), priority: priority, runNext: true)
  }

  /// Runs an already unowned job on the pool as `executor`.
  func enqueue(_ job: UnownedJob, on executor: UnownedTaskExecutor) {
    WorkerPool.shared.submit(.task(job, executor), priority: Priority(job.priority), runNext: true)
  }
}

extension Priority {
  /// The lane for a Swift task priority: `.high`/`.userInitiated` → high, `.medium` →
  /// default, `.low`/`.utility` → low, `.background` → background.
  public init(_ priority: TaskPriority) {
    self.init(rawPriority: priority.rawValue)
  }

  init(_ priority: JobPriority) {
    self.init(rawPriority: priority.rawValue)
  }

  private init(rawPriority: UInt8) {
    switch rawPriority {
    case 25...: self = .high
    case 21..<25: self = .default
    case 17..<21: self = .low
    case 1..<17: self = .background
    default: self = .default  // Unspecified.
    }
  }
}
