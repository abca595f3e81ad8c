import Glibc
@_spi(ExperimentalCustomExecutors) import _Concurrency

/// The Swift runtime's own cost per task: the spawn and task-group rows on the cheapest
/// executor there can be, so that no executor, ours or Dispatch's, can cost less.
///
/// ``InlineExecutor`` is Swift's main and default executor at once and runs every job on the
/// main thread, in FIFO order, from a plain array: no other thread, no wake-up, no atomic
/// beyond an uncontended mutex per enqueue and per batch. What a row costs here is what the
/// runtime itself spends on a task (allocating and initialising it, its job, its completion,
/// the awaiting task's resumption, freeing it), which every executor pays on top of its own
/// hand-offs. Against the default executors, this figure bounds how low any executor's ratio
/// can go: a floor at 0.8x Dispatch leaves no executor a way to 0.5x.
enum RuntimeFloor {
  /// Installs ``InlineExecutor``, runs `body` in a detached task and drains the jobs on the
  /// main thread until `body` ends the process.
  static func run(_ body: @escaping @Sendable () async -> Never) -> Never {
    _createExecutors(factory: InlineExecutorFactory.self)
    Task.detached { await body() }
    InlineExecutor.shared.drainForever()
  }
}

/// The factory the Swift runtime asks for its two executors: the same inline executor.
enum InlineExecutorFactory: ExecutorFactory {
  static var mainExecutor: any MainExecutor { InlineExecutor.shared }
  static var defaultExecutor: any TaskExecutor { InlineExecutor.shared }
}

/// Every job on the main thread, in the order enqueued (see ``RuntimeFloor``).
final class InlineExecutor: MainExecutor, TaskExecutor, @unchecked Sendable {
  // @unchecked Sendable: `pending` is touched only with `mutex` held; jobs run on the thread
  // in `drainForever`, one at a time.
  static let shared = InlineExecutor()

  private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
  private let wake = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
  private var pending: [UnownedJob] = []

  private init() {
    // Unsafe pointers: allocated once for the process's one instance, never freed.
    pthread_mutex_init(mutex, nil)
    pthread_cond_init(wake, nil)
    pending.reserveCapacity(1 << 16)
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    pthread_mutex_lock(mutex)
    pending.append(job)
    // Only when the drainer may be waiting (it waits only on an empty array).
    if pending.count == 1 { pthread_cond_signal(wake) }
    pthread_mutex_unlock(mutex)
  }

  /// Runs jobs as they come, a batch (everything pending) at a time, for ever.
  func drainForever() -> Never {
    var batch: [UnownedJob] = []
    batch.reserveCapacity(1 << 16)
    let serial = asUnownedSerialExecutor()
    let task = asUnownedTaskExecutor()
    while true {
      pthread_mutex_lock(mutex)
      while pending.isEmpty { pthread_cond_wait(wake, mutex) }
      swap(&batch, &pending)
      pthread_mutex_unlock(mutex)
      for job in batch { job.runSynchronously(isolatedTo: serial, taskExecutor: task) }
      batch.removeAll(keepingCapacity: true)
    }
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  func run() throws { drainForever() }

  func stop() {}
}
