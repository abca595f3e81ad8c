import LoopDispatch

/// The process main thread is "on" the main queue in any context (GCD's queue.h), before
/// `runMain` too: `Queue.current` is the main queue, `Queue.main.isCurrent` holds, and a
/// main-queue specific is found; the main queue ignores suspend, unbalanced resume and
/// contexts.
func mainThreadQueueScenario() {
  let key = SpecificKey<Int>()
  Queue.main.setSpecific(key: key, value: 2)
  if Queue.current !== Queue.main { fail("Queue.current on the main thread is not main") }
  if !Queue.main.isCurrent { fail("Queue.main.isCurrent is false on the main thread") }
  if Queue.getSpecific(key: key) != 2 { fail("a main-queue specific is not found") }
  let other = Queue(label: "elsewhere")
  if other.sync(execute: { Queue.main.isCurrent }) == false {
    fail("inside a sync from the main thread, the main thread is still on the main queue")
  }
  Queue.main.context = 5
  if Queue.main.context != nil { fail("the main queue kept a context") }
  Queue.main.suspend()
  let ran = MainConfined(false)
  Queue.main.async { ran.value = true }
  if !Queue.runMain(until: { ran.value }, deadline: .now + .seconds(10)) {
    fail("a suspend held the main queue back")
  }
  Queue.main.resume()
  Queue.main.resume()  // Unbalanced: no effect, no trap.
}
