import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

/// DataSource: values posted between handler runs merge (added or or-ed).
@Suite struct SourceDataTests {
  @Test func addMergesEverythingPostedWhileSuspendedIntoOneRun() {
    let queue = Queue(label: "adder")
    let source = DataSource(merge: .add, queue: queue)
    let runs = Locked([UInt]())
    let got = Latch()
    source.setEventHandler { [unowned source] in
      runs.withLock { $0.append(source.data) }
      got.open()
    }
    source.activate()
    source.suspend()
    let total = scaled(1_000)
    for _ in 0..<total { source.post(1) }
    source.resume()
    #expect(got.wait())
    queue.sync {}
    source.cancel()
    #expect(runs.value == [UInt(total)])
  }

  @Test(arguments: [false, true])
  func addFromManyThreadsLosesNothing(concurrent: Bool) {
    let queue =
      concurrent ? Queue(label: "adder-wide", attributes: .concurrent) : Queue(label: "adder")
    let source = DataSource(merge: .add, queue: queue)
    let posters = 4
    let perPoster = scaled(10_000)
    let total = UInt(posters * perPoster)
    let sum = Counter()
    let runs = Counter()
    let zeroRuns = Counter()
    let meter = OverlapMeter()
    let done = Latch()
    source.setEventHandler { [unowned source] in
      meter.enter()
      let data = source.data
      if data == 0 { zeroRuns.increment() }
      runs.increment()
      sum.add(Int(data))
      if UInt(sum.current) == total { done.open() }
      meter.leave()
    }
    source.activate()
    for _ in 0..<posters {
      Queue.global().async {
        for _ in 0..<perPoster { source.post(1) }
      }
    }
    #expect(done.wait(seconds: 60))
    queue.sync(flags: .barrier) {}
    source.cancel()
    #expect(UInt(sum.current) == total)
    #expect(runs.current <= Int(total))
    #expect(zeroRuns.current == 0)
    #expect(meter.overlaps == 0)
  }

  @Test func orMergesBitsAndEachRunStartsAfresh() {
    let queue = Queue(label: "flags")
    let source = DataSource(merge: .or, queue: queue)
    let runs = Locked([UInt]())
    let ran = LoopDispatch.Semaphore(value: 0)
    source.setEventHandler { [unowned source] in
      runs.withLock { $0.append(source.data) }
      ran.signal()
    }
    source.activate()
    source.suspend()
    for bit: UInt in [1, 2, 4, 8, 1, 2, 0] { source.post(bit) }
    source.resume()
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    source.post(16)
    #expect(ran.wait(timeout: .seconds(30)) == .success)
    queue.sync {}
    source.cancel()
    #expect(runs.value == [15, 16])
  }

  @Test func valuesPostedBeforeActivationAreDeliveredOnActivation() {
    let queue = Queue(label: "early-posts")
    let source = DataSource(merge: .add, queue: queue)
    let runs = Locked([UInt]())
    let got = Latch()
    source.setEventHandler { [unowned source] in
      runs.withLock { $0.append(source.data) }
      got.open()
    }
    source.post(3)
    source.post(4)
    source.activate()
    #expect(got.wait())
    queue.sync {}
    source.cancel()
    #expect(runs.value == [7])
  }
}
