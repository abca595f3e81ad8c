import LoopDispatch

// GCD concept: a completion closure delivered on the caller's queue (seed article 000,
// `average_async`).
//
// The work runs on a global queue; the result goes back with `async` onto a queue the
// *caller* chose. Here that is the main queue, drained by the main event loop on the process
// main thread, so the completion never runs on a worker and needs no lock. (C code retains the
// caller's queue by hand until the completion is submitted; the closure's capture does it.)

/// Computes the average of `data` on a global queue, then calls `completion` on `queue`.
/// Returns at once.
private func averageAsync(
  _ data: [Int], queue: Queue, completion: @escaping @Sendable (Int) -> Void
) {
  Queue.global().async {
    say("averaging \(data.count) numbers")
    let average = data.reduce(0, +) / max(1, data.count)
    queue.async { completion(average) }
  }
}

/// `Examples average`: async work, completion on the main queue.
func runAverage(_ arguments: [String]) -> Int32 {
  let data = Array(1...1_000)
  let result = Guarded<Int?>(nil)
  let onMainThread = AtomicFlag()
  averageAsync(data, queue: .main) { average in
    if EventLoop.main.isInLoopThread { onMainThread.set() }
    say("completion: average = \(average), on the main thread: \(EventLoop.main.isInLoopThread)")
    result.withLock { $0 = average }
  }
  say("averageAsync returned at once; running the main loop until the completion arrives")
  Queue.runMain(until: { result.value != nil }, deadline: .now + .seconds(10))

  guard let average = result.value, average == 500, onMainThread.isSet else {
    say("average: FAILED (expected 500, delivered on the main thread)")
    return 1
  }
  say("the main loop returned after the completion")
  return 0
}
