import LoopDispatch

// GCD concept: a serial queue held shut by a semaphore (seed article 003).
//
// Operations may be requested before the thing they need has finished initialising. Rather
// than storing them in a side list, submit them all to one serial queue whose *first* item
// waits on a `Semaphore(value: 0)`. Until initialisation signals, that item blocks the queue,
// so every operation behind it is held, none lost; after the signal they run in submission
// order. (The waiting item occupies one pool thread while it waits: fine for a short
// initialisation; the pool adds a worker if all of them are blocked.)

/// `Examples gate`: operations held behind an unfinished initialisation.
func runGate(_ arguments: [String]) -> Int32 {
  let operations = Queue(label: "operations")
  let initialized = Semaphore(value: 0)
  let ran = Guarded<[Int]>([])

  // 1. The gate: the first item on the serial queue waits for initialisation.
  operations.async {
    say("gate: waiting for initialization (the queue is held behind this item)")
    initialized.wait()
    say("gate: initialization signalled; operations run so far: \(ran.value.count)")
  }

  // 2. Operations arrive before initialisation is done: queued, not run, not lost.
  let count = 5
  for number in 1...count {
    say("queue operation \(number)")
    operations.async {
      ran.withLock { $0.append(number) }
      say("operation \(number) runs")
    }
  }

  // 3. Initialisation finishes later, elsewhere (a timer only spaces the demo out; the
  //    ordering comes from the semaphore and the serial queue).
  Queue.global().after(.milliseconds(30)) {
    say("initialization finished (operations run so far: \(ran.value.count)); signalling")
    initialized.signal()
  }

  operations.sync {}  // returns after every item queued before it
  let order = ran.value
  say("operations ran in order \(order.map(String.init).joined(separator: " "))")
  guard order == Array(1...count) else {
    say("gate: FAILED (expected 1 through \(count), each once, in order)")
    return 1
  }
  say("all \(count) held operations ran in submission order, none lost")
  return 0
}
