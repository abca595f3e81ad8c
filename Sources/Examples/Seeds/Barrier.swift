import LoopDispatch
import Synchronization

// GCD concept: the reader/writer store (seed articles 001 and 004).
//
// A *concurrent* queue guards a table. Reads use `sync`: they return a value, run on the
// caller's thread, and may run side by side. Writes use a barrier `async`: the barrier waits
// until the reads already inside have left, runs alone, and only then lets later work in.
// Unlike a lock, readers never block each other and a writer never blocks its caller.
//
// The census below counts, with atomics, who is inside the queue at each moment, so the
// output can show reads overlapping and writes never overlapping anything.

/// A photo store: every access to `table` goes through `queue`.
private final class PhotoStore: @unchecked Sendable {
  // @unchecked Sendable: `table` is only touched inside `queue` work, by reads in plain
  // `sync` (concurrent with each other) and by writes in barrier blocks (alone).
  private var table: [String: Int] = [:]
  let queue = Queue(label: "store", attributes: .concurrent)
  let census = Census()

  /// Reads `key`. `whileInside` runs before the read leaves the queue (the demo uses it to
  /// hold two readers inside together).
  func read(_ key: String, whileInside: () -> Void = {}) -> Int? {
    queue.sync {
      let inside = census.readerEnters()
      let value = table[key]
      let readers = inside == 1 ? "1 reader" : "\(inside) readers"
      say("read \(key)=\(value.map(String.init) ?? "nil") (\(readers) inside)")
      whileInside()
      census.readerLeaves()
      return value
    }
  }

  /// Writes `key` later, alone: returns at once.
  func write(_ key: String, _ value: Int) {
    queue.async(flags: .barrier) { [self] in
      let others = census.writerEnters()
      table[key] = value
      say("write \(key)=\(value) " + (others == 0 ? "(alone)" : "(NOT alone: \(others) others)"))
      census.writerLeaves()
    }
  }

  /// Every entry, after all writes submitted so far (a barrier `sync`).
  func snapshot() -> [String: Int] {
    queue.sync(flags: .barrier) { table }
  }
}

/// Who is inside the store's queue right now, and the worst seen so far.
private final class Census: Sendable {
  // All sequentially consistent: a reader and a writer each add themselves, then look for
  // the other; if they overlap, at least one of them sees the other.
  private let readers = Atomic<Int>(0)
  private let writers = Atomic<Int>(0)
  private let mostReaders = Atomic<Int>(0)
  private let overlappingWrites = Atomic<Int>(0)

  /// Returns how many readers are inside, counting the caller.
  func readerEnters() -> Int {
    let inside = readers.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
    mostReaders.max(inside, ordering: .sequentiallyConsistent)
    if writers.load(ordering: .sequentiallyConsistent) > 0 {
      overlappingWrites.wrappingAdd(1, ordering: .sequentiallyConsistent)
    }
    return inside
  }

  func readerLeaves() { readers.wrappingSubtract(1, ordering: .sequentiallyConsistent) }

  /// Returns how many others (readers or writers) are inside with the writer.
  func writerEnters() -> Int {
    let otherWriters = writers.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
    let others = otherWriters + readers.load(ordering: .sequentiallyConsistent)
    if others > 0 { overlappingWrites.wrappingAdd(1, ordering: .sequentiallyConsistent) }
    return others
  }

  func writerLeaves() { writers.wrappingSubtract(1, ordering: .sequentiallyConsistent) }

  var maxReaders: Int { mostReaders.load(ordering: .sequentiallyConsistent) }
  var writesOverlapping: Int { overlappingWrites.load(ordering: .sequentiallyConsistent) }
}

/// `Examples barrier`: readers overlap, writers run alone.
func runBarrier(_ arguments: [String]) -> Int32 {
  let store = PhotoStore()
  store.write("a", 1)
  store.write("b", 2)

  // 1. Two client threads meet inside the queue: neither read leaves until both are in, so
  //    the second always reports 2 readers inside. (If reads were serialised this would time
  //    out, and the summary below would fail.)
  say("1. two clients read at once, held inside the store until both have entered")
  let bothInside = Rendezvous(parties: 2)
  runOnNewThreads(2, named: "reader") { index in
    _ = store.read(["a", "b"][index]) { bothInside.arriveAndWait() }
  }

  // 2. Mixed traffic: three clients, each reading and writing; writes are barriers.
  say("2. three clients, each doing: read, write, read, read")
  runOnNewThreads(3, named: "client") { index in
    let key = ["a", "b", "c"][index]
    _ = store.read(key)
    store.write(key, 10 + index)
    _ = store.read(key)
    _ = store.read(["a", "b", "c"][(index + 1) % 3])
  }
  let final = store.snapshot()  // a barrier sync: returns after every earlier write
  let entries = final.keys.sorted().map { "\($0)=\(final[$0]!)" }.joined(separator: " ")
  say("store after all writes: \(entries)")

  let (most, overlapping) = (store.census.maxReaders, store.census.writesOverlapping)
  say("max readers at once: \(most), writes overlapping: \(overlapping)")
  if most < 2 || overlapping != 0 || final != ["a": 10, "b": 11, "c": 12] {
    say("barrier: FAILED (expected at least 2 readers at once and no overlapping write)")
    return 1
  }
  return 0
}
