import CLoopShims
import Glibc
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// The lazy naming's rules seen from inside (`ThreadName.swift`): the runtime's own queues
/// show the worker's own name, hops between queues do not rename, and the switch turns the
/// whole mechanism off.
@Suite struct ThreadNameInternalTests {
  @Test func aQueueThatDoesNotNameThreadsNeverShowsItsLabel() {
    let runtimeOwn = Queue(label: "names.internal")
    runtimeOwn.namesThreads = false
    let named = Queue(label: "names.outer", target: Queue.global())
    let tid = Locked<pid_t>(0)
    let started = Latch()
    let release = Latch()
    // A named queue's item submits to the internal queue, which then runs for a while: its
    // worker must never show the internal queue's label.
    named.async {
      runtimeOwn.async {
        tid.withLock { $0 = cls_gettid() }
        started.open()
        _ = release.wait()
      }
    }
    #expect(started.wait())
    defer { release.open() }
    // Three looks after the item started: any name it wanted has been shown by now (a name
    // held over two looks is written at the second). Or no look is due at all, when the
    // worker already shows what it wants.
    let looksAtStart = ThreadName.looks.load(ordering: .relaxed)
    let deadline = Deadline.now + .seconds(30)
    while ThreadName.looks.load(ordering: .relaxed) - looksAtStart < 3 && ThreadName.lookIsDue
      && Deadline.now < deadline
    {
      sched_yield()
    }
    #expect(nameOfThread(tid.value) != "names.internal")
  }

  @Test func hopsBetweenTwoQueuesDoNotRenameTheWorkersEachTime() {
    let first = Queue(label: "names.ping")
    let second = Queue(label: "names.pong")
    let hops = 20_000
    let done = Latch()
    let renamesBefore = ThreadName.kernelRenames.load(ordering: .relaxed)
    @Sendable func hop(_ remaining: Int) {
      if remaining == 0 { return done.open() }
      (remaining.isMultiple(of: 2) ? first : second).async { hop(remaining - 1) }
    }
    hop(hops)
    #expect(done.wait())
    let renames = ThreadName.kernelRenames.load(ordering: .relaxed) - renamesBefore
    // Eager naming renamed once per hop; lazy naming renames only names held for a tick
    // (a worker stalled mid-hop by the machine) and parked workers.
    #expect(renames < hops / 20, "\(renames) renames for \(hops) hops")
  }

  #if DEBUG
    /// One worker (`LOOPDISPATCH_CPUS=1`, `LOOPDISPATCH_MAX_THREADS=1`, in a child process),
    /// held by a global-queue job that spins until released, while 100 items of one labelled
    /// concurrent queue wait behind it: it then runs them back to back and writes its wanted
    /// name at most twice (the label at the first item, its own name if it parks after the
    /// last), not twice per item (checked: 200 when each item wanted the label and then the
    /// worker's own name back).
    @Test func itemsOfOneQueueBackToBackWriteTheWantedNameOnce() async {
      await #expect(processExitsWith: .success) {
        unsetenv("LOOPDISPATCH_THREAD_NAMES")
        let hold = OnlyWorkerHold.start()
        let group = Group()
        let queue = Queue(label: "names.run", attributes: .concurrent)
        for _ in 0..<100 { queue.async(group: group) {} }
        let before = ThreadName.wantedNameWrites.load(ordering: .relaxed)
        hold.release()
        if group.wait(timeout: .seconds(60)) != .success { exit(2) }
        let writes = ThreadName.wantedNameWrites.load(ordering: .relaxed) - before
        // At least the label's: a worker that wanted nothing at all would pass the bound.
        exit(writes >= 1 && writes <= 2 ? 0 : 3)
      }
    }
  #endif

  #if DEBUG
    /// One worker (in a child process), so that the internal queue's drain runs right after
    /// the named queue's item on the same thread: as it runs, the worker wants its own name,
    /// not the label the named item left wanted (`Queue.runFromPool`; checked: the label
    /// without that line).
    @Test func aTopLevelDrainOfAQueueThatDoesNotNameThreadsWantsTheWorkersOwnName() async {
      await #expect(processExitsWith: .success) {
        setenv("LOOPDISPATCH_CPUS", "1", 1)
        setenv("LOOPDISPATCH_MAX_THREADS", "1", 1)
        unsetenv("LOOPDISPATCH_THREAD_NAMES")
        let runtimeOwn = Queue(label: "names.internal")
        runtimeOwn.namesThreads = false
        let named = Queue(label: "names.outer")
        let wantsOwnName = Locked<Bool?>(nil)
        let done = Latch()
        named.async {
          runtimeOwn.async {
            wantsOwnName.withLock { $0 = ThreadName.callingWorkerWantsItsOwnName }
            done.open()
          }
        }
        exit(done.wait() && wantsOwnName.value == true ? 0 : 3)
      }
    }
  #endif

  @Test func namesCanBeTurnedOffWithAnEnvironmentVariable() async {
    // In a child process: the switch is read when the first worker starts.
    await #expect(processExitsWith: .success) {
      setenv("LOOPDISPATCH_THREAD_NAMES", "0", 1)
      let hasNamingState = Locked<Bool>(true)
      let done = Latch()
      Queue(label: "names.off").async {
        hasNamingState.withLock { $0 = ThreadSlots.nameState() != nil }
        done.open()
      }
      exit(done.wait() && !hasNamingState.value ? 0 : 1)
    }
  }
}
