import LoopDispatch

// GCD concept: a thread-safe singleton with `dispatch_once` (seed article 001).
//
// The naive lazy singleton checks "is there an instance yet?" and, if not, creates one. Two
// threads can both pass the check before either stores its instance: each access is safe,
// the check-then-create sequence is not. `Once` runs the creation exactly once; every other
// caller waits until it has finished and then sees the same instance.
//
// Both versions face the same forced race: `racers` threads released at the same moment.

private let racers = 8

/// The shared object; `number` tells instances apart.
private final class PhotoManager: Sendable {
  let number: Int
  init(number: Int) { self.number = number }
}

/// Check, then create: wrong, even though each step holds a lock.
private final class NaiveSingleton: Sendable {
  private let instance = Guarded<PhotoManager?>(nil)
  let created = AtomicCounter()

  /// `afterCheck` runs between the check and the creation: the demo holds every racer there
  /// until all have checked, the interleaving that bites by bad luck in real programs.
  func shared(afterCheck: () -> Void) -> PhotoManager {
    if let existing = instance.value { return existing }
    afterCheck()
    let fresh = PhotoManager(number: created.increment())
    instance.withLock { $0 = fresh }
    return fresh
  }
}

/// `Once` around the creation: right.
private final class OnceSingleton: @unchecked Sendable {
  // @unchecked Sendable: `instance` is written only inside `once.run`, and read after
  // `once.run` returns, which publishes the closure's writes to every caller.
  private let once = Once()
  private var instance: PhotoManager?
  let created = AtomicCounter()

  /// `whileCreating` runs inside the creation (the demo holds it there until every racer
  /// has reached `shared`).
  func shared(whileCreating: () -> Void) -> PhotoManager {
    once.run {
      whileCreating()
      instance = PhotoManager(number: created.increment())
    }
    return instance!
  }
}

/// `Examples once`: one instance, however many threads race for it.
func runOnce(_ arguments: [String]) -> Int32 {
  // 1. The naive singleton: every racer passes the check before any of them creates.
  say("1. naive check-then-create, \(racers) racers released together")
  let naive = NaiveSingleton()
  let allChecked = Rendezvous(parties: racers)
  runOnNewThreads(racers, named: "racer") { _ in
    let manager = naive.shared { allChecked.arriveAndWait() }
    say("got PhotoManager #\(manager.number)")
  }
  say("naive: \(naive.created.value) instances created by \(racers) racers")

  // 2. With Once: the creation waits until every racer has arrived at `shared`; they all
  //    wait for it and get the same instance.
  say("2. Once, \(racers) racers released together")
  let safe = OnceSingleton()
  let arrived = Semaphore(value: 0)
  let numbers = Guarded<Set<Int>>([])
  runOnNewThreads(racers, named: "racer") { _ in
    arrived.signal()
    let manager = safe.shared {
      for _ in 0..<racers { arrived.wait(timeout: .seconds(10)) }
      say("creating the instance; all \(racers) racers have reached shared()")
    }
    numbers.withLock { _ = $0.insert(manager.number) }
    say("got PhotoManager #\(manager.number)")
  }
  say("with Once: \(safe.created.value) instance created by \(racers) racers")

  guard naive.created.value == racers, safe.created.value == 1, numbers.value == [1] else {
    say("once: FAILED")
    return 1
  }
  return 0
}
