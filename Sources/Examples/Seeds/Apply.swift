import LoopDispatch
import Synchronization

// GCD concept: `dispatch_apply` with striding (seed article 000).
//
// `Queue.concurrentPerform(iterations:)` runs a loop body on several threads at once (the
// calling thread takes part) and returns only when every iteration has returned, like a
// `for` loop. When one iteration is tiny, the cost of handing it out dominates; striding
// gives each call a *chunk* of iterations, so the cost is paid per chunk instead.

/// `Examples apply`: a sum of squares in strided chunks across the pool.
func runApply(_ arguments: [String]) -> Int32 {
  let count = 1_000_000
  let stride = 125_000
  let chunks = (count + stride - 1) / stride
  let total = Atomic<Int>(0)
  let threads = Guarded<Set<String>>([])
  say("sum of i*i for i in 0..<\(count): \(chunks) chunks of \(stride), not \(count) calls")

  Queue.concurrentPerform(iterations: chunks) { chunk in
    let range = (chunk * stride)..<min(count, (chunk + 1) * stride)
    var partial = 0
    for index in range { partial &+= index &* index }
    total.wrappingAdd(partial, ordering: .relaxed)  // read only after concurrentPerform
    let thread = EventLoop.main.isInLoopThread ? "main thread" : currentThreadName()
    threads.withLock { _ = $0.insert(thread) }
    say("chunk \(chunk): \(range.lowerBound)..<\(range.upperBound)")
  }

  // concurrentPerform has returned, so every chunk has added its part.
  let sum = total.load(ordering: .relaxed)
  let expected = (count - 1) * count * (2 * count - 1) / 6
  say("concurrentPerform returned: every chunk is done")
  say("threads that took part: \(threads.value.sorted().joined(separator: ", "))")
  say("sum = \(sum), expected \(expected)")
  guard sum == expected else {
    say("apply: FAILED (wrong sum)")
    return 1
  }
  return 0
}
