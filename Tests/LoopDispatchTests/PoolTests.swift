import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// Pool-wide behaviour, each in its own process (exit tests) so that other suites running in
/// parallel cannot occupy the shared pool. Exit code 0 means every check passed; other codes
/// name the failed check.
@Suite struct PoolTests {
  @Test func higherPriorityLanesRunFirstOnASaturatedPool() async {
    await #expect(processExitsWith: .success) {
      let workers = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
      // Occupy every worker with a runnable spinner (spinning keeps the supervisor from
      // adding threads: the workers are busy, not blocked).
      let release = Atomic<Int>(0)
      let spinning = Counter()
      for index in 0..<workers {
        Queue.global(.high).async {
          spinning.increment()
          while release.load(ordering: .acquiring) <= index { sched_yield() }
        }
      }
      while spinning.current < workers { sched_yield() }
      let order = Locked([Priority]())
      let done = Latch()
      let submissions: [Priority] = [
        .background, .low, .default, .high, .low, .high, .background, .default,
      ]
      for priority in submissions {
        Queue.global(priority).async {
          let count = order.withLock { list -> Int in
            list.append(priority)
            return list.count
          }
          if count == submissions.count { done.open() }
        }
      }
      // Free one worker: it alone drains the lanes, strictly by priority.
      release.store(1, ordering: .releasing)
      guard done.wait() else { exit(2) }
      release.store(Int.max, ordering: .releasing)
      exit(order.value == submissions.sorted() ? 0 : 3)
    }
  }

  @Test func poolGrowsWhenEveryWorkerIsBlocked() async {
    await #expect(processExitsWith: .success) {
      let workers = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
      let unblock = Latch()
      let blocked = Counter()
      for _ in 0..<workers {
        Queue.global().async {
          blocked.increment()
          _ = unblock.wait(seconds: 60)  // Blocked in the kernel.
        }
      }
      while blocked.current < workers { sched_yield() }
      let ranWhileBlocked = Latch()
      let start = Deadline.now
      Queue.global().async { ranWhileBlocked.open() }
      guard ranWhileBlocked.wait(seconds: 10) else { exit(2) }
      let waited = Deadline.now - start
      unblock.open()
      // Growth happens within a few supervisor ticks (5 ms each), not seconds.
      exit(waited < .seconds(1) ? 0 : 3)
    }
  }
}
