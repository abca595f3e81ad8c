import Glibc
import LoopDispatch
import Synchronization

// Scenarios that need the process main thread. Each prints "ok <name>" and exits 0, or
// prints "FAIL <name>: <why>" and exits 1. A misuse scenario traps instead.

let scenarios: [String: () -> Void] = [
  "main-order": mainOrder,
  "main-sync": mainSync,
  "main-sync-from-main": mainSyncFromMain,
  "main-after": mainAfter,
  "main-fairness": mainFairness,
  "main-run-forever": mainRunForever,
  "main-gate": mainGate,
  "main-actor": mainActorScenario,
  "dispatch-main-queue": dispatchMainQueueScenario,
  "main-actor-no-install": mainActorWithoutInstallScenario,
  "main-source-no-spin": mainSourceNoSpin,
  "idle": idleScenario,
  "idle-cpu": idleCPUScenario,
  "main-stall": mainStallScenario,
  "source-main-read": sourceMainRead,
  "source-main-ping-pong": sourceMainPingPong,
  "source-main-data-and-timers": sourceMainDataAndTimers,
  "source-main-signal": sourceMainSignal,
  "thread-failure": threadFailureScenario,
  "overcommit-thread-failure": overcommitThreadFailureScenario,
  "reused-number-main": reusedNumberMainScenario,
  "reused-number-dup-main": reusedNumberDupMainScenario,
  "reused-number-streaming-main": reusedNumberStreamingMainScenario,
  "reused-number-slow-main": reusedNumberSlowMainScenario,
  "main-chain": mainChainScenario,
  "main-post": mainPostScenario,
  "signal-mix": signalMixScenario,
  "retarget-main": retargetMainScenario,
  "source-multiplex-main": sourceMultiplexMainScenario,
  "main-thread-queue": mainThreadQueueScenario,
  "source-main-process": sourceMainProcessScenario,
  "file-source-main": fileSourceMainScenario,
  "pool-strand-rounds": poolStrandRoundsScenario,
  "pool-strand-held": poolStrandHeldScenario,
  "pool-chaos": poolChaosScenario,
  "pool-untakeable": poolUntakeableScenario,
]

guard CommandLine.arguments.count == 2, let scenario = scenarios[CommandLine.arguments[1]] else {
  print("usage: LoopDispatchTestHost <\(scenarios.keys.sorted().joined(separator: "|"))>")
  exit(2)
}
scenario()
print("ok \(CommandLine.arguments[1])")
exit(0)

func fail(_ why: String) -> Never {
  print("FAIL \(CommandLine.arguments[1]): \(why)")
  exit(1)
}

/// Mutable state confined to the main queue by each scenario.
final class MainConfined<Value>: @unchecked Sendable {
  // @unchecked Sendable: only touched on the main queue (checked where it matters).
  var value: Value
  init(_ value: Value) { self.value = value }
}

/// Items posted from four threads run on the main thread, in order per producer.
func mainOrder() {
  let producers = 4
  let perProducer = 10_000
  let lastSeen = MainConfined([Int](repeating: -1, count: producers))
  let problems = MainConfined([String]())
  let ran = MainConfined(0)
  for producer in 0..<producers {
    Queue.global().async {
      for index in 0..<perProducer {
        Queue.main.async {
          if !EventLoop.main.isInLoopThread { problems.value.append("not on the main thread") }
          if Queue.current !== Queue.main { problems.value.append("Queue.current is not main") }
          if lastSeen.value[producer] != index - 1 { problems.value.append("out of order") }
          lastSeen.value[producer] = index
          ran.value += 1
        }
      }
    }
  }
  let total = producers * perProducer
  guard Queue.runMain(until: { ran.value == total }, deadline: .now + .seconds(60)) else {
    fail("only \(ran.value) of \(total) items ran")
  }
  if let first = problems.value.first { fail(first) }
}

/// `sync` onto the main queue from a worker runs on the main thread and returns the value.
func mainSync() {
  let results = MainConfined([String]())
  let finished = MainConfined(false)
  Queue.global().async {
    let (onMain, value) = Queue.main.sync { (EventLoop.main.isInLoopThread, 6 * 7) }
    let current = Queue.main.sync { Queue.current === Queue.main }
    struct Thrown: Error {}
    var rethrew = false
    do {
      try Queue.main.sync { () throws(Thrown) in throw Thrown() }
    } catch {
      rethrew = true
    }
    let summary = "\(onMain) \(value) \(current) \(rethrew) \(EventLoop.main.isInLoopThread)"
    Queue.main.async {
      results.value.append(summary)
      finished.value = true
    }
  }
  guard Queue.runMain(until: { finished.value }, deadline: .now + .seconds(30)) else {
    fail("the worker never finished")
  }
  if results.value != ["true 42 true true false"] { fail("got \(results.value)") }
}

/// `sync` onto the main queue from the main thread traps instead of hanging.
func mainSyncFromMain() {
  Queue.main.sync {}
  fail("returned")
}

/// Main-queue timers fire on the main thread, never early; cancelled ones never run and
/// release their captures at once; zero delay behaves like async.
func mainAfter() {
  final class Token: Sendable {}
  let fired = MainConfined(0)
  let problems = MainConfined([String]())
  for milliseconds in [0, 1, 2, 5, 10, 20] {
    let deadline = Deadline.now + .milliseconds(milliseconds)
    Queue.main.after(deadline: deadline) {
      if Deadline.now < deadline { problems.value.append("fired early") }
      if !EventLoop.main.isInLoopThread { problems.value.append("not on the main thread") }
      fired.value += 1
    }
  }
  weak var weakToken: Token?
  let cancelled: DelayedWork
  do {
    let token = Token()
    weakToken = token
    cancelled = Queue.main.after(.milliseconds(3)) {
      _ = token
      problems.value.append("a cancelled timer ran")
    }
  }
  cancelled.cancel()
  if weakToken != nil { fail("cancel did not release the closure") }
  let never = Queue.main.after(deadline: .distantFuture) { problems.value.append("distantFuture") }
  guard Queue.runMain(until: { fired.value == 6 }, deadline: .now + .seconds(30)) else {
    fail("only \(fired.value) timers fired")
  }
  Queue.runMain(until: .now + .milliseconds(10))
  never.cancel()
  if let first = problems.value.first { fail(first) }
}

/// A flood of main-queue work does not starve an fd watch on the same loop.
func mainFairness() {
  var fds: [Int32] = [0, 0]
  guard pipe(&fds) == 0 else { fail("pipe") }
  let (readEnd, writeEnd) = (fds[0], fds[1])
  let itemsRun = MainConfined(0)
  let itemsAtRead = MainConfined(-1)
  let total = 200_000
  for _ in 0..<total { Queue.main.async { itemsRun.value += 1 } }
  var byte: UInt8 = 1
  _ = write(writeEnd, &byte, 1)
  let watch: FDWatch
  do {
    watch = try EventLoop.main.watch(fd: readEnd, for: .read) {
      var sink: UInt8 = 0
      _ = read(readEnd, &sink, 1)
      if itemsAtRead.value < 0 { itemsAtRead.value = itemsRun.value }
    }
  } catch {
    fail("\(error)")
  }
  guard Queue.runMain(until: { itemsRun.value == total }, deadline: .now + .seconds(60)) else {
    fail("main queue did not drain")
  }
  watch.cancel {
    close(readEnd)
    close(writeEnd)
  }
  // The watch was ready from the start: it must be served long before the flood ends.
  if itemsAtRead.value < 0 || itemsAtRead.value >= total / 2 {
    fail("fd served after \(itemsAtRead.value) of \(total) items")
  }
}

/// `runMain()` never returns; stopping the loop ends the process with status 0.
func mainRunForever() {
  Queue.main.async {
    print("ok main-run-forever")
    EventLoop.main.stop()
  }
  Queue.runMain()
}

/// The seed's gate: a serial queue's first item waits on a semaphore of value 0; the held
/// items run in order once initialisation (on the main queue) signals.
func mainGate() {
  let gate = Semaphore(value: 0)
  let queue = Queue(label: "gated")
  let log = MainConfined([String]())
  let done = MainConfined(false)
  queue.async { gate.wait() }
  for index in 0..<5 {
    queue.async { Queue.main.async { log.value.append("op \(index)") } }
  }
  queue.async { Queue.main.async { done.value = true } }
  Queue.main.after(.milliseconds(5)) {
    log.value.append("initialised")
    gate.signal()
  }
  guard Queue.runMain(until: { done.value }, deadline: .now + .seconds(30)) else {
    fail("held operations never ran")
  }
  let expected = ["initialised"] + (0..<5).map { "op \($0)" }
  if log.value != expected { fail("order \(log.value)") }
}
