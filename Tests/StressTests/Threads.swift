import Glibc
import TestSupport

/// Runs `body(index)` on `count` plain pthreads, released together once all have started,
/// and returns when all have finished.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
  let arrived = Counter()
  let start = Latch()
  let threads = (0..<count).map { index in
    startThread {
      if arrived.increment() == count { start.open() }
      precondition(start.wait(seconds: 60), "threads did not start")
      body(index)
    }
  }
  for thread in threads { pthread_join(thread, nil) }
}

/// A small deterministic pseudo-random generator (xorshift64*), one per thread.
struct StressRandom {
  private var state: UInt64

  init(seed: Int) { state = 0x9E37_79B9_7F4A_7C15 &* UInt64(seed + 1) }

  /// A value in `0..<bound`.
  mutating func next(_ bound: Int) -> Int {
    state ^= state >> 12
    state ^= state << 25
    state ^= state >> 27
    return Int((state &* 0x2545_F491_4F6C_DD1D) >> 33) % bound
  }
}
