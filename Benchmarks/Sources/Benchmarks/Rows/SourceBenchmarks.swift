import Dispatch
import Glibc
import LoopDispatch
import Synchronization

/// Event sources of LoopDispatch against Dispatch's and raw libevent: fd read sources
/// ping-ponging a byte over a socketpair (on two serial queues, and on the main queue in a
/// child process), and the punctuality of a repeating 1 ms timer source.
///
/// Ping-pong walk-through (both sides, both variants):
/// 1. A non-blocking AF_UNIX stream socketpair; one read source per end, each on its own
///    target queue (or both on the main queue).
/// 2. The runner writes one byte into end A. End B's handler reads it and writes it back;
///    end A's handler reads it, counts a round trip and writes it again, until the last.
///    The first ``warmupRoundTrips`` are not timed (queue and pool start-up).
/// 3. End A's handlers read the clocks (wall and process CPU, ``ClockReading``) at the first
///    timed round trip and the last; the last one opens the run's gate.
/// 4. The runner raises `isTearingDown` and cancels both sources; each cancel handler closes
///    its descriptor, and the runner waits for both before it returns wall and CPU ns per
///    timed round trip. A cancel is asynchronous, so the other end may still see the hang-up (a read of 0)
///    before its own cancel lands: that read is expected only once `isTearingDown` is raised.
enum SourceBenchmarks {
  static let pingPongRoundTrips = 100_000
  static let warmupRoundTrips = 2_000

  static var group: BenchmarkGroup {
    let jitterLogs = JitterLogs()
    return BenchmarkGroup(
      name: "sources",
      benchmarks: [
        Benchmark(
          key: "serialsourcepingpong",
          name: "fd read sources ping-pong on two serial queues, 100k round trips",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: .ratioAtMost(0.25, "Dispatch"),
          ours: { oursSerialPingPong(roundTrips: pingPongRoundTrips) },
          rival: { dispatchSerialPingPong(roundTrips: pingPongRoundTrips) }),
        Benchmark(
          key: "mainsourcepingpong",
          name: "fd read sources ping-pong on the main queue, 100k round trips (child process)",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "raw libevent",
          target: .ratioAtMost(1.1, "raw libevent"),
          ours: { ChildProcess.measure(MainPingPong.oursChild) },
          rival: { MainLoopBenchmarks.rawLibeventPingPong(roundTrips: pingPongRoundTrips) }),
        Benchmark(
          key: "timerjitter",
          name: "repeating 1 ms timer source for 2 s on a serial queue",
          unit: "µs jitter mean", direction: .lowerIsBetter, rivalName: "Dispatch",
          target: .oursAtMost(100, "≤ 100 µs"),
          ours: { TimerJitter.oursRun(logs: jitterLogs) },
          rival: { TimerJitter.dispatchRun(logs: jitterLogs) },
          derived: [
            .recorded(
              jitterLogs.p99, unit: "µs jitter p99", direction: .lowerIsBetter, target: nil),
            .recorded(
              jitterLogs.fires, unit: "fires counted (of 2000)", direction: .higherIsBetter,
              target: Target(text: "2000") { ours, _ in ours == 2000 }),
          ]),
      ])
  }

  /// The child modes of this group, by the name passed after `--child`.
  static let childModes: [String: @Sendable () -> Never] = [
    MainPingPong.oursChild: MainPingPong.runOursChild
  ]

  // MARK: - ping-pong state

  /// One ping-pong run: the socketpair, the count and the two handler bodies.
  final class PingPong: @unchecked Sendable {
    // @unchecked Sendable: `remaining`, `startedAt`, `finishedAt` and `isFinished` are only
    // touched by end A's handler, which never runs concurrently with itself and whose runs
    // are ordered by the byte passing through the socket; the runner reads them after
    // `done.wait()` (or on the main thread, where the main-queue handlers run).
    // `closedCount` is only touched on the main thread (main-queue variant). `isTearingDown`
    // is atomic.
    let pair = SocketPair.make()
    let timedRoundTrips: Int
    var remaining: Int
    var startedAt = ClockReading(wall: 0, cpu: 0)
    var finishedAt = ClockReading(wall: 0, cpu: 0)
    var isFinished = false
    var closedCount = 0
    let done = Latch()
    let isTearingDown = Atomic<Bool>(false)

    init(roundTrips: Int, warmup: Int) {
      timedRoundTrips = roundTrips
      remaining = roundTrips + warmup
    }

    /// Sends the first byte from end A (the clock starts here when there is no warm-up).
    func start() {
      if remaining == timedRoundTrips { startedAt = ClockReading.start() }
      send(pair.a)
    }

    /// End B's handler: echo the byte back.
    @inline(__always)
    func echo() {
      if receive(pair.b) { send(pair.b) }
    }

    /// End A's handler: one round trip completed; start the next unless it was the last.
    @inline(__always)
    func returned() {
      guard receive(pair.a) else { return }
      remaining -= 1
      if remaining == timedRoundTrips { startedAt = ClockReading.start() }
      if remaining > 0 {
        send(pair.a)
        return
      }
      finishedAt = ClockReading.end()
      isFinished = true
      done.open()
    }

    /// Wall and CPU ns per timed round trip.
    var measurement: Measurement {
      Measurement(from: startedAt, to: finishedAt, operations: timedRoundTrips)
    }

    /// Cancels both sources (through `cancel`) after marking the run as tearing down.
    func tearDown(_ cancel: () -> Void) {
      // Sequentially consistent; pairs with the load in `receive` after the peer's close.
      isTearingDown.store(true, ordering: .sequentiallyConsistent)
      cancel()
    }

    /// Reads the byte in flight; false on a spurious wake-up or the hang-up of tear-down,
    /// traps on an I/O error or an unexpected hang-up.
    @inline(__always)
    private func receive(_ fd: Int32) -> Bool {
      var byte: UInt8 = 0
      let count = read(fd, &byte, 1)
      if count == 1 { return true }
      if count < 0 && (errno == EAGAIN || errno == EINTR) { return false }
      if count == 0 && isTearingDown.load(ordering: .sequentiallyConsistent) { return false }
      benchmarkFailure("ping-pong read on fd \(fd) returned \(count), errno \(errno)")
    }

    @inline(__always)
    private func send(_ fd: Int32) {
      var byte: UInt8 = 0x78
      let count = write(fd, &byte, 1)
      if count != 1 {
        benchmarkFailure("ping-pong write on fd \(fd) returned \(count), errno \(errno)")
      }
    }
  }

  // MARK: - two serial queues

  static func oursSerialPingPong(roundTrips: Int) -> Measurement {
    let run = PingPong(roundTrips: roundTrips, warmup: warmupRoundTrips)
    let (closedA, closedB) = (Latch(), Latch())
    let sourceA = oursReadSource(
      fd: run.pair.a, queue: Queue(label: "bench.source.a"), closed: closedA.open
    ) { run.returned() }
    let sourceB = oursReadSource(
      fd: run.pair.b, queue: Queue(label: "bench.source.b"), closed: closedB.open
    ) { run.echo() }
    sourceA.activate()
    sourceB.activate()
    run.start()
    run.done.wait()
    run.tearDown {
      sourceA.cancel()
      sourceB.cancel()
    }
    closedA.wait()
    closedB.wait()
    return run.measurement
  }

  /// An inactive read source on `fd` whose cancel handler closes `fd`, then calls `closed`.
  static func oursReadSource(
    fd: Int32, queue: Queue, closed: @escaping @Sendable () -> Void,
    _ handler: @escaping @Sendable () -> Void
  ) -> ReadSource {
    let source: ReadSource
    do {
      source = try ReadSource(fd: fd, queue: queue, label: "bench-pingpong")
    } catch {
      benchmarkFailure("ReadSource(fd: \(fd)) failed: \(error)")
    }
    source.setEventHandler(handler)
    source.setCancelHandler {
      _ = close(fd)
      closed()
    }
    return source
  }

  static func dispatchSerialPingPong(roundTrips: Int) -> Measurement {
    let run = PingPong(roundTrips: roundTrips, warmup: warmupRoundTrips)
    let (closedA, closedB) = (Latch(), Latch())
    let sourceA = dispatchReadSource(
      fd: run.pair.a, queue: DispatchQueue(label: "bench.source.a"), closed: closedA
    ) { run.returned() }
    let sourceB = dispatchReadSource(
      fd: run.pair.b, queue: DispatchQueue(label: "bench.source.b"), closed: closedB
    ) { run.echo() }
    sourceA.activate()
    sourceB.activate()
    run.start()
    run.done.wait()
    run.tearDown {
      sourceA.cancel()
      sourceB.cancel()
    }
    closedA.wait()
    closedB.wait()
    return run.measurement
  }

  static func dispatchReadSource(
    fd: Int32, queue: DispatchQueue, closed: Latch, _ handler: @escaping @Sendable () -> Void
  ) -> any DispatchSourceRead {
    let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
    source.setEventHandler(handler: handler)
    source.setCancelHandler {
      _ = close(fd)
      closed.open()
    }
    return source
  }
}
