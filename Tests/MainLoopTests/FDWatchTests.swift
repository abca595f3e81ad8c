import Glibc
import Synchronization
import TestSupport
import Testing

@testable import MainLoop

@Suite struct FDWatchTests {
  @Test func readWatchFiresWhenDataArrivesAndIsLevelTriggered() throws {
    let loop = EventLoop(name: "read")
    let pipe = Pipe()
    let fires = LoopConfined(0)
    let watch = try loop.watch(fd: pipe.readEnd, for: .read) { fires.value += 1 }
    loop.run(until: .now + .milliseconds(5))
    #expect(fires.value == 0)  // Nothing written yet.
    pipe.write(3)
    // Never read: level-triggered readiness keeps firing on following turns.
    #expect(loop.run(until: { fires.value >= 3 }, deadline: .now + .seconds(10)))
    #expect(pipe.drain() == 3)
    watch.cancel()
    #expect(expectClean(loop))
  }

  @Test func readAndWriteWatchesOnOneSocketAreIndependent() throws {
    let fds = socketPair()
    defer { for fd in fds { close(fd) } }
    let loop = boundLoop("rw")
    let reads = LoopConfined(0)
    let writes = LoopConfined(0)
    let readWatch = try loop.watch(fd: fds[0], for: .read) { reads.value += 1 }
    let writeWatch = try loop.watch(fd: fds[0], for: .write) { writes.value += 1 }
    #expect(loop.run(until: { writes.value > 0 }, deadline: .now + .seconds(10)))
    #expect(reads.value == 0)
    writeWatch.cancel()
    let writesAtCancel = writes.value
    var byte: UInt8 = 1
    #expect(write(fds[1], &byte, 1) == 1)
    #expect(loop.run(until: { reads.value > 0 }, deadline: .now + .seconds(10)))
    #expect(writes.value == writesAtCancel)
    readWatch.cancel()
    #expect(expectClean(loop))
  }

  @Test func badDescriptorsThrowClearErrors() throws {
    let loop = boundLoop("bad-fds")
    #expect(throws: EventLoopError.negativeDescriptor(-1)) {
      try loop.watch(fd: -1, for: .read) {}
    }
    let closed = descriptorNobodyOpens()
    #expect(throws: EventLoopError.closedDescriptor(closed)) {
      try loop.watch(fd: closed, for: .read) {}
    }
    let file = open("/proc/self/exe", O_RDONLY)
    defer { close(file) }
    #expect(throws: EventLoopError.notPollable(file, kind: "regular file")) {
      try loop.watch(fd: file, for: .read) {}
    }
    let directory = open("/", O_RDONLY)
    defer { close(directory) }
    #expect(throws: EventLoopError.notPollable(directory, kind: "directory")) {
      try loop.watch(fd: directory, for: .write) {}
    }
    #expect(
      EventLoopError.closedDescriptor(9).description == "file descriptor 9 is not open")
    #expect(expectClean(loop))
  }

  @Test func noHandlerStartsOnceCancelHasReturned() throws {
    let pipe = Pipe()
    pipe.write()  // Always readable: the handler fires every turn.
    let cancelReturned = Atomic<Bool>(false)
    let lateStarts = Counter()
    let fires = Counter()
    let completionOnLoop = Counter()
    try withLoopThread { loop in
      let watch = try loop.watch(fd: pipe.readEnd, for: .read) {
        if cancelReturned.load(ordering: .sequentiallyConsistent) { lateStarts.increment() }
        fires.increment()
      }
      while fires.current < 100 { sched_yield() }
      let removed = Latch()
      let firesAtCompletion = Counter()
      watch.cancel {
        if loop.isInLoopThread { completionOnLoop.increment() }
        firesAtCompletion.add(fires.current)
        removed.open()
      }
      cancelReturned.store(true, ordering: .sequentiallyConsistent)
      #expect(watch.isCancelled)
      #expect(removed.wait())
      #expect(loop.registeredWatchCount == 0)
      // Let the loop turn again (the fd stays readable): no call after the completion.
      for _ in 0..<3 {
        let turned = Latch()
        loop.execute { turned.open() }
        #expect(turned.wait())
      }
      #expect(fires.current == firesAtCompletion.current)
    }
    // The loop thread may have passed its cancelled check just before `cancel` stored the
    // flag: that one call may begin after `cancel` returned. No other may.
    #expect(lateStarts.current <= 1)
    #expect(completionOnLoop.current == 1)
  }

  @Test func completionMayCloseTheDescriptor() throws {
    let fds = socketPair()
    let loop = boundLoop("close")
    let closedInCompletion = LoopConfined(false)
    let watch = try loop.watch(fd: fds[0], for: .write) {}
    loop.run(until: .now + .milliseconds(2))
    watch.cancel {
      closedInCompletion.value = close(fds[0]) == 0
    }
    // On the loop thread the completion runs before cancel returns.
    #expect(closedInCompletion.value)
    close(fds[1])
    loop.run(until: .now + .milliseconds(2))
    #expect(expectClean(loop))
  }

  @Test func hangUpIsDeliveredAsReadableEndOfFile() throws {
    let loop = EventLoop(name: "hup")
    let fds = socketPair()
    close(fds[1])
    let sawEOF = LoopConfined(false)
    let holder = LoopConfined<FDWatch?>(nil)
    holder.value = try loop.watch(fd: fds[0], for: .read) {
      var byte: UInt8 = 0
      if read(fds[0], &byte, 1) == 0 {
        sawEOF.value = true
        holder.value?.cancel { close(fds[0]) }
      }
    }
    #expect(loop.run(until: { sawEOF.value }, deadline: .now + .seconds(10)))
    #expect(expectClean(loop))
  }

  @Test func registrationFromAnotherThreadCompletesWhenTheLoopRuns() throws {
    let loop = EventLoop(name: "unbound")
    let pipe = Pipe()
    let fired = LoopConfined(false)
    let failure = LoopConfined<EventLoopError?>(nil)
    // The loop is unbound: this thread is not its thread, so the add is posted.
    let registrar = NativeThread.spawn(name: "registrar") {
      do {
        let holder = LoopConfined<FDWatch?>(nil)
        holder.value = try loop.watch(fd: pipe.readEnd, for: .read) {
          fired.value = true
          pipe.drain()
          holder.value?.cancel()
        }
      } catch let error as EventLoopError {
        failure.value = error
      } catch {
        Issue.record(error)
      }
    }!
    registrar.join()
    #expect(failure.value == nil)
    #expect(loop.registeredWatchCount == 0)  // Not added until the loop runs.
    pipe.write()
    #expect(loop.run(until: { fired.value }, deadline: .now + .seconds(10)))
    loop.run(until: .now + .milliseconds(2))
    #expect(expectClean(loop))
  }

  @Test func manyWatchesOpenedAndCancelledLeaveNothingBehind() throws {
    let loop = boundLoop("churn")
    var pipes: [Pipe] = []
    var watches: [FDWatch] = []
    for _ in 0..<200 {
      let pipe = Pipe()
      pipes.append(pipe)
      watches.append(try loop.watch(fd: pipe.readEnd, for: .read) { pipe.drain() })
      watches.append(try loop.watch(fd: pipe.writeEnd, for: .write) {})
      pipe.write()
    }
    #expect(loop.registeredWatchCount == 400)
    loop.run(until: .now + .milliseconds(5))
    for watch in watches { watch.cancel() }
    #expect(expectClean(loop))
  }
}
