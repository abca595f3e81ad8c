import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// What submitting a capturing closure costs the submitting thread, counted rather than
/// timed.
///
/// `Queue.async` and `async(group:)` take their closure `consuming`: the context the caller
/// allocated for a capturing closure moves into the pool's node. With a borrowed parameter
/// the submission retained the context to store it and the caller released its own
/// reference after the call: two atomic operations on the submitting thread per item (perf,
/// 1M capturing closures from the main thread: 16 ns of its ~165 ns per item).
///
/// The count is the context's strong reference count seen from inside the submission, with
/// the job in its node but not yet linked into the injection queue (the pool's `.link` probe,
/// a debug build's hook, on a thread that is not a worker): no worker can have taken it, so
/// the count is the one before the call when the caller's reference moved into the node,
/// and one more when the node holds a copy beside the caller's.
@Suite struct SubmissionCostTests {
  #if DEBUG
    @Test func asyncOnAGlobalQueueMovesTheClosureInsteadOfRetainingIt() async {
      await #expect(processExitsWith: .success) {
        let (before, during) = contextCountsAroundSubmission { work in
          Queue.global().async(execute: consume work)
        }
        if during != before {
          costFailure("async: the context's count went from \(before) to \(during)")
        }
        exit(0)
      }
    }

    @Test func asyncWithAGroupMovesTheClosureInsteadOfRetainingIt() async {
      await #expect(processExitsWith: .success) {
        let group = Group()
        let (before, during) = contextCountsAroundSubmission { work in
          Queue.global().async(group: group, execute: consume work)
        }
        if during != before {
          costFailure("async(group:): the context's count went from \(before) to \(during)")
        }
        if group.wait(timeout: .seconds(60)) == .timedOut { costFailure("the group never left") }
        exit(0)
      }
    }
  #endif
}

#if DEBUG
  /// Makes a closure that captures an object (so it has a context), hands it to `submit`
  /// (which passes it on with `consume`), and returns the context's strong count just before
  /// the call and as the submitting thread saw it at the pool's `.link` step (-1 if it was
  /// not reached; the caller is not a worker, so its job goes through the injection queue,
  /// where that step is). The two are equal when the caller's reference moved into the node.
  private func contextCountsAroundSubmission(
    _ submit: (consuming @escaping @Sendable () -> Void) -> Void
  ) -> (before: Int, during: Int) {
    withPoolProbeHookTurn { contextCountsAroundSubmissionWithTheHook(submit) }
  }

  /// `contextCountsAroundSubmission`, holding the turn to set `PoolProbe`'s hook.
  private func contextCountsAroundSubmissionWithTheHook(
    _ submit: (consuming @escaping @Sendable () -> Void) -> Void
  ) -> (before: Int, during: Int) {
    let mayFinish = Latch()
    let work: @Sendable () -> Void = { _ = mayFinish.wait(seconds: 60) }
    guard let context = ClosureHolder(work: work).context else {
      costFailure("the closure has no context")
    }
    let contextBits = UInt(bitPattern: context)
    let submitter = pthread_self()
    let seen = Locked(-1)
    PoolProbe.setHook(for: [.link]) { _ in
      guard pthread_self() == submitter else { return }
      seen.withLock { count in
        if count == -1 {
          count = swiftRetainCount(UnsafeMutableRawPointer(bitPattern: contextBits)!)
        }
      }
    }
    let before = swiftRetainCount(UnsafeMutableRawPointer(bitPattern: contextBits)!)
    submit(consume work)
    PoolProbe.setHook(nil)
    mayFinish.open()
    return (before, seen.value)
  }

  /// A closure in a concrete (not generic) stored property, where it has its native layout:
  /// a function pointer, then its context. (`unsafeBitCast` of the closure itself goes
  /// through a generic parameter, which wraps it in a reabstraction thunk with a new
  /// context.)
  private struct ClosureHolder {
    let work: @Sendable () -> Void

    /// The closure's context object. Unsafe pointer: an address only, read while `work` is
    /// alive; `swift_retainCount` reads the object only while the blocked job holds it.
    var context: UnsafeMutableRawPointer? {
      withUnsafeBytes(of: self) { $0.load(fromByteOffset: 8, as: UnsafeMutableRawPointer?.self) }
    }
  }

  /// The Swift runtime's strong reference count of a heap object.
  @_silgen_name("swift_retainCount")
  private func swiftRetainCount(_ object: UnsafeMutableRawPointer) -> Int

  /// Ends the child process with a message on standard error.
  private func costFailure(_ message: String) -> Never {
    let line = Array("SubmissionCostTests: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(1)
  }
#endif
