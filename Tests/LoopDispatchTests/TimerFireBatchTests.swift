import Glibc
import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import LoopDispatch

/// The pieces of a fired `after` timer's way to its queue: C-function items
/// (`dispatch_after_f`), the per-pass batch (`TimerFireBatch`) and the pool's chain append
/// (`InjectionQueue.pushChain`).
@Suite struct TimerFireBatchTests {
  /// What a C-function item calls: the closure of the `Probe` its context points to.
  private final class Probe: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }

    /// A call of `run` with this probe as context. The caller keeps the probe alive until
    /// the call has run.
    var call: CFunctionCall {
      CFunctionCall(
        function: { context in
          // Safe: the context is an unretained probe its test keeps alive (see above).
          Unmanaged<Probe>.fromOpaque(context!).takeUnretainedValue().body()
        },
        context: Unmanaged.passUnretained(self).toOpaque())
    }
  }

  /// One flush submits each queue's items in the order they were added, closures and C
  /// functions alike, whatever the interleaving of queues.
  @Test func aFlushKeepsEachQueuesOrderAcrossInterleavedQueuesAndKinds() {
    let serials = (0..<2).map { Queue(label: "batch-serial-\($0)") }
    let concurrent = Queue(label: "batch-concurrent", attributes: .concurrent)
    let seen = serials.map { _ in Shared([Int]()) }  // Each written on its serial queue only.
    let perQueue = 40
    let total = perQueue * (serials.count + 2)
    let finished = Counter()
    let done = Semaphore(value: 0)
    @Sendable func finish() { if finished.increment() == total { done.signal() } }
    var probes: [Probe] = []  // Kept alive until every item ran.
    let batch = TimerFireBatch()
    for step in 0..<perQueue {
      for (index, queue) in serials.enumerated() {
        let body: @Sendable () -> Void = {
          seen[index].value.append(step)
          finish()
        }
        if (step + index) % 2 == 0 {
          batch.add(.closure(body), to: queue)
        } else {
          let probe = Probe(body)
          probes.append(probe)
          batch.add(.function(probe.call), to: queue)
        }
      }
      let probe = Probe(finish)
      probes.append(probe)
      batch.add(.function(probe.call), to: Queue.global())
      batch.add(.closure(finish), to: concurrent)
    }
    batch.flush()
    #expect(done.wait(timeout: .seconds(30)) == .success)
    for index in serials.indices {
      // Read after `done`: every append happened before its `finished` increment.
      #expect(seen[index].value == Array(0..<perQueue))
    }
    // A second flush with nothing added submits nothing; one more item still goes through.
    batch.flush()
    let again = Latch()
    batch.add(.closure { again.open() }, to: serials[0])
    batch.flush()
    #expect(again.wait())
    #expect(finished.current == total)
    withExtendedLifetime(probes) {}
  }

  /// `dispatch_after_f`'s form: the function runs once on the queue, no earlier than the
  /// deadline; a passed deadline runs it at once; a cancelled one never runs it.
  @Test func aCFunctionTimerFiresOnceAndACancelledOneNever() {
    let queue = Queue(label: "after-c-function")
    let runs = Counter()
    let early = Counter()
    let done = Semaphore(value: 0)
    let deadline = Deadline.now + .milliseconds(5)
    let timed = Probe {
      if Deadline.now < deadline { early.increment() }
      if Queue.current !== queue { early.increment() }
      runs.increment()
      done.signal()
    }
    let past = Probe {
      runs.increment()
      done.signal()
    }
    let cancelled = Probe { runs.increment() }
    queue.after(deadline: deadline, timed.call)
    queue.after(deadline: .now - .seconds(1), past.call)
    // Far enough that the cancel below comes first however slow the machine (or a
    // sanitizer) makes these lines.
    let handle = queue.after(deadline: .now + .seconds(60), cancelled.call)
    handle.cancel()
    #expect(done.wait(timeout: .seconds(30)) == .success)
    #expect(done.wait(timeout: .seconds(30)) == .success)
    // A later timer on the same serial queue runs after anything the others submitted.
    let witness = Latch()
    queue.after(deadline: deadline + .milliseconds(10)) { witness.open() }
    #expect(witness.wait())
    #expect(runs.current == 2)
    #expect(early.current == 0)
    withExtendedLifetime((timed, past, cancelled)) {}
  }

  /// A timer is allocated on the scheduling thread and freed on the service thread: at 120
  /// bytes or less glibc frees it into a fastbin, without the arena's lock (see
  /// `DelayedWork`). A stored property added to `LoopTimer` or `DelayedWork` must keep that.
  @Test func aDelayedWorkFitsGlibcsFastbins() {
    let loop = EventLoop(name: "size", clock: .virtual())
    let delayed = Queue.global().after(deadline: .distantFuture, on: loop) {}
    // Safe: the object is alive (held by `delayed`); its address is the start of its heap
    // block, which is all `malloc_usable_size` reads.
    let usable = mallocUsableSize(Unmanaged.passUnretained(delayed).toOpaque())
    #expect(usable <= 120)
    delayed.cancel()
  }

  /// A chain appended in one push sits between single pushes in order, counted at once.
  @Test func aChainPushKeepsOrderBetweenSinglePushes() {
    let log = Shared([Int]())  // Touched by this thread only.
    func node(_ value: Int) -> JobNodePointer {
      let node = NodeCache.take()
      node.pointee.job = .childItem { log.value.append(value) }
      return node
    }
    chainTestLane.push(node(0))
    let chain = (1...4).map(node)
    for (earlier, later) in zip(chain, chain.dropFirst()) {
      earlier.pointee.next.store(later.nodeBits, ordering: .relaxed)
    }
    chainTestLane.pushChain(first: chain[0], last: chain[3], count: 4)
    chainTestLane.push(node(5))
    #expect(chainTestLane.count == 6)
    var taken: [JobNodePointer] = []
    while true {
      // The first job comes back; the others of the take go to `overflow`, in order.
      var rest: [JobNodePointer] = []
      guard let first = chainTestLane.take(limit: 2, overflow: { rest.append($0) }) else { break }
      taken.append(first)
      taken.append(contentsOf: rest)
    }
    #expect(chainTestLane.count == 0)
    for node in taken {
      node.takeJob().0.run()
      NodeCache.give(node)
    }
    #expect(log.value == [0, 1, 2, 3, 4, 5])
  }
}

/// The lane of `aChainPushKeepsOrderBetweenSinglePushes`, global like the pool's own (an
/// injection queue's dummy node is never freed: a dropped local one would be a leak to
/// `make test-leaks`). The test leaves it empty.
private let chainTestLane = InjectionQueue()

/// glibc's `malloc_usable_size` (not in the Glibc module's headers).
@_silgen_name("malloc_usable_size")
private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int
