@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// One awaited piece of queue work and its race with task cancellation.
///
/// Walk-through: `outcome` leaves "pending" once, by CAS — to "started" (the work runs and
/// its result resumes the task) or to "cancelled" (the task resumes with
/// `CancellationError` and the work, when its turn comes, does nothing). The continuation is
/// stored under a lock because cancellation may arrive before it is installed; whichever of
/// `install` and the resumer comes second performs the resume.
final class AwaitedWork<T: Sendable>: @unchecked Sendable {
  // @unchecked Sendable: `outcome` is atomic; `slot` is behind its lock.
  private static var pending: UInt8 { 0 }
  private static var started: UInt8 { 1 }
  private static var cancelled: UInt8 { 2 }

  private struct Slot {
    var continuation: CheckedContinuation<T, any Error>?
    var result: Result<T, any Error>?
  }
  private let outcome = Atomic<UInt8>(0)
  private let slot = LockedValue(Slot())

  /// Claims the right to run the work; false if the task was cancelled first.
  func start() -> Bool {
    outcome.compareExchange(
      expected: Self.pending, desired: Self.started, ordering: .acquiringAndReleasing
    ).exchanged
  }

  /// Claims cancellation; true if the work had not started (the caller may then undo it).
  @discardableResult
  func cancel() -> Bool {
    guard
      outcome.compareExchange(
        expected: Self.pending, desired: Self.cancelled, ordering: .acquiringAndReleasing
      ).exchanged
    else { return false }
    resume(.failure(CancellationError()))
    return true
  }

  func install(_ continuation: CheckedContinuation<T, any Error>) {
    let ready = slot.withLock { slot -> Result<T, any Error>? in
      if let result = slot.result { return result }
      slot.continuation = continuation
      return nil
    }
    if let ready { continuation.resume(with: ready) }
  }

  func resume(_ result: Result<T, any Error>) {
    let continuation = slot.withLock { slot -> CheckedContinuation<T, any Error>? in
      if let continuation = slot.continuation {
        slot.continuation = nil
        return continuation
      }
      slot.result = result
      return nil
    }
    continuation?.resume(with: result)
  }

  /// Suspends the current task until `start`ed work or a cancellation resumes it. `submit`
  /// hands the work to whatever will run it.
  func value(submit: () -> Void, onCancel: @escaping @Sendable () -> Void = {}) async throws -> T {
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        install(continuation)
        submit()
      }
    } onCancel: {
      if cancel() { onCancel() }
    }
  }
}

extension Queue {
  /// Runs `work` on this queue and returns its value (or rethrows its error) to the awaiting
  /// task.
  ///
  /// If the task is cancelled before `work` starts, `work` never runs and this throws
  /// `CancellationError`; once started, it runs to completion.
  @discardableResult
  public func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    let awaited = AwaitedWork<T>()
    return try await awaited.value(submit: {
      async {
        guard awaited.start() else { return }
        awaited.resume(Result { try work() })
      }
    })
  }

  /// Suspends the task until no earlier than `deadline`, on this queue's timer loop; the
  /// task resumes on its own executor. Cancelling the task cancels the timer and throws
  /// `CancellationError`.
  ///
  /// A task cancelled before it sleeps, or while its timer is being started, throws too and
  /// leaves no timer behind.
  public func sleep(until deadline: Deadline) async throws {
    try await sleep(until: deadline, on: ServiceLoop.loop(for: self))
  }

  /// `sleep(until:)` with the timer on `loop`, whose clock `deadline` is read against: tests
  /// pass a virtual-time loop (`EventLoop(clock: .virtual())`). `afterTimerStarted` runs
  /// between starting the timer and recording it (tests force a cancel there).
  package func sleep(
    until deadline: Deadline, on loop: EventLoop,
    afterTimerStarted: (@Sendable () -> Void)? = nil
  ) async throws {
    let awaited = AwaitedWork<Void>()
    let timer = SleepTimer()
    try await awaited.value(
      submit: {
        if timer.isCancelled { return }  // Cancelled before the submit: no timer at all.
        let delayed = after(deadline: deadline, on: loop) {
          if awaited.start() { awaited.resume(.success(())) }
        }
        afterTimerStarted?()
        timer.record(delayed)
      },
      onCancel: { timer.cancel() })
  }
}

/// The timer of one `Queue.sleep`, and its race with the task's cancellation.
///
/// The cancellation handler may run before the submit starts the timer (a task cancelled
/// before it sleeps: Swift runs the handler at once) or while it is being started. Whichever
/// of `record` and `cancel` comes second cancels the timer, so it never stays on its loop
/// holding the continuation's box for its whole delay.
private final class SleepTimer: Sendable {
  private enum State {
    case notStarted
    case started(DelayedWork)
    case cancelled
  }
  /// Protected by: its lock.
  private let state = LockedValue(State.notStarted)

  /// Whether `cancel` has run. Any thread.
  var isCancelled: Bool {
    state.withLock { state in
      if case .cancelled = state { return true }
      return false
    }
  }

  /// Records the started timer, or cancels it if the task was cancelled meanwhile.
  func record(_ timer: DelayedWork) {
    let cancelledFirst = state.withLock { state -> Bool in
      if case .cancelled = state { return true }
      state = .started(timer)
      return false
    }
    if cancelledFirst { timer.cancel() }
  }

  /// Cancels the recorded timer, or makes `record` cancel it. Any thread.
  func cancel() {
    let timer = state.withLock { state -> DelayedWork? in
      defer { state = .cancelled }
      if case .started(let timer) = state { return timer }
      return nil
    }
    timer?.cancel()
  }
}

extension Group {
  /// Suspends the task until the group is empty (at once if it is).
  public func wait() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      notify(queue: .global()) { continuation.resume() }
    }
  }
}

extension Semaphore {
  /// Takes one unit without blocking the awaiting task's thread.
  ///
  /// The wait itself parks a pool worker (the pool grows if every worker ends up waiting);
  /// a cancelled task that has not yet started waiting throws `CancellationError`.
  public func acquire() async throws {
    try await Queue.global().run { self.wait() }
  }
}

extension WorkItem {
  /// Suspends the task until the item completes (runs, or is cancelled before starting).
  /// Cancelling the task cancels the item if it has not started.
  public func completion() async {
    await withTaskCancellationHandler {
      await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        notify(queue: .global()) { continuation.resume() }
      }
    } onCancel: {
      cancel()
    }
  }
}

extension Source {
  /// The source's events as an async sequence of their `data` values.
  ///
  /// Creating the sequence installs the event handler (replacing any other) and activates
  /// the source; the sequence keeps the source alive, and ending the iteration (or
  /// cancelling the task) cancels it.
  public var events: AsyncStream<UInt> {
    AsyncStream { continuation in
      let core = self.core
      // The value the handler would read as `data` (fd sources compute it on demand).
      setEventHandler { continuation.yield(core.currentDataValue()) }
      let previousCancel = core.handlers.withLock { $0.cancel }
      setCancelHandler {
        previousCancel?()
        continuation.finish()
      }
      // The stream keeps the source alive until the iteration ends, which cancels it.
      continuation.onTermination = { [self] _ in cancel() }
      activate()
    }
  }
}
