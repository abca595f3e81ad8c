import LoopDispatch

// GCD concept: `dispatch_after` (seed article 001).
//
// `after` is a delayed `async`: the work is submitted to the queue no earlier than the
// deadline (LoopDispatch timers never fire early; they may be a little late). You cannot make
// it run sooner, but you can cancel it until it fires. Main-queue timers live on the main
// event loop; timers of other queues live on the runtime's service thread, which only
// submits the work when they fire.

/// `Examples after`: a delayed prompt, and a reminder cancelled before it fires.
func runAfter(_ arguments: [String]) -> Int32 {
  let start = Deadline.now
  @Sendable func elapsed() -> Int { Int((Deadline.now - start).saturatingNanoseconds / 1_000_000) }
  let promptAt = Guarded<Int?>(nil)
  let reminderRan = AtomicFlag()
  let finished = AtomicFlag()

  say("schedule: a tap at 20 ms, a refresh at 30 ms, a prompt at 40 ms, a reminder at 80 ms")
  let reminder = Queue.main.after(.milliseconds(80)) {
    reminderRan.set()
    say("reminder: still there? (this should have been cancelled)")
  }
  Queue.main.after(.milliseconds(20)) {
    say("user tapped at \(elapsed()) ms: cancel the reminder")
    reminder.cancel()
  }
  Queue.global().after(.milliseconds(30)) {
    say("background refresh at \(elapsed()) ms (asked for 30 ms)")
  }
  Queue.main.after(.milliseconds(40)) {
    let now = elapsed()
    say("prompt \"Tap + to add a photo\" at \(now) ms (asked for 40 ms: never early)")
    promptAt.withLock { $0 = now }
  }
  // Keep the loop running past the reminder's deadline, to show it never fires.
  Queue.main.after(.milliseconds(100)) { finished.set() }
  Queue.runMain(until: { finished.isSet }, deadline: .now + .seconds(10))

  say("reminder cancelled: \(reminder.isCancelled), ran: \(reminderRan.isSet)")
  guard let prompt = promptAt.value, prompt >= 40, reminder.isCancelled, !reminderRan.isSet
  else {
    say("after: FAILED")
    return 1
  }
  return 0
}
