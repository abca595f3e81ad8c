import CLoopShims
import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// The run-next slot (`WorkerPool+RunNext.swift`): a serial queue that a pool job makes
/// runnable runs on that job's worker next, and a slot never strands its job.
///
/// Each test runs in a child process (an exit test) so that no other suite's work shares the
/// pool; the child exits 1 after printing what went wrong.
@Suite struct RunNextSlotTests {
  /// A pool job that submits to an idle serial queue and returns: the queue's item runs on
  /// the same thread, every round (no other worker is woken or steals it).
  @Test func aQueueMadeRunnableByAPoolJobRunsOnItsWorker() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let rounds = 200
      let mismatches = Counter()
      for _ in 0..<rounds {
        // A fresh queue each round: the last round's drain may still hold the old one.
        let queue = Queue(label: "run-next")
        let done = Latch()
        Queue.global().async {
          let submitter = cls_gettid()
          queue.async {
            if cls_gettid() != submitter { _ = mismatches.increment() }
            done.open()
          }
        }
        if !done.wait(seconds: 10) { slotTestFailure("a round never finished") }
      }
      if mismatches.current != 0 {
        slotTestFailure(
          "\(mismatches.current) of \(rounds) items ran on another thread than their submitter")
      }
      exit(0)
    }
    if let result, result.exitStatus != .exitCode(0) {
      Issue.record("child: \(String(decoding: result.standardErrorContent, as: UTF8.self))")
    }
  }

  /// A pool job that submits to a serial queue and then waits for that queue's item on a
  /// semaphore: the slot is handed to the pool before it sleeps, so the item runs.
  @Test func aJobThatWaitsForItsOwnSlotJobOnASemaphoreCompletes() async {
    await #expect(processExitsWith: .success) {
      let queue = Queue(label: "run-next-wait")
      for _ in 0..<50 {
        let done = Latch()
        Queue.global().async {
          let signalled = Semaphore(value: 0)
          queue.async { signalled.signal() }
          if signalled.wait(timeout: .seconds(10)) == .timedOut {
            slotTestFailure("the slot job never ran while its submitter waited")
          }
          done.open()
        }
        if !done.wait(seconds: 20) { slotTestFailure("a round never finished") }
      }
      exit(0)
    }
  }

  /// A pool job that submits to a serial queue and then blocks in the kernel (a `read` on a
  /// pipe that the queue's item writes): LoopDispatch cannot see that wait, so the supervisor
  /// moves the stranded slot job to the lane at its next ticks and another worker runs it.
  @Test func aJobBlockedInTheKernelDoesNotStrandItsSlotJob() async {
    await #expect(processExitsWith: .success) {
      let queue = Queue(label: "run-next-kernel")
      for _ in 0..<5 {
        var fds: [Int32] = [0, 0]
        if pipe(&fds) != 0 { slotTestFailure("pipe failed") }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        let done = Latch()
        Queue.global().async {
          queue.async {
            var byte: UInt8 = 1
            _ = write(writeEnd, &byte, 1)
          }
          var byte: UInt8 = 0
          _ = read(readEnd, &byte, 1)  // Blocks until the slot job has run elsewhere.
          done.open()
        }
        if !done.wait(seconds: 10) {
          slotTestFailure("the slot job stayed behind a blocked worker")
        }
        close(readEnd)
        close(writeEnd)
      }
      exit(0)
    }
  }
}

/// Ends the child process with a message on standard error.
private func slotTestFailure(_ message: String) -> Never {
  let line = Array("RunNextSlotTests: \(message)\n".utf8)
  _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}
