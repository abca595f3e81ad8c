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

  @Test func grownWorkersRetireWhenIdleAndThreadsAreNamed() async {
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_IDLE_RETIREMENT_MS", "50", 1)  // Before the pool starts.
      let workers = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
      let unblock = Latch()
      let blocked = Counter()
      for _ in 0..<workers + 2 {
        Queue.global().async {
          blocked.increment()
          _ = unblock.wait(seconds: 60)
        }
      }
      // Every blocked item got a thread: the pool grew by two.
      let start = Deadline.now
      while blocked.current < workers + 2 {
        if Deadline.now - start > .seconds(20) { exit(2) }
        sched_yield()
      }
      if workerThreadNames().count < workers + 2 { exit(3) }
      unblock.open()
      // The two extra workers retire after 50 ms idle; the base workers stay.
      while workerThreadNames().count > workers {
        if Deadline.now - start > .seconds(20) { exit(4) }
        Queue.global().sync {}
        sched_yield()
      }
      exit(workerThreadNames().count == workers ? 0 : 5)
    }
  }
}

/// Names of this process's pool worker threads, from /proc.
func workerThreadNames() -> [String] {
  guard let directory = opendir("/proc/self/task") else { return [] }
  defer { closedir(directory) }
  var names: [String] = []
  while let entry = readdir(directory) {
    let tid = withUnsafeBytes(of: entry.pointee.d_name) { raw in
      String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
    guard Int(tid) != nil else { continue }
    let fd = open("/proc/self/task/\(tid)/comm", O_RDONLY)
    guard fd >= 0 else { continue }
    var buffer = [UInt8](repeating: 0, count: 64)
    let n = read(fd, &buffer, 64)
    close(fd)
    if n > 0 {
      let name = String(decoding: buffer[..<n], as: UTF8.self)
      if name.hasPrefix("ld.worker.") { names.append(name) }
    }
  }
  return names
}
