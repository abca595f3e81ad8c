import CLoopShims
import Glibc
@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// Names pool workers after the queue they are draining, so `top -H`, `ps -L`, gdb and
/// perf show `conn.42` rather than `ld.worker.3` for work that takes a while.
///
/// Renaming costs a system call (~0.3 µs on these VMs, more than a whole hop between two
/// queues), so workers never rename on the hot path. The naming is lazy:
/// 1. A worker records the name it *wants* (the label of the queue it drains, or its own
///    name `ld.worker.N` for global-queue items and when it parks; between two jobs the last
///    one's stays wanted, see `showEnclosingQueue`) in its `ThreadName`: two words and a
///    sequence number, written with plain stores (a seqlock, see `want`) only when the name
///    changes. No system call, no lock, no shared cache line written while the supervisor is
///    awake.
/// 2. The pool supervisor (`PoolSupervisor`) looks at every worker's wanted name once per
///    tick (5 ms) while any name is out of date. A wanted name unchanged since its previous
///    look (so held for at least one tick) is written to the kernel through
///    `/proc/self/task/<tid>/comm`. A drain that takes longer than a tick or two therefore
///    shows its queue's label; a hop of a few microseconds renames nothing.
/// 3. A worker about to park shows its own name again itself (`showOwnNameBeforeParking`),
///    under the same lock as the supervisor's renames: a parked worker never shows a label.
/// 4. The supervisor sleeps without a timeout again once every worker shows what it wants,
///    so an idle process has no wake-ups from naming. A worker whose wanted name differs
///    from the one shown wakes it (`requestLook`: one load of a shared flag when a look is
///    already due; one futex wake when the supervisor sleeps).
///
/// Who touches what: `wanted` and `sequence` are written by the owning worker only and read
/// by the supervisor; `shown` and `exited` are behind `renameLock`; `lastLook` belongs to the
/// supervisor thread; `localWanted` to the owning worker.
final class ThreadName: @unchecked Sendable {
  // @unchecked Sendable: every field follows the ownership rules above (atomics, the lock,
  // or one thread).

  /// The worker's own name (`ld.worker.N`, `ld.oc.N`).
  let ownName: KernelName
  /// The kernel's id of the worker's thread, for `/proc/self/task/<tid>/comm`.
  let tid: pid_t
  /// Seqlock sequence: odd while the owner writes `wanted`.
  private let sequence = Atomic<UInt64>(0)
  /// The wanted name's two words (see `KernelName`); `.none` for the worker's own name.
  private let wantedLow = Atomic<UInt64>(0)
  private let wantedHigh = Atomic<UInt64>(0)
  /// The wanted name as last written, read only by the owner (a fast check without atomics).
  private var localWanted = KernelName.none
  /// The sequence number at the supervisor's previous look (supervisor thread only).
  private var lastLook: UInt64 = .max

  private struct Shown {
    /// What the kernel shows (`.none`: the worker's own name).
    var name = KernelName.none
    /// Set as the thread leaves: its thread id may be reused by another thread.
    var exited = false
  }
  /// Protected by: its lock.
  private let renameLock = LockedValue(Shown())

  private init(ownName: String) {
    self.ownName = KernelName(ownName)
    tid = cls_gettid()
  }

  /// False when `LOOPDISPATCH_THREAD_NAMES=0`: workers then keep `ld.worker.N`.
  static let enabled: Bool = {
    guard let raw = getenv("LOOPDISPATCH_THREAD_NAMES") else { return true }
    return String(cString: raw) != "0"
  }()

  /// Every live worker's naming state, for the supervisor's looks.
  private static let registry = LockedValue<[ThreadName]>([])
  /// Whether the supervisor should look at the workers' names at its next tick. Set by a
  /// worker whose wanted name changed (sequentially consistent, the Dekker pair of the
  /// supervisor's sleep, see `PoolSupervisor.run`); cleared by the supervisor before a look.
  private static let lookDue = Atomic<Bool>(false)
  /// Renames written to the kernel (by workers parking and by the supervisor), for tests.
  static let kernelRenames = Atomic<Int>(0)
  #if DEBUG
    /// Debug builds, tests: whether the calling worker wants its own name now (nil off the
    /// pool). Reads the owner-only `localWanted` on its owner's thread.
    static var callingWorkerWantsItsOwnName: Bool? {
      guard let raw = ThreadSlots.nameState() else { return nil }
      // Safe: as in `want` (the calling thread's own state, borrowed).
      return Unmanaged<ThreadName>.fromOpaque(raw)._withUnsafeGuaranteedRef {
        $0.localWanted == .none
      }
    }
    /// Debug builds: wanted names written by workers (seqlock writes, each with a full
    /// barrier), process-wide, for tests.
    static let wantedNameWrites = Atomic<Int>(0)
  #endif
  /// Looks the supervisor has taken (`catchUp` calls), for tests.
  static let looks = Atomic<Int>(0)

  /// Gives the calling worker thread its naming state. Called once, first thing, by a
  /// worker; `removeForWorker` undoes it before the thread exits.
  static func installForWorker(ownName: String) {
    guard enabled else { return }
    let state = ThreadName(ownName: ownName)
    registry.withLock { $0.append(state) }
    // Safe: retained here, released by `removeForWorker` on the same thread.
    ThreadSlots.setNameState(Unmanaged.passRetained(state).toOpaque())
  }

  /// Releases the calling worker's naming state.
  static func removeForWorker() {
    guard let raw = ThreadSlots.nameState() else { return }
    ThreadSlots.setNameState(nil)
    let state = Unmanaged<ThreadName>.fromOpaque(raw).takeRetainedValue()
    state.renameLock.withLock { $0.exited = true }
    registry.withLock { list in list.removeAll { $0 === state } }
  }

  /// Records `name` as the calling worker's wanted name (no effect off the pool).
  @inline(__always)
  private static func want(_ name: KernelName) {
    guard let raw = ThreadSlots.nameState() else { return }
    // Safe: installed by this thread and released only by it (see `installForWorker`);
    // borrowed, so a hop costs no retain and release.
    Unmanaged<ThreadName>.fromOpaque(raw)._withUnsafeGuaranteedRef { state in
      guard state.localWanted != name else { return }
      state.localWanted = name
      #if DEBUG
        wantedNameWrites.wrappingAdd(1, ordering: .relaxed)
      #endif
      // Seqlock write: odd sequence, the words, even sequence. The release fence orders the
      // odd store before the words; the releasing store orders the words before the even one.
      let odd = state.sequence.load(ordering: .relaxed) &+ 1
      state.sequence.store(odd, ordering: .relaxed)
      atomicMemoryFence(ordering: .releasing)
      state.wantedLow.store(name.low, ordering: .relaxed)
      state.wantedHigh.store(name.high, ordering: .relaxed)
      // Sequentially consistent (a full barrier): the Dekker pair of the supervisor's clearing
      // of `lookDue` before it reads the names. Either it reads this name, or this thread
      // reads `lookDue` false below and asks for another look.
      state.sequence.store(odd &+ 1, ordering: .sequentiallyConsistent)
      requestLook()
    }
  }

  /// Makes sure the supervisor looks at the names soon: one load when a look is already due.
  @inline(__always)
  private static func requestLook() {
    if lookDue.load(ordering: .sequentiallyConsistent) { return }
    lookDue.store(true, ordering: .sequentiallyConsistent)
    WorkerPool.shared.supervisor.noteWorkWaiting()
  }

  /// Whether a look is due (for the supervisor's decision to sleep without a timeout).
  static var lookIsDue: Bool { lookDue.load(ordering: .sequentiallyConsistent) }

  /// Wants `queue`'s label as the calling worker's name.
  @inline(__always)
  static func show(_ queue: Queue) {
    guard queue.namesThreads else { return }
    want(queue.kernelName)  // No effect off the pool (`want` checks).
  }

  /// Wants the calling worker's own name (for global-queue items).
  @inline(__always)
  static func showOwnName() { want(.none) }

  /// After a nested drain (a child queue's items run inside its parent's drain), wants the
  /// enclosing queue's label again: the parent goes on running its own items.
  ///
  /// After a top-level drain or concurrent item (no enclosing frame, or a global queue's),
  /// wants nothing: the label stays wanted until the worker's next job, which wants a name
  /// as it starts, or until the worker parks (`showOwnNameBeforeParking`). Every top-level
  /// job does: global-queue jobs their worker's own name (`PoolJob.run`), drains and
  /// concurrent items their queue's label, or the worker's own name for a queue that does
  /// not name threads (`Queue.runFromPool`, `PoolJob.run`'s `.concurrentItem`). So a
  /// worker running item after item of one queue writes its wanted name once, not twice per
  /// item: each want that changes the name is a seqlock write with a sequentially
  /// consistent store, a full barrier (perf, `rw_barrier` in `Benchmarks/C`: 78% of
  /// `runConcurrentItem`'s own samples sat on the two barriers of a label and back).
  /// What the kernel shows changes in one way: short items of one queue run back to back
  /// used to flip the wanted name at every item, so no look saw it held and it was never
  /// written; now the label holds, and after a tick or two the kernel shows it, as it does
  /// for one long drain (the worker shows its own name again when it parks).
  @inline(__always)
  static func showEnclosingQueue() {
    guard ThreadSlots.nameState() != nil else { return }
    guard let frame = ThreadFrame.current else { return }
    let queue = frame.pointee.queue
    if case .root = queue.kind { return }
    guard queue.namesThreads else { return }
    want(queue.kernelName)
  }

  /// Called by a worker about to sleep: wants its own name and, if the supervisor showed a
  /// label, shows its own name again (step 3). The lock orders this with a rename the
  /// supervisor may be writing: whichever comes second sees the other's result.
  static func showOwnNameBeforeParking() {
    guard let raw = ThreadSlots.nameState() else { return }
    want(.none)
    // Safe: as in `want`.
    Unmanaged<ThreadName>.fromOpaque(raw)._withUnsafeGuaranteedRef { state in
      state.renameLock.withLock { shown in
        guard shown.name != .none else { return }
        shown.name = .none
        state.ownName.withCString { _ = cls_set_thread_name($0) }
        kernelRenames.wrappingAdd(1, ordering: .relaxed)
      }
    }
  }

  /// The supervisor's look (step 2), once per tick while `lookIsDue`. Supervisor thread only.
  static func catchUp() {
    looks.wrappingAdd(1, ordering: .relaxed)
    lookDue.store(false, ordering: .sequentiallyConsistent)
    let states = registry.withLock { $0 }
    var outOfDate = false
    for state in states where state.catchUp() { outOfDate = true }
    if outOfDate { lookDue.store(true, ordering: .sequentiallyConsistent) }
  }

  /// Shows this worker's wanted name if it held since the previous look. Returns whether the
  /// name shown still differs from the one wanted (another look is due).
  private func catchUp() -> Bool {
    guard let (wanted, stamp) = readWanted() else { return true }  // Being written: look again.
    let held = stamp == lastLook
    lastLook = stamp
    return renameLock.withLock { shown -> Bool in
      guard !shown.exited, shown.name != wanted else { return false }
      guard held else { return true }
      // Reads `wanted` under the lock again: a worker that parked meanwhile wants its own name
      // and showed it itself; the check above would be stale.
      guard let (again, _) = readWanted(), again == wanted else { return true }
      if writeKernelName(wanted == .none ? ownName : wanted) { shown.name = wanted }
      return false
    }
  }

  /// A consistent read of the wanted name and its sequence number, or nil while the owner is
  /// writing it (seqlock read: acquire the sequence, the words, an acquire fence, the sequence).
  private func readWanted() -> (KernelName, UInt64)? {
    // Sequentially consistent (not only acquiring): the supervisor's load of the Dekker pair
    // with a worker's change (`want`), after its sequentially consistent clearing of
    // `lookDue` in `catchUp`.
    let before = sequence.load(ordering: .sequentiallyConsistent)
    guard before & 1 == 0 else { return nil }
    let name = KernelName(
      low: wantedLow.load(ordering: .relaxed),
      high: wantedHigh.load(ordering: .relaxed))
    atomicMemoryFence(ordering: .acquiring)
    guard sequence.load(ordering: .relaxed) == before else { return nil }
    return (name, before)
  }

  /// Writes `name` as this worker's kernel name through `/proc` (the worker may be running).
  private func writeKernelName(_ name: KernelName) -> Bool {
    let fd = open("/proc/self/task/\(tid)/comm", O_WRONLY | O_CLOEXEC)
    if fd < 0 { return false }
    defer { close(fd) }
    let written = name.withCString { write(fd, $0, strlen($0)) }
    if written > 0 { ThreadName.kernelRenames.wrappingAdd(1, ordering: .relaxed) }
    return written > 0
  }
}

/// A thread name as the kernel holds it: at most 15 bytes of UTF-8, cut at a character
/// boundary, packed little-endian into two words (the bytes after the name are zero).
/// `.none` (both words zero) stands for the worker's own name; an empty label is shown as the
/// worker's own name too, so a thread is never nameless.
struct KernelName: Equatable {
  var low: UInt64
  var high: UInt64

  static let none = KernelName(low: 0, high: 0)

  init(low: UInt64, high: UInt64) {
    self.low = low
    self.high = high
  }

  /// Computed once per queue (at its creation), without allocating: the first 16 bytes go
  /// straight into the two words.
  init(_ string: String) {
    var low: UInt64 = 0
    var high: UInt64 = 0
    var count = 0
    for byte in string.utf8 {
      if count == 16 { break }
      if count < 8 {
        low |= UInt64(byte) << (8 * UInt64(count))
      } else {
        high |= UInt64(byte) << (8 * UInt64(count - 8))
      }
      count += 1
    }
    if count == 16 {
      // Longer than 15 bytes: cut at 15, backing off over a character split by the cut
      // (a UTF-8 continuation byte at the cut belongs to a character started before it).
      // Bytes 8...15 are in `high`, so the cut never reaches `low` unless 8 continuation
      // bytes follow one another, which UTF-8 never has (at most 3).
      var cut = 15
      while cut > 8 && UInt8(truncatingIfNeeded: high >> (8 * UInt64(cut - 8))) & 0xC0 == 0x80 {
        cut -= 1
      }
      high &= (UInt64(1) << (8 * UInt64(cut - 8))) &- 1  // Keep bytes 8..<cut.
    }
    self.init(low: low, high: high)
  }

  /// Calls `body` with the name as a NUL-terminated C string.
  func withCString<T>(_ body: (UnsafePointer<CChar>) -> T) -> T {
    // The two words hold at most 15 bytes, so the 16th (the top byte of `high`) is zero and
    // terminates the string.
    withUnsafeBytes(of: (low.littleEndian, high.littleEndian)) { raw in
      // Safe: 16 bytes alive for the call, NUL-terminated (see above).
      body(raw.baseAddress!.assumingMemoryBound(to: CChar.self))
    }
  }
}
