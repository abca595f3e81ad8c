import LoopDispatch

// GCD concept: dispatch groups (seed article 000).
//
// A group counts unfinished work. `wait` blocks the caller until the count drops to zero,
// like joining threads; a timed wait returns `.timedOut` instead of blocking for ever.
// `notify` asks for a closure to be submitted to a queue at that moment, blocking nobody:
// here the main queue, while the main thread keeps running its event loop.

/// `Examples group`: wait, a timed wait that gives up, and notify.
func runGroup(_ arguments: [String]) -> Int32 {
  // 1. wait: three downloads on a global queue, joined.
  say("1. three downloads in a group; this thread waits for all of them")
  let downloads = Group()
  let downloaded = Guarded<[String]>([])
  for name in ["a.jpg", "b.jpg", "c.jpg"] {
    Queue.global().async(group: downloads) {
      say("download \(name)")
      downloaded.withLock { $0.append(name) }
    }
  }
  let joined = downloads.wait(timeout: .seconds(10))
  say("wait returned \(joined): \(downloaded.value.count) of 3 downloads finished")

  // 2. A timed wait gives up while a task is held (here: behind a semaphore).
  say("2. a timed wait on a group whose task is still held")
  let held = Group()
  let release = Semaphore(value: 0)
  Queue.global().async(group: held) {
    release.wait()
    say("held task released")
  }
  let early = held.wait(timeout: .milliseconds(20))
  say("wait(timeout: 20 ms) returned \(early)")
  release.signal()
  let late = held.wait(timeout: .seconds(10))
  say("after the release, wait returned \(late)")

  // 3. notify: enter/leave by hand around work that ends later; the notification runs on
  //    the main queue once the last one leaves.
  say("3. three uploads; notify on the main queue when all are done")
  let uploads = Group()
  let uploaded = AtomicCounter()
  let notifiedAfter = Guarded<Int?>(nil)
  for number in 1...3 {
    uploads.enter()
    Queue.global().after(.milliseconds(5 * number)) {
      say("upload \(number) done")
      uploaded.increment()
      uploads.leave()
    }
  }
  uploads.notify(queue: .main) {
    say("notify: \(uploaded.value) of 3 uploads done")
    notifiedAfter.withLock { $0 = uploaded.value }
  }
  say("notify registered; the main thread runs its loop meanwhile")
  Queue.runMain(until: { notifiedAfter.value != nil }, deadline: .now + .seconds(10))

  guard joined == .success, early == .timedOut, late == .success, notifiedAfter.value == 3
  else {
    say("group: FAILED")
    return 1
  }
  return 0
}
