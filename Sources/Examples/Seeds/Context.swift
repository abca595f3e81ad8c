import LoopDispatch

// GCD concept: a queue's context data and finalizer (seed article 000,
// `dispatch_set_context` and `dispatch_set_finalizer_f`).
//
// A queue can carry one value, its context, that the work running on it reads through
// `Queue.current`. The finalizer receives that value when the queue goes away: after the
// last reference is dropped *and* every item submitted before has run, since queued work
// keeps its queue alive. That is the place to release what the context holds.

/// What the queue's work shares: a name and a request count.
private final class ConnectionState: Sendable {
  let name: String
  let requests = AtomicCounter()
  init(name: String) { self.name = name }
}

/// `Examples context`: context data read by each item, finalizer after the last one.
func runContext(_ arguments: [String]) -> Int32 {
  let events = Guarded<[String]>([])
  let finalized = Semaphore(value: 0)
  let gate = Semaphore(value: 0)

  do {
    let queue = Queue(label: "connection")
    queue.context = ConnectionState(name: "client 42")
    queue.setFinalizer { context in
      let state = context as? ConnectionState
      say("finalizer: \(state?.name ?? "?") served \(state?.requests.value ?? 0) requests")
      events.withLock { $0.append("finalizer") }
      finalized.signal()
    }
    for number in 1...3 {
      queue.async {
        if number == 1 { gate.wait() }  // hold the queue until its last reference is gone
        let state = Queue.current?.context as? ConnectionState
        let count = state?.requests.increment() ?? 0
        say("item \(number): context is \(state?.name ?? "nil"), request \(count)")
        events.withLock { $0.append("item \(number)") }
      }
    }
    say("3 items queued; dropping the last reference to the queue")
  }
  say("the queue is released by its owner while its items are still queued")
  gate.signal()

  let result = finalized.wait(timeout: .seconds(10))
  let order = events.value
  say("order: \(order.joined(separator: ", "))")
  guard result == .success, order == ["item 1", "item 2", "item 3", "finalizer"] else {
    say("context: FAILED (the finalizer must run once, after the last item)")
    return 1
  }
  return 0
}
