import LoopDispatch

// GCD concept: the classic deadlock (seed articles 000 and 001).
//
// `sync` waits for its closure to finish, and a serial queue runs one item at a time. Calling
// `sync` onto the queue you are already running would wait for yourself for ever. GCD hangs
// (or crashes without a word); LoopDispatch notices and traps at once with one line naming
// the queue:
//
//     BUG IN CLIENT OF LOOPDISPATCH: sync onto queue "deadlock.demo" already owned by this
//     thread (deadlock)
//
// This subcommand is *expected* to crash. `Examples tour` runs it as a child process.

/// `Examples deadlock`: traps on purpose.
func runDeadlock(_ arguments: [String]) -> Int32 {
  let queue = Queue(label: "deadlock.demo")
  say("about to call queue.sync { queue.sync {} } on serial queue \"\(queue.label)\"")
  say("expect: BUG IN CLIENT OF LOOPDISPATCH: sync onto queue \"\(queue.label)\" ... then a trap")
  flushOutput()  // the trap skips the normal exit, which would flush standard output
  queue.sync {
    say("inside the outer sync; now the inner sync onto the same queue")
    flushOutput()
    queue.sync {}
  }
  say("deadlock: FAILED (the inner sync returned)")
  return 1
}
