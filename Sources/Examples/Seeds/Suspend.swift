import LoopDispatch

// GCD concept: suspending and resuming a queue (seed article 000).
//
// `suspend()` stops a queue from *starting* items; it never interrupts one that is running,
// so it takes effect between items. It is counted: every `suspend` needs its own `resume`,
// and the queue runs again only when the count is back to zero. Queued items wait, in order.

/// `Examples suspend`: a queue suspended between items, then resumed.
func runSuspend(_ arguments: [String]) -> Int32 {
  let queue = Queue(label: "photos")
  let ran = Guarded<[Int]>([])
  let firstDone = Semaphore(value: 0)
  let secondStarted = Semaphore(value: 0)

  // 1. Item 1 suspends its own queue: it still runs to the end; item 2 must wait.
  queue.async {
    say("item 1 runs and calls queue.suspend()")
    queue.suspend()
    ran.withLock { $0.append(1) }
    say("item 1 finishes (a suspend never interrupts a running item)")
    firstDone.signal()
  }
  for number in 2...3 {
    queue.async {
      if number == 2 { secondStarted.signal() }
      ran.withLock { $0.append(number) }
      say("item \(number) runs")
    }
  }
  firstDone.wait()

  // 2. While suspended nothing starts. The timed wait is the demonstration, not the
  //    synchronisation: item 2 cannot start, however long we wait.
  let whileSuspended = secondStarted.wait(timeout: .milliseconds(20))
  say("20 ms later: item 2 started? \(whileSuspended == .success); items run: \(ran.value)")

  // 3. Counted: suspended twice, one resume is not enough.
  queue.suspend()
  queue.resume()
  let afterOneResume = secondStarted.wait(timeout: .milliseconds(20))
  say("suspended twice, resumed once: item 2 started? \(afterOneResume == .success)")

  // 4. The last resume lets the held items run, in order.
  say("resume")
  queue.resume()
  queue.sync {}  // returns after every item queued before it
  say("items run: \(ran.value)")

  guard whileSuspended == .timedOut, afterOneResume == .timedOut, ran.value == [1, 2, 3] else {
    say("suspend: FAILED")
    return 1
  }
  return 0
}
