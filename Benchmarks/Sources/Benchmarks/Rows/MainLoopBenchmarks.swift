import CRawLibevent
import Dispatch
import Glibc
import MainLoop

/// The reactor on its own: MainLoop's `EventLoop` against raw libevent (fd readiness) and
/// against a Dispatch serial queue (posting closures from another thread).
enum MainLoopBenchmarks {
  static let pingPongRoundTrips = 100_000
  static let executePosts = 10_000_000

  static var group: BenchmarkGroup {
    BenchmarkGroup(
      name: "mainloop",
      benchmarks: [
        Benchmark(
          key: "pingpong",
          name: "fd ping-pong, 100k round trips (one loop)",
          unit: "ns/round trip", direction: .lowerIsBetter, rivalName: "raw libevent",
          target: .ratioAtMost(1.2, "raw libevent"),
          ours: { loopPingPong(roundTrips: pingPongRoundTrips) },
          rival: { rawLibeventPingPong(roundTrips: pingPongRoundTrips) }),
        Benchmark(
          key: "execute",
          name: "cross-thread execute, 10M posts from one producer",
          unit: "M posts/s", direction: .higherIsBetter, rivalName: "Dispatch",
          target: .oursAtLeast(20, "≥ 20M posts/s"),
          ours: { loopExecute(posts: executePosts) },
          rival: { dispatchAsync(posts: executePosts) },
          derived: [
            DerivedFigure(
              unit: "ns/post", direction: .lowerIsBetter,
              target: .oursAtMost(50, "≤ 50 ns/post"), convert: { 1_000 / $0 })
          ]),
      ])
  }

  // MARK: - fd ping-pong

  /// Counters of one ping-pong run.
  final class PingPongState: @unchecked Sendable {
    // @unchecked Sendable: only touched on the loop thread (the handlers run there, and the
    // benchmark thread is the loop thread).
    let roundTrips: Int
    var completed = 0
    var done = false

    init(roundTrips: Int) { self.roundTrips = roundTrips }
  }

  /// The protocol of `raw_libevent_pingpong`, with MainLoop's fd watches on a fresh loop bound
  /// to the calling thread. Returns wall and CPU ns per round trip.
  static func loopPingPong(roundTrips: Int) -> Measurement {
    let loop = EventLoop(name: "bench")
    // Bind the loop to this thread without running a turn, so the watches register at once
    // rather than through the inbox on the first timed turn.
    _ = loop.run(until: { true })
    let pair = SocketPair.make()
    let state = PingPongState(roundTrips: roundTrips)
    let (a, b) = (pair.a, pair.b)
    let watchA: FDWatch
    let watchB: FDWatch
    do {
      watchA = try loop.watch(fd: a, for: .read) {
        var byte: UInt8 = 0
        guard read(a, &byte, 1) == 1 else { return }  // Spurious wake-up.
        state.completed += 1
        if state.completed == state.roundTrips {
          state.done = true
          return
        }
        _ = write(a, &byte, 1)
      }
      watchB = try loop.watch(fd: b, for: .read) {
        var byte: UInt8 = 0
        guard read(b, &byte, 1) == 1 else { return }
        _ = write(b, &byte, 1)
      }
    } catch {
      benchmarkFailure("watch failed: \(error)")
    }
    var byte: UInt8 = 0x78
    let start = ClockReading.start()
    if write(a, &byte, 1) != 1 {
      benchmarkFailure("ping-pong kick-off write failed: errno \(errno)")
    }
    let finished = loop.run(until: { state.done }, deadline: .now + .seconds(60))
    let end = ClockReading.end()
    // On the loop thread, so the watches are removed before `cancel` returns.
    watchA.cancel()
    watchB.cancel()
    pair.close()
    if !finished {
      benchmarkFailure("MainLoop ping-pong stalled after \(state.completed) round trips")
    }
    return Measurement(from: start, to: end, operations: roundTrips)
  }

  /// `raw_libevent_pingpong` in C; wall and CPU ns per round trip.
  static func rawLibeventPingPong(roundTrips: Int) -> Measurement {
    var cpu = 0.0
    let nanoseconds = raw_libevent_pingpong(Int32(roundTrips), &cpu)
    if nanoseconds < 0 { benchmarkFailure("raw libevent ping-pong failed: errno \(errno)") }
    return Measurement(wall: nanoseconds, cpuPerOperation: cpu)
  }

  // MARK: - cross-thread execute

  /// Counts posted closures on the consumer and notes when the last one ran.
  ///
  /// The posted closures capture nothing (they reach the counter through ``active``): a
  /// capture would make the producer retain, and the consumer release, one shared object per
  /// post, and that cache-line ping-pong would dominate what is measured. So a post costs only
  /// what the runtime itself does.
  final class PostCounter: @unchecked Sendable {
    // @unchecked Sendable: `count` and `finishedAt` are only touched by the single consumer
    // (the loop thread, or the serial queue); the producer reads `finishedAt` only after
    // `onFinish` has let it go on (thread join or semaphore), which orders the accesses.

    /// The run in progress. Set by the producer before its first post and cleared after the
    /// consumer finished; the post itself orders the write before the consumer's reads.
    nonisolated(unsafe) static var active: PostCounter?

    /// The body of every posted closure.
    static func tickActive() { active.unsafelyUnwrapped.tick() }

    let total: Int
    var count = 0
    var finishedAt: UInt64 = 0
    /// Runs on the consumer once the last closure has counted.
    var onFinish: @Sendable () -> Void = {}

    init(total: Int) { self.total = total }

    @inline(__always)
    func tick() {
      count += 1
      if count == total {
        finishedAt = Stopwatch.now()
        onFinish()
      }
    }
  }

  /// `posts` closures from this thread onto a loop running on its own thread; the time from
  /// the first post until the last closure ran. Returns millions of posts per second.
  static func loopExecute(posts: Int) -> Double {
    let loop = EventLoop(name: "bench-exec")
    let thread = BenchThread.spawn { loop.run() }
    let running = Flag()
    loop.execute { running.raise() }
    running.wait()  // The loop thread is up and idle in epoll_wait.

    let counter = PostCounter(total: posts)
    counter.onFinish = { loop.stop() }
    PostCounter.active = counter
    defer { PostCounter.active = nil }
    let start = Stopwatch.now()
    for _ in 0..<posts {
      loop.execute { PostCounter.tickActive() }
    }
    thread.join()  // `run()` returns after the turn that ran the last closure.
    if counter.count != posts { benchmarkFailure("loop ran \(counter.count) of \(posts) posts") }
    return Double(posts) * 1_000 / Double(counter.finishedAt - start)
  }

  /// The rival: the same closures `async`ed onto a Dispatch serial queue from this thread.
  static func dispatchAsync(posts: Int) -> Double {
    let queue = DispatchQueue(label: "bench-exec")
    let done = DispatchSemaphore(value: 0)
    let counter = PostCounter(total: posts)
    counter.onFinish = { done.signal() }
    PostCounter.active = counter
    defer { PostCounter.active = nil }
    let start = Stopwatch.now()
    for _ in 0..<posts {
      queue.async { PostCounter.tickActive() }
    }
    done.wait()
    if counter.count != posts { benchmarkFailure("queue ran \(counter.count) of \(posts) posts") }
    return Double(posts) * 1_000 / Double(counter.finishedAt - start)
  }
}
