// Every use of the toolchain's experimental custom-executor interface lives in this file.
//
// Swift 6.3 lets a program replace the main executor (what `@MainActor` code runs on) and
// the default global executor through `_createExecutors(factory:)`, behind the SPIs
// `ExperimentalCustomExecutors` and `ExperimentalScheduling`. If a later toolchain changes
// that interface, only this file needs to follow; if it disappears, drop the file: serial
// queues as actor executors, `PoolExecutor` task preferences and the async bridges do not
// depend on it, and `@MainActor` code then runs on Swift's own main executor (which only
// runs while something like `dispatchMain` drives it), so apps should call
// `Queue.runMain()` and hop with `Queue.main.async` instead.
import MainLoop
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

/// Routes Swift concurrency onto LoopDispatch: `@MainActor` code runs on the main queue
/// (drained by `EventLoop.main` on the main thread) and unstructured tasks run on the worker
/// pool, where `Task.sleep` is served by the service loop's timers.
public enum ConcurrencyIntegration {
  /// Installs LoopDispatch as Swift's main and default executors. Call it first thing in
  /// `main`, before any task or actor is used. Calling it more than once has no further
  /// effect. Entry shapes:
  /// - a synchronous `main` (or top-level code without `await`): then drive the program with
  ///   `Queue.runMain()`;
  /// - an `async` `@main`, or top-level code with `await`: nothing more; the runtime runs the
  ///   main executor, which is now `EventLoop.main`. The main task's first continuation was
  ///   already bound to the main executor that existed before the call (Dispatch's main
  ///   queue); the main loop drains that queue too (`DispatchMainQueueBridge`), so it resumes
  ///   on the main thread;
  /// - a program that cannot call anything first: depend on the `LoopDispatchAutoInstall`
  ///   product instead, whose C constructor calls this at load time, before `main`.
  public static func install() {
    _ = installOnce
  }

  private static let installOnce: Void = {
    _createExecutors(factory: LoopDispatchExecutorFactory.self)
  }()
}

/// The factory the Swift runtime asks for its two executors.
enum LoopDispatchExecutorFactory: ExecutorFactory {
  static var mainExecutor: any MainExecutor { MainQueueExecutor.shared }
  static var defaultExecutor: any TaskExecutor { DefaultPoolExecutor.shared }
}

/// The main queue as Swift's main executor.
final class MainQueueExecutor: MainExecutor, @unchecked Sendable {
  // @unchecked Sendable: stateless; everything goes through `Queue.main`.
  static let shared = MainQueueExecutor()

  func enqueue(_ job: consuming ExecutorJob) {
    Queue.main.serialEnqueue(.actorJob(UnownedJob(job), onMain: true))
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  func run() throws {
    DispatchMainQueueBridge.attach()
    EventLoop.main.run()
  }

  func runUntil(_ condition: () -> Bool) throws {
    DispatchMainQueueBridge.attach()
    EventLoop.main.run(until: condition)
  }

  func stop() { EventLoop.main.stop() }

  func checkIsolated() {
    if !EventLoop.main.isInLoopThread {
      clientBug("main-actor code is running off the main thread")
    }
  }

  func isIsolatingCurrentContext() -> Bool? { EventLoop.main.isInLoopThread }
}

/// The pool as Swift's default (global) executor, with scheduling for `Task.sleep`.
final class DefaultPoolExecutor: TaskExecutor, SchedulingExecutor, @unchecked Sendable {
  // @unchecked Sendable: stateless; jobs go to the pool and the service loop.
  static let shared = DefaultPoolExecutor()

  func enqueue(_ job: consuming ExecutorJob) {
    PoolExecutor.shared.enqueue(job)
  }

  /// Runs `job` on the pool no earlier than `delay` from now, timed by the service loop and
  /// handed to the pool early enough that a worker's wake-up is not part of the delay
  /// (`EarlyHandOff`).
  func enqueue<C: Clock>(
    _ job: consuming ExecutorJob, after delay: C.Duration, tolerance: C.Duration?, clock: C
  ) {
    let deadline = Deadline.now + Self.duration(delay, of: clock)
    let job = UnownedJob(job)
    let executor = asUnownedTaskExecutor()
    EarlyHandOff.sleeps.run(at: deadline.uptimeNanoseconds, priority: Priority(job.priority)) {
      job.runSynchronously(on: executor)
    }
  }

  func enqueue<C: Clock>(
    _ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C
  ) {
    enqueue(job, after: clock.now.duration(to: instant), tolerance: tolerance, clock: clock)
  }

  /// `delay` as a `Duration` (the standard library's clocks measure in `Duration`).
  private static func duration<C: Clock>(_ delay: C.Duration, of clock: C) -> Duration {
    if let duration = delay as? Duration { return duration }
    let start = clock.now
    return start.duration(to: start.advanced(by: delay)) as? Duration ?? .zero
  }
}

extension Queue {
  /// The installed main executor, as `QueueWork.actorJob(_, onMain: true)` runs its jobs.
  static var mainActorExecutor: UnownedSerialExecutor {
    MainQueueExecutor.shared.asUnownedSerialExecutor()
  }
}
