import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// `setTarget` while a thread holds a serial chain (`sync`, or an fd handler run inline on a
/// driver thread) changes where later work goes; the holder still releases exactly the
/// queues it locked. Before the fix the unlock followed the new target: the new parent lost
/// a lock bit it never had (its state word wrapped, reading as suspended and inactive) and
/// the old parent stayed locked, so neither ran work again.
@Suite struct RetargetWhileHeldTests {
  @Test func retargetingInsideAChainSyncReleasesTheChainThatWasLocked() throws {
    let oldParent = Queue(label: "retarget.old-parent")
    let newParent = Queue(label: "retarget.new-parent")
    let child = Queue(label: "retarget.child", target: oldParent)
    child.sync { child.setTarget(newParent) }
    // A failure here leaves the queues stuck: stop rather than hang in the next `sync`.
    try #require(bothParentsRunWork(oldParent, newParent))
    // The new target is in force for later work, through the chain path too.
    let seen = Shared<Queue?>(nil)
    child.sync { seen.value = Queue.current }
    #expect(seen.value === child)
    child.setTarget(Queue.global())
    child.sync { child.setTarget(oldParent) }  // Single lock, retargeted onto a chain.
    #expect(bothParentsRunWork(oldParent, newParent))
    let ran = Semaphore(value: 0)
    child.async { ran.signal() }
    #expect(ran.wait(timeout: .seconds(30)) == .success)
  }

  /// The same from another thread, while the `sync` body runs (the reviewed interleaving).
  @Test func retargetingFromAnotherThreadWhileASyncRuns() {
    let oldParent = Queue(label: "retarget.other.old")
    let newParent = Queue(label: "retarget.other.new")
    let child = Queue(label: "retarget.other.child", target: oldParent)
    let entered = Latch()
    let retargeted = Latch()
    let holder = SyncTestThread.start {
      child.sync {
        entered.open()
        _ = retargeted.wait()
      }
    }
    #expect(entered.wait())
    child.setTarget(newParent)
    retargeted.open()
    #expect(holder.join(seconds: 30))
    #expect(bothParentsRunWork(oldParent, newParent))
  }

  /// An fd handler run inline on a driver thread retargets its own queue. In a child process,
  /// so that no other suite's handler holds the driver and sends the event to the pool.
  @Test func retargetingInsideAnInlineDriverHandler() async {
    let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
      let oldParent = Queue(label: "retarget.io.old")
      let newParent = Queue(label: "retarget.io.new")
      let child = Queue(label: "retarget.io.child", target: oldParent)
      var fds: [Int32] = [0, 0]
      guard pipe(&fds) == 0 else { retargetFailure("pipe failed") }
      let fired = Semaphore(value: 0)
      let onDriver = Atomic<Int>(0)
      let source: ReadSource
      do { source = try ReadSource(fd: fds[0], queue: child) } catch {
        retargetFailure("\(error)")
      }
      source.setEventHandler { [unowned source] in
        var buffer = [UInt8](repeating: 0, count: 16)
        _ = read(source.fd, &buffer, buffer.count)
        if kernelThreadName().hasPrefix("ld.io.") { onDriver.wrappingAdd(1, ordering: .relaxed) }
        // Alternate, so that each round retargets away from the chain it holds.
        child.setTarget(child.target === oldParent ? newParent : oldParent)
        fired.signal()
      }
      source.activate()
      for round in 0..<6 {
        var byte: UInt8 = 1
        _ = write(fds[1], &byte, 1)
        if fired.wait(timeout: .seconds(10)) == .timedOut {
          retargetFailure("round \(round): the handler did not run (chain left locked)")
        }
        if !bothParentsRunWork(oldParent, newParent) {
          retargetFailure("round \(round): a parent queue no longer runs work")
        }
      }
      if onDriver.load(ordering: .relaxed) == 0 {
        retargetFailure("no handler ran inline on a driver thread: the path was not tested")
      }
      source.cancel()
      exit(0)
    }
    let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
    #expect(!errors.contains("RetargetWhileHeldTests:"), "\(errors)")
  }

  /// The main loop's inline run of a source whose chain ends at the main queue (the
  /// `retarget-main` scenario of LoopDispatchTestHost, which needs the process main thread).
  @Test func retargetingInsideAnInlineMainLoopHandler() {
    let result = runProgram("LoopDispatchTestHost", ["retarget-main"])
    #expect(result.status == 0, "\(result.output)\(result.errorOutput)")
    #expect(result.output.contains("ok retarget-main"), "\(result.output)")
  }
}

/// Whether each queue runs a new item within 10 s (a queue left locked, or whose state word
/// wrapped into "suspended", never does).
private func bothParentsRunWork(_ first: Queue, _ second: Queue) -> Bool {
  let ran = Semaphore(value: 0)
  first.async { ran.signal() }
  second.async { ran.signal() }
  return ran.wait(timeout: .seconds(10)) == .success && ran.wait(timeout: .seconds(10)) == .success
}

private func retargetFailure(_ message: String) -> Never {
  let line = Array("RetargetWhileHeldTests: \(message)\n".utf8)
  _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
  exit(1)
}
