/// A loop's pending timers: a 4-ary min-heap ordered by (deadline, sequence) whose entries
/// carry the deadline inline, so ordering them reads the heap's own memory, not the timers.
///
/// Why: the heap was an array of timer objects ordered through their fields, with each
/// timer's index written into it at every move. 100k dense `after` timers spent most of the
/// service thread's time there (`siftDown` and the retains and releases of its element
/// copies, with a cache miss per object touched, perf): a pop touched about 34 timers. Now a
/// pop reads about 9 groups of 4 adjacent 16-byte entries, and only the moved entries'
/// memory is written.
///
/// Rules:
/// 1. Each entry holds one retain of its timer (taken by `insert`, handed back by
///    `popFirst` or released by `compact` and `removeAll`), so the heap keeps its timers
///    alive on its own.
/// 2. The sequence (the tie-breaker that keeps equal deadlines in scheduling order) stays in
///    the timer: it is read only when two deadlines are equal.
/// 3. Removal is lazy: there is no index to find a timer by. `markRemoved` flags a queued
///    timer (`Membership.removed`) and counts it; `popFirst` hands removed timers out like
///    the others (the caller skips them), `dropRemovedFirst` pops those at the top (the
///    loop calls it after each removal and before arming its descriptor, so the earliest
///    entry is live whenever a new timer is compared with it), and
///    `compactIfMostlyRemoved` rebuilds the heap without them once they are more than half
///    of it (and at least `compactionFloor`), so cancelled timers never hold more than
///    about as many entries as live ones, at an amortised O(1) per removal.
///
/// Only touched on the loop thread (or, for LoopDispatch's driver timers, under their lock:
/// `DriverTimers`).
package struct TimerHeap: ~Copyable {
  /// Where a timer stands with respect to its loop's heap (`LoopTimer.heapState`).
  package enum Membership {
    /// Not in the heap: not yet inserted, fired, or popped after its removal.
    case outside
    /// In the heap and live.
    case queued
    /// Still in the heap, but removed (cancelled): skipped when it comes out.
    case removed
  }

  struct Entry {
    /// The timer's deadline when it was inserted (its `deadline` does not change meanwhile).
    let deadline: UInt64
    /// The timer, retained by the entry (rule 1).
    let timer: Unmanaged<LoopTimer>
  }

  /// The fewest removed entries that trigger a compaction (rule 3): below that they cost
  /// less than rebuilding.
  static let compactionFloor = 64

  private var entries: UnsafeMutablePointer<Entry>
  private var capacity: Int
  /// Entries in the heap, removed ones included.
  package private(set) var count = 0
  /// Entries whose timer was removed (rule 3).
  private(set) var removedCount = 0
  private var nextSequence: UInt64 = 0

  package init() {
    capacity = 16
    entries = .allocate(capacity: capacity)
  }

  deinit {
    // Rule 1: the retains the remaining entries hold.
    for index in 0..<count { entries[index].timer.release() }
    entries.deallocate()
  }

  /// The earliest entry's deadline, nil when the heap is empty (the entry may be removed).
  package var firstDeadline: UInt64? { count > 0 ? entries[0].deadline : nil }

  /// The earliest entry's timer (possibly a removed one), unretained: valid while it stays
  /// in the heap.
  var firstTimer: LoopTimer? {
    // Safe: entry 0 is initialised when count > 0, and its retain keeps the timer alive.
    count > 0 ? entries[0].timer.takeUnretainedValue() : nil
  }

  /// Adds `timer` (outside the heap) at its `deadline`. Returns whether it is now the
  /// earliest entry.
  @discardableResult
  package mutating func insert(_ timer: LoopTimer) -> Bool {
    timer.sequence = nextSequence
    nextSequence &+= 1
    timer.heapState = .queued
    if count == capacity { grow() }
    let entry = Entry(deadline: timer.deadline, timer: .passRetained(timer))
    // Safe: `count < capacity`, so the slot is allocated and uninitialised (entries are
    // trivial: initialising over a dead one is a plain store).
    (entries + count).initialize(to: entry)
    count += 1
    return siftUp(entry, from: count - 1) == 0
  }

  /// Takes the earliest entry out and returns its timer with the entry's retain, its
  /// `heapState` now `.outside`; `wasRemoved` tells whether it had been removed (rule 3).
  /// The heap must not be empty.
  package mutating func popFirst() -> (timer: LoopTimer, wasRemoved: Bool) {
    precondition(count > 0, "popFirst on an empty timer heap")
    // Safe: entry 0 is initialised (count > 0) and holds one retain (rule 1), handed to the
    // caller here; the entry is overwritten or left beyond `count` below.
    let timer = entries[0].timer.takeRetainedValue()
    count -= 1
    if count > 0 { siftDown(entries[count], from: 0) }
    let wasRemoved = timer.heapState == .removed
    if wasRemoved { removedCount -= 1 }
    timer.heapState = .outside
    return (timer, wasRemoved)
  }

  /// Flags `timer`, which must be queued in this heap, as removed (rule 3).
  package mutating func markRemoved(_ timer: LoopTimer) {
    assert(timer.heapState == .queued, "markRemoved on a timer that is not queued")
    timer.heapState = .removed
    removedCount += 1
  }

  /// Pops the removed entries at the top, releasing them, so that the earliest entry (if
  /// any) is live.
  package mutating func dropRemovedFirst() {
    while count > 0,
      // Safe: the entry's retain keeps the timer alive while it is read.
      entries[0].timer._withUnsafeGuaranteedRef({ $0.heapState == .removed })
    {
      _ = popFirst()
    }
  }

  /// Rebuilds the heap without its removed entries if they are more than half of it and at
  /// least `compactionFloor` (rule 3). O(count).
  package mutating func compactIfMostlyRemoved() {
    guard removedCount >= Self.compactionFloor, removedCount * 2 > count else { return }
    var kept = 0
    for index in 0..<count {
      let entry = entries[index]
      // Safe: the entry's retain keeps the timer alive while it is read.
      let removed = entry.timer._withUnsafeGuaranteedRef { $0.heapState == .removed }
      if removed {
        entry.timer._withUnsafeGuaranteedRef { $0.heapState = .outside }
        entry.timer.release()  // Rule 1.
      } else {
        entries[kept] = entry
        kept += 1
      }
    }
    count = kept
    removedCount = 0
    // Floyd's heap construction: sift down every parent, the last one first.
    if count > 1 {
      for index in stride(from: (count - 2) / 4, through: 0, by: -1) {
        siftDown(entries[index], from: index)
      }
    }
  }

  /// Empties the heap and returns its timers (their `heapState` `.outside`), releasing
  /// the entries' retains.
  mutating func removeAll() -> [LoopTimer] {
    var all: [LoopTimer] = []
    all.reserveCapacity(count)
    for index in 0..<count {
      // Safe: the entries below `count` are initialised, each holding one retain (rule 1),
      // handed to the array; `count` is reset below, so none is released twice.
      let timer = entries[index].timer.takeRetainedValue()
      timer.heapState = .outside
      all.append(timer)
    }
    count = 0
    removedCount = 0
    return all
  }

  // MARK: Ordering

  @inline(__always)
  private static func less(_ a: Entry, _ b: Entry) -> Bool {
    if a.deadline != b.deadline { return a.deadline < b.deadline }
    // Rule 2. Safe: both entries are in the heap, whose retains keep their timers alive.
    return a.timer._withUnsafeGuaranteedRef { x in
      b.timer._withUnsafeGuaranteedRef { y in x.sequence < y.sequence }
    }
  }

  /// Moves `entry`, which belongs at `start` or above, up to its place; returns the index.
  /// Safe: every index read (`start`'s ancestors) is below `count`, so initialised; `start`
  /// itself is a slot below `capacity` whose old entry the caller has taken.
  @inline(__always)
  private mutating func siftUp(_ entry: Entry, from start: Int) -> Int {
    var hole = start
    while hole > 0 {
      let parent = (hole - 1) / 4
      guard Self.less(entry, entries[parent]) else { break }
      entries[hole] = entries[parent]
      hole = parent
    }
    entries[hole] = entry
    return hole
  }

  /// Moves `entry`, which belongs at `start` or below, down to its place. Safe: only
  /// indices below `count` are read (the children are bounded by it), and those are
  /// initialised; entries are trivial, so overwriting one is a plain store.
  @inline(__always)
  private mutating func siftDown(_ entry: Entry, from start: Int) {
    var hole = start
    while true {
      let firstChild = 4 &* hole &+ 1
      guard firstChild < count else { break }
      var best = firstChild
      let end = Swift.min(firstChild &+ 4, count)
      var child = firstChild &+ 1
      while child < end {
        if Self.less(entries[child], entries[best]) { best = child }
        child &+= 1
      }
      guard Self.less(entries[best], entry) else { break }
      entries[hole] = entries[best]
      hole = best
    }
    entries[hole] = entry
  }

  private mutating func grow() {
    let bigger = UnsafeMutablePointer<Entry>.allocate(capacity: capacity * 2)
    // Safe: the first `count` entries are initialised; entries are trivial, so moving them is
    // a copy of their bytes.
    bigger.moveInitialize(from: entries, count: count)
    entries.deallocate()
    entries = bigger
    capacity *= 2
  }
}
