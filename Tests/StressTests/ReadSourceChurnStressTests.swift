import Glibc
import LoopDispatch
import Synchronization
import TestSupport
import Testing

extension Stress {
  /// A hundred thousand pipe read sources opened, fired once and cancelled, in batches.
  @Suite struct ReadSourceChurn {
    /// Pipes open at once at most: two descriptors each, about a thousand in all.
    static let batchSize = 500

    @Test func eachSourceFiresOnceAndItsCancelHandlerClosesItsPipe() throws {
      let total = stressSize(100_000)
      let limit = raiseDescriptorLimit()
      try #require(limit >= 2 * Self.batchSize + 64, "RLIMIT_NOFILE hard limit is \(limit)")
      let queues = (0..<8).map { Queue(label: "churn.\($0)") } + [Queue.global()]
      // Warm up: the service loop's own descriptors exist before the baseline is taken.
      try churn(
        range: 0..<1, queues: queues, fired: AtomicCounters(count: 1),
        closed: AtomicCounters(count: 1), inodes: Locked(Set<UInt64>()))
      let baseline = openDescriptors()

      let fired = AtomicCounters(count: total)
      let closed = AtomicCounters(count: total)
      let inodes = Locked(Set<UInt64>())
      let meter = StressMeter("read sources (pipes, open/fire/cancel)")
      for start in stride(from: 0, to: total, by: Self.batchSize) {
        try churn(
          range: start..<Swift.min(start + Self.batchSize, total), queues: queues,
          fired: fired, closed: closed, inodes: inodes)
      }
      meter.finish(items: total)

      #expect(fired.histogram(0..<total) == [1: total], "handler runs per source → sources")
      #expect(closed.histogram(0..<total) == [1: total], "cancel runs per source → sources")
      let after = openDescriptors()
      let ours = inodes.value
      let leaked = after.filter { entry in
        entry.target.hasPrefix("pipe:[")
          && ours.contains(UInt64(entry.target.dropFirst(6).dropLast()) ?? 0)
      }
      #expect(leaked.isEmpty, "pipes of this test still open: \(leaked)")
      // The whole-process count is exact only when nothing else runs: a full `swift test`
      // runs other suites beside this one, and they open descriptors of their own. The check
      // above is exact per descriptor; this one catches any other per-source leak (a
      // duplicate, an eventfd, …), which would leave at least `total` descriptors behind.
      #expect(
        after.count - baseline.count < total,
        "open descriptors: \(baseline.count) before, \(after.count) after: \(after)")
      print("stress read sources: open descriptors \(baseline.count) before, \(after.count) after")
    }

    /// Opens a pipe and a read source per index in `range`, writes one byte to each, and
    /// returns when every cancel handler has run.
    private func churn(
      range: Range<Int>, queues: [Queue], fired: AtomicCounters, closed: AtomicCounters,
      inodes: Locked<Set<UInt64>>
    ) throws {
      let cancelled = Group()
      var sources: [(source: ReadSource, write: Int32)] = []
      sources.reserveCapacity(range.count)
      var batchInodes: [UInt64] = []
      for index in range {
        let pipe = makeStressPipe()
        batchInodes.append(pipe.inode)
        let source = try ReadSource(fd: pipe.read, queue: queues[index % queues.count])
        source.setEventHandler { [unowned source] in
          var byte: UInt8 = 0
          if read(pipe.read, &byte, 1) == 1 { fired.increment(index) }
          source.cancel()
        }
        cancelled.enter()
        source.setCancelHandler {
          close(pipe.read)
          close(pipe.write)
          closed.increment(index)
          cancelled.leave()
        }
        source.activate()
        sources.append((source, pipe.write))
      }
      inodes.withLock { [batchInodes] in $0.formUnion(batchInodes) }
      for entry in sources {
        var byte: UInt8 = 1
        precondition(write(entry.write, &byte, 1) == 1)
      }
      #expect(cancelled.wait(timeout: .seconds(60)) == .success, "batch at \(range)")
      withExtendedLifetime(sources) {}
    }
  }
}
