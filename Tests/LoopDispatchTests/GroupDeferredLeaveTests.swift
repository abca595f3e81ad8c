import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// A worker that runs jobs of one group back to back leaves the group once for the run
/// (`Worker.flushDeferredLeaves`), and owes no leave once it stops: `wait` and `notify` see
/// every return to zero as before.
@Suite struct GroupDeferredLeaveTests {
  #if DEBUG
    /// One worker (`LOOPDISPATCH_CPUS=1`, `LOOPDISPATCH_MAX_THREADS=1`, in a child process),
    /// held by a job that spins until released, while 100 jobs of one group queue behind it:
    /// it then runs the 100 back to back and leaves the group in one atomic add, not 100
    /// (checked: 100 with the leave made per job).
    @Test func aRunOfOneGroupsJobsLeavesItOnce() async {
      await #expect(processExitsWith: .success) {
        let hold = OnlyWorkerHold.start()
        let group = Group()
        for _ in 0..<100 { Queue.global().async(group: group) {} }
        hold.release()
        if group.wait(timeout: .seconds(60)) != .success { exit(2) }
        exit(group.leaveWrites == 1 ? 0 : 3)
      }
    }
  #endif

  /// Jobs of eight groups, interleaved, from two threads onto the global queues: every
  /// group's `wait` returns, and its `notify` runs once, after all of its jobs.
  @Test func interleavedGroupsAllReachZero() {
    let groups = (0..<8).map { _ in Group() }
    let ran = (0..<8).map { _ in Counter() }
    let notified = (0..<8).map { _ in Counter() }
    let ranAtNotify = (0..<8).map { _ in Counter() }
    let perGroupPerThread = 2_000
    let producers = (0..<2).map { _ in
      SyncTestThread.start {
        for round in 0..<perGroupPerThread {
          for index in 0..<8 {
            let counter = ran[index]
            let priority: Priority = round % 3 == 0 ? .high : .default
            Queue.global(priority).async(group: groups[index]) { _ = counter.increment() }
          }
        }
      }
    }
    for producer in producers { #expect(producer.join(seconds: 60)) }
    for index in 0..<8 {
      let counter = ran[index]
      let once = notified[index]
      let seen = ranAtNotify[index]
      groups[index].notify(queue: .global()) {
        seen.add(counter.current)
        _ = once.increment()
      }
      #expect(groups[index].wait(timeout: .seconds(60)) == .success)
      #expect(ran[index].current == 2 * perGroupPerThread)
    }
    let deadline = Deadline.now + .seconds(60)
    while notified.contains(where: { $0.current == 0 }) && Deadline.now < deadline {
      sched_yield()
    }
    #expect(notified.allSatisfy { $0.current == 1 })
    #expect(ranAtNotify.allSatisfy { $0.current == 2 * perGroupPerThread })
  }
}
