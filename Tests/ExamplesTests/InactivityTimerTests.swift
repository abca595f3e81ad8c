import Examples
import LoopDispatch
import MainLoop
import TestSupport
import Testing

/// The server's idle and write timeouts (`InactivityTimer`) on a virtual-time loop: the test
/// moves the clock and plays the connection, so which deadline closes it, and when, is exact.
@Suite struct InactivityTimerTests {
  /// A timer on a fresh virtual loop whose connection state the test sets, recording when it
  /// expires (as virtual milliseconds) and why.
  private final class Harness: @unchecked Sendable {
    // @unchecked Sendable: `timer` is only touched on `queue`; the rest is locked or immutable.
    let loop = EventLoop(name: "v-inactivity", clock: .virtual())
    let queue = Queue(label: "v-inactivity")
    let activity = Locked(ConnectionActivity.idle)
    let expirations = Locked([(Int, ConnectionActivity)]())
    var timer: InactivityTimer?

    init(idle: Int, write: Int) {
      loop.advance(by: .zero)
      let (loop, activity, expirations) = (self.loop, self.activity, self.expirations)
      queue.sync {
        timer = InactivityTimer(
          queue: queue, idleTimeout: .milliseconds(idle), writeTimeout: .milliseconds(write),
          loop: loop, activity: { activity.value },
          expired: { reason in
            let now = Int(
              (loop.now.uptimeNanoseconds - LoopClock.virtualStart.uptimeNanoseconds)
                / 1_000_000)
            expirations.withLock { $0.append((now, reason)) }
          })
      }
    }

    /// Moves the virtual clock to `milliseconds` and waits until what fired has run.
    func advance(to milliseconds: Int) {
      loop.advance(to: LoopClock.virtualStart + .milliseconds(milliseconds))
      queue.sync {}
    }

    func noteActivity() { queue.sync { timer?.noteActivity() } }

    var expired: [String] { expirations.value.map { "\($0.0) \($0.1)" } }
  }

  /// A request that takes 1.5 s with a 1 s idle timeout: the connection is busy until the
  /// answer at 1.5 s, then idle for its whole timeout, to 2.5 s (it used to close at 2 s).
  @Test func aSlowRequestGetsAFullIdleTimeoutAfterItsAnswer() {
    let harness = Harness(idle: 1_000, write: 5_000)
    harness.noteActivity()  // The request arrives at 0.
    harness.activity.withLock { $0 = .working }
    harness.advance(to: 1_000)
    #expect(harness.expired.isEmpty)
    harness.advance(to: 1_500)
    harness.activity.withLock { $0 = .idle }  // The answer is out.
    harness.noteActivity()
    harness.advance(to: 2_499)
    #expect(harness.expired.isEmpty)
    harness.advance(to: 2_500)
    #expect(harness.expired == ["2500 idle"])
    harness.queue.sync { harness.timer?.stop() }
  }

  /// Answers pending: the write timeout counts from the last write progress, and the idle
  /// timeout does not apply.
  @Test func theWriteTimeoutCountsFromTheLastProgress() {
    let harness = Harness(idle: 1_000, write: 300)
    harness.activity.withLock { $0 = .writing }
    harness.noteActivity()  // The answer is queued at 0.
    harness.advance(to: 200)
    harness.noteActivity()  // Some of it is written at 200.
    harness.advance(to: 499)
    #expect(harness.expired.isEmpty)
    harness.advance(to: 500)
    #expect(harness.expired == ["500 writing"])
  }

  /// An idle connection with a long write timeout closes at its idle deadline; one that
  /// stays busy never expires; a stopped timer never calls back.
  @Test func idleBusyAndStopped() {
    let idle = Harness(idle: 100, write: 10_000)
    idle.noteActivity()
    idle.advance(to: 60)
    idle.noteActivity()
    idle.advance(to: 159)
    #expect(idle.expired.isEmpty)
    idle.advance(to: 160)
    #expect(idle.expired == ["160 idle"])

    let busy = Harness(idle: 100, write: 100)
    busy.activity.withLock { $0 = .working }
    busy.noteActivity()
    for step in 1...20 { busy.advance(to: step * 100) }
    #expect(busy.expired.isEmpty)
    busy.queue.sync { busy.timer?.stop() }
    busy.activity.withLock { $0 = .idle }
    busy.advance(to: 10_000)
    #expect(busy.expired.isEmpty)
    #expect(busy.loop.pendingTimerCount == 0)
  }
}
