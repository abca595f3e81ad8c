import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// Shares (`WorkerPool.takeFromInjection`): a worker that moved jobs out of a long injection
/// queue into its local queue never strands them when the job it runs blocks — another
/// worker steals them (`LocalQueue.steal`), woken by the flush before a LoopDispatch wait or
/// by the supervisor when the owner blocks in the kernel.
///
/// Each test runs in a child process (an exit test) so that the pool holds only its jobs.
@Suite struct PoolBatchTests {
  /// A burst from a plain thread whose first job blocks in `read` until its second job has
  /// run. The worker that takes the first job usually moves the next ones (the writer among
  /// them) into its local queue before it blocks; another worker must steal them or the
  /// round never ends.
  @Test func aBlockedJobDoesNotStrandTheJobsBatchedBehindIt() async {
    await #expect(processExitsWith: .success) {
      for round in 0..<scaledRounds(200) {
        var fds: [Int32] = [0, 0]
        if pipe(&fds) != 0 { batchTestFailure("pipe failed") }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        let group = Group()
        Queue.global().async(group: group) {
          var byte: UInt8 = 0
          _ = read(readEnd, &byte, 1)
        }
        Queue.global().async(group: group) {
          var byte: UInt8 = 1
          _ = write(writeEnd, &byte, 1)
        }
        for _ in 0..<14 { Queue.global().async(group: group) {} }
        if group.wait(timeout: .seconds(10)) == .timedOut {
          batchTestFailure("round \(round): the writer stayed behind the blocked reader")
        }
        close(readEnd)
        close(writeEnd)
      }
      exit(0)
    }
  }

  /// The same with the wait on a LoopDispatch semaphore: the blocked worker wakes a thief for
  /// its local queue before it sleeps.
  @Test func aJobWaitingOnASemaphoreReturnsItsBatch() async {
    await #expect(processExitsWith: .success) {
      for round in 0..<scaledRounds(200) {
        let signalled = Semaphore(value: 0)
        let group = Group()
        Queue.global().async(group: group) {
          if signalled.wait(timeout: .seconds(10)) == .timedOut {
            batchTestFailure("round \(round): the signaller stayed behind the waiter")
          }
        }
        Queue.global().async(group: group) { signalled.signal() }
        for _ in 0..<14 { Queue.global().async(group: group) {} }
        if group.wait(timeout: .seconds(20)) == .timedOut {
          batchTestFailure("round \(round): the burst never finished")
        }
      }
      exit(0)
    }
  }
}

extension PoolBatchTests {
  /// A pool job submits a fan-out (into its own worker's local queue) and then blocks in
  /// `read` until the last job of the fan-out has run: the others can only run if another
  /// worker steals them while the owner is blocked in the kernel.
  @Test func aJobBlockedAfterFillingItsLocalQueueIsNotWaitedFor() async {
    await #expect(processExitsWith: .success) {
      for round in 0..<scaledRounds(100) {
        var fds: [Int32] = [0, 0]
        if pipe(&fds) != 0 { batchTestFailure("pipe failed") }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        let finished = Semaphore(value: 0)
        Queue.global().async {
          for _ in 0..<30 { Queue.global().async {} }
          Queue.global().async {
            var byte: UInt8 = 1
            _ = write(writeEnd, &byte, 1)
          }
          var byte: UInt8 = 0
          _ = read(readEnd, &byte, 1)
          finished.signal()
        }
        if finished.wait(timeout: .seconds(10)) == .timedOut {
          batchTestFailure("round \(round): the writer stayed in the blocked worker's queue")
        }
        close(readEnd)
        close(writeEnd)
      }
      exit(0)
    }
  }
}

/// `rounds` scaled by `LOOPDISPATCH_TEST_SCALE`, at least 10.
private func scaledRounds(_ rounds: Int) -> Int {
  guard let raw = getenv("LOOPDISPATCH_TEST_SCALE"), let scale = Double(String(cString: raw))
  else { return rounds }
  return Swift.max(10, Int(Double(rounds) * scale))
}

/// Ends the child process with a message on standard error.
private func batchTestFailure(_ message: String) -> Never {
  let line = Array("PoolBatchTests: \(message)\n".utf8)
  _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}
