import Glibc
import LoopDispatch

/// The ping-pong of ``SourceBenchmarks`` with both read sources on the main queue, against
/// raw libevent's one-loop ping-pong in C (`raw_libevent_pingpong`, in this process).
///
/// Our side runs in a child process (``ChildProcess``) so that the main queue is drained by
/// `Queue.runMain(until:deadline:)` on a process main thread of its own, as a program would:
/// 1. The child creates both sources with `queue: .main`, activates them and writes the first
///    byte; the handlers then run on the main loop (no thread hop).
/// 2. `runMain` returns after the loop turn in which end A's last handler ran.
/// 3. The child cancels both sources and runs the main loop again until both cancel handlers
///    (which close the descriptors) have run, then reports wall and CPU ns per timed round
///    trip (the child's own CPU time: only our side runs in it). The rival's C function reads
///    both clocks itself, around the same section (`raw_libevent_pingpong`).
extension SourceBenchmarks {
  enum MainPingPong {
    static let oursChild = "ld-main-source-pingpong"

    static func runOursChild() -> Never {
      let run = PingPong(roundTrips: pingPongRoundTrips, warmup: warmupRoundTrips)
      // The cancel handlers run on the main queue, so `closedCount` stays on the main thread.
      let closed: @Sendable () -> Void = { run.closedCount += 1 }
      let sourceA = oursReadSource(fd: run.pair.a, queue: .main, closed: closed) { run.returned() }
      let sourceB = oursReadSource(fd: run.pair.b, queue: .main, closed: closed) { run.echo() }
      sourceA.activate()
      sourceB.activate()
      run.start()
      if !Queue.runMain(until: { run.isFinished }, deadline: .now + .seconds(60)) {
        writeToStandardError(
          "main-queue source ping-pong did not finish within 60 s; \(run.remaining) left\n")
        exit(1)
      }
      let measurement = run.measurement
      run.tearDown {
        sourceA.cancel()
        sourceB.cancel()
      }
      if !Queue.runMain(until: { run.closedCount == 2 }, deadline: .now + .seconds(10)) {
        writeToStandardError(
          "main-queue read sources: \(run.closedCount) of 2 cancel handlers ran within 10 s\n")
        exit(1)
      }
      ChildProcess.report(measurement)
    }
  }
}
