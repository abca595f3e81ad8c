import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// The block-chained inbox behind `execute`: hand-over between blocks under contention, exact
/// boundaries, and release of unrun closures.
@Suite struct InboxTests {
  /// Four producers racing over many block boundaries: every post runs exactly once, in order
  /// per producer. A broken hand-over (a lost link, a slot claimed twice, a block freed early)
  /// shows up as a gap, a repeat, a stall or a sanitizer report.
  @Test func fourProducersCrossManyBlocks() {
    let producers = 4
    let perProducer = scaled(300_000)
    let total = producers * perProducer
    let lastSeen = LoopConfined([Int](repeating: -1, count: producers))
    let outOfOrder = LoopConfined(0)
    let ran = LoopConfined(0)
    // A small batch makes the loop stop mid-block and come back, often while producers write.
    let loop = EventLoop(name: "inbox-stress", batchLimit: 100)
    let threads = (0..<producers).map { producer in
      NativeThread.spawn(name: "producer-\(producer)") {
        for index in 0..<perProducer {
          loop.execute {
            if lastSeen.value[producer] != index - 1 { outOfOrder.value += 1 }
            lastSeen.value[producer] = index
            ran.value += 1
          }
        }
      }!
    }
    #expect(loop.run(until: { ran.value == total }, deadline: .now + .seconds(120)))
    for thread in threads { thread.join() }
    // Nothing extra arrives late: one more turn, then the count must still be exact.
    #expect(!loop.run(until: { ran.value != total }, deadline: .now + .milliseconds(10)))
    #expect(outOfOrder.value == 0)
    #expect(ran.value == total)
    #expect(lastSeen.value == [Int](repeating: perProducer - 1, count: producers))
  }

  /// The consumer side driven directly, racing the producers with uneven batch sizes, so it
  /// often reaches slots that are claimed but not yet written. With `pauseEvery`, producers
  /// pause now and then, so the consumer catches up and meets block boundaries right as the
  /// last slot's producer links the next block.
  @Test(arguments: [0, 1])
  func directConsumerRacingProducers(pauseEvery: Int) {
    let producers = 3
    let perProducer = scaled(pauseEvery == 0 ? 100_000 : 20 * InboxBlock.capacity)
    let total = producers * perProducer
    let inbox = Inbox()
    let lastSeen = Shared([Int](repeating: -1, count: producers))
    let outOfOrder = Shared(0)
    let threads = (0..<producers).map { producer in
      NativeThread.spawn(name: "producer-\(producer)") {
        let busy = Atomic<Int>(0)
        for index in 0..<perProducer {
          inbox.push {
            // Runs on this test's thread, the only consumer.
            if lastSeen.value[producer] != index - 1 { outOfOrder.value += 1 }
            lastSeen.value[producer] = index
          }
          if pauseEvery > 0 && index % pauseEvery == 0 {
            // A short busy pause (no sleeping): lets the consumer drain to the tail.
            for _ in 0..<1_000 { busy.wrappingAdd(1, ordering: .relaxed) }
          }
        }
      }!
    }
    var ran = 0
    var limit = 1
    while ran < total {
      inbox.collect()
      ran += inbox.runBacklog(limit: pauseEvery == 0 ? limit : .max)
      limit = limit % 700 + 37
    }
    for thread in threads { thread.join() }
    inbox.collect()
    #expect(!inbox.hasBacklog)
    #expect(ran == total)
    #expect(outOfOrder.value == 0)
    #expect(lastSeen.value == [Int](repeating: perProducer - 1, count: producers))
  }

  /// Single-threaded, exactly around block boundaries: counts of one block less one, one
  /// block, one block plus one, and several blocks, drained in awkward batch sizes.
  @Test(arguments: [
    1, InboxBlock.capacity - 1, InboxBlock.capacity, InboxBlock.capacity + 1,
    3 * InboxBlock.capacity + 5,
  ])
  func boundaries(count: Int) {
    let inbox = Inbox()
    let order = Shared([Int]())
    for index in 0..<count { inbox.push { order.value.append(index) } }
    inbox.collect()
    // Posts after the snapshot wait for the next collect.
    inbox.push { order.value.append(-1) }
    var ran = 0
    while inbox.hasBacklog { ran += inbox.runBacklog(limit: InboxBlock.capacity - 3) }
    #expect(ran == count)
    #expect(order.value == Array(0..<count))
    inbox.collect()
    #expect(inbox.runBacklog(limit: .max) == 1)
    #expect(!inbox.hasBacklog)
  }

  /// A loop deallocated with posts never run releases what they captured, without running
  /// them: collected and uncollected posts, across several blocks, with a partly run block.
  @Test func deallocatedLoopReleasesUnrunPosts() {
    let ranCount = Counter()
    weak var weakToken: Token?
    do {
      let loop = EventLoop(name: "dropped", batchLimit: 100)
      let token = Token()
      weakToken = token
      let firstRound = 2 * InboxBlock.capacity + 7
      for _ in 0..<firstRound {
        loop.execute { [token] in
          _ = token
          _ = ranCount.increment()
        }
      }
      // One bounded batch runs, leaving the rest collected but unrun, head mid-block.
      #expect(loop.run(until: { ranCount.current >= 100 }, deadline: .now + .seconds(10)))
      #expect(ranCount.current == 100)
      // More posts nobody collects.
      for _ in 0..<(InboxBlock.capacity + 3) {
        loop.execute { [token] in
          _ = token
          _ = ranCount.increment()
        }
      }
      #expect(weakToken != nil)
    }
    #expect(weakToken == nil)
    #expect(ranCount.current == 100)
  }

  /// An inbox dropped straight away, never collected, frees its posts too.
  @Test func droppedInboxReleasesUncollectedPosts() {
    weak var weakToken: Token?
    let ranCount = Counter()
    do {
      let inbox = Inbox()
      let token = Token()
      weakToken = token
      for _ in 0..<(InboxBlock.capacity + 1) {
        inbox.push { [token] in
          _ = token
          _ = ranCount.increment()
        }
      }
    }
    #expect(weakToken == nil)
    #expect(ranCount.current == 0)
  }
}

/// An object whose lifetime the release tests watch through a weak reference.
private final class Token: Sendable {}
