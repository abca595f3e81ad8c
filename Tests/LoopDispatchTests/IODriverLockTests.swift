import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// The I/O driver's two locks (`Delivery/IODriver+Registration.swift`): the per-request paths
/// take an entry's own lock, not the tables' lock, so a re-arm's `epoll_ctl` never holds up
/// the poller's lookups or another connection's re-arm. `RegistrationLockModelTests` checks
/// the order of the two over every interleaving; this checks the code takes the one it says.
@Suite struct IODriverLockTests {
  /// A delivery finishes, re-arm included, while another thread holds the tables' lock; the
  /// next readiness is reported once that lock is free. With the re-arm under the tables'
  /// lock, the delivery would wait for it and the work queued behind it would not run.
  @Test func aReArmDoesNotTakeTheTablesLock() throws {
    let pair = try makePipe()
    defer {
      close(pair.read)
      close(pair.write)
    }
    let entered = Latch()
    let release = Latch()
    let secondFired = Latch()
    let fires = Atomic<Int>(0)
    // Below the default lane, so the handler runs as an item of its queue (never inline on
    // the driver thread), and the re-arm (`didDeliver`) is part of that item: work queued
    // behind it runs only after the re-arm.
    let queue = Queue(label: "rearm-lock", target: .global(.low))
    let source = try ReadSource(fd: pair.read, queue: queue)
    source.setEventHandler { [unowned source] in
      _ = drain(source.fd)
      if fires.add(1, ordering: .relaxed).newValue == 1 {
        entered.open()
        _ = release.wait(seconds: 30)
      } else {
        secondFired.open()
      }
    }
    let cancelled = Latch()
    source.setCancelHandler { cancelled.open() }
    source.activate()
    // On every way out: the first handler let go and the source cancelled (before the pipe
    // closes: the defer above runs after this one).
    defer {
      release.open()
      source.cancel()
      _ = cancelled.wait()
    }
    writeBytes(pair.write, 1)
    #expect(entered.wait())
    let afterDelivery = Latch()
    queue.async { afterDelivery.open() }
    guard let driver = IODriver.running else {
      Issue.record("the I/O driver is not running with a read source registered")
      return
    }
    // Holds the process-wide tables' lock for up to 10 s if the test fails: other suites'
    // registrations wait meanwhile.
    let finishedUnderTheLock = driver.lock.withLock { _ in
      release.open()
      return afterDelivery.wait(seconds: 10)
    }
    #expect(finishedUnderTheLock, "the delivery's re-arm waited for the tables' lock")
    writeBytes(pair.write, 1)
    #expect(secondFired.wait(), "the re-armed source did not fire again")
  }
}
