import CLoopShims
import Glibc

/// Names pool workers after the queue they are draining, so `top -H`, `ps -L`, gdb and
/// perf show `conn.42` rather than `ld.worker.3`.
///
/// A worker installs a `ThreadName` for itself when it starts (`installForWorker`); other
/// threads (the main thread, threads calling `sync`) have none and are never renamed.
/// Renaming costs one `prctl` (~0.3 µs), so it happens only when the label to show differs
/// from the one shown: a worker draining one queue over and over renames once.
///
/// Thread-safety: each instance is reached only through its own thread's thread-local slot,
/// so only that thread reads or writes it.
final class ThreadName {
  /// The worker's own name (`ld.worker.N`), shown while it is not draining a custom queue.
  private let ownName: String
  /// The label the kernel shows now, or nil while it shows `ownName`.
  private var shownLabel: String?

  private init(ownName: String) { self.ownName = ownName }

  /// False when `LOOPDISPATCH_THREAD_NAMES=0`: workers then keep `ld.worker.N` (for
  /// latency-bound work bouncing between differently labelled queues, where each label change
  /// costs a `prctl`).
  static let enabled: Bool = {
    guard let raw = getenv("LOOPDISPATCH_THREAD_NAMES") else { return true }
    return String(cString: raw) != "0"
  }()

  /// Gives the calling worker thread its naming state. Called once, first thing, by a
  /// worker; `removeForWorker` undoes it before the thread exits.
  static func installForWorker(ownName: String) {
    guard enabled else { return }
    // Safe: retained here, released by `removeForWorker` on the same thread.
    ThreadSlots.setNameState(Unmanaged.passRetained(ThreadName(ownName: ownName)).toOpaque())
  }

  /// Releases the calling worker's naming state.
  static func removeForWorker() {
    guard let raw = ThreadSlots.nameState() else { return }
    ThreadSlots.setNameState(nil)
    Unmanaged<ThreadName>.fromOpaque(raw).release()
  }

  /// The calling thread's state, if it is a pool worker.
  @inline(__always)
  private static var forCurrentThread: ThreadName? {
    guard let raw = ThreadSlots.nameState() else { return nil }
    // Safe: installed by this thread and released only by it (see `installForWorker`).
    return Unmanaged<ThreadName>.fromOpaque(raw).takeUnretainedValue()
  }

  /// Shows `label` as the calling worker's name (no effect on other threads).
  @inline(__always)
  static func show(_ label: String) {
    guard let raw = ThreadSlots.nameState() else { return }
    // Safe: as in `showOwnName` (borrowed: no retain and release per item).
    Unmanaged<ThreadName>.fromOpaque(raw)._withUnsafeGuaranteedRef { state in
      guard state.shownLabel != label else { return }
      state.shownLabel = label
      // An empty label would leave the thread nameless: show the worker's own name instead.
      setKernelName(label.isEmpty ? state.ownName : label)
    }
  }

  /// Shows the calling worker's own name again (no effect if it already does).
  @inline(__always)
  static func showOwnName() {
    guard let raw = ThreadSlots.nameState() else { return }
    // Safe: installed by this thread and released only by it (see `installForWorker`);
    // borrowed for the check, so the common case (already showing its own name) costs no
    // retain and release.
    Unmanaged<ThreadName>.fromOpaque(raw)._withUnsafeGuaranteedRef { state in
      guard state.shownLabel != nil else { return }
      state.shownLabel = nil
      setKernelName(state.ownName)
    }
  }

  /// After a nested drain (a child queue's items run inside its parent's drain), shows the
  /// enclosing queue's label again: the parent goes on running its own items. After a
  /// top-level drain (the enclosing frame is a global queue's) the label stays until the
  /// worker runs a global queue's own item or parks (`PoolJob.run`, `Worker.park`): a
  /// worker going from one drain of a queue to the next renames at most once.
  @inline(__always)
  static func showEnclosingQueue() {
    guard let frame = ThreadFrame.current, ThreadSlots.nameState() != nil else { return }
    let queue = frame.pointee.queue
    if case .root = queue.kind { return }
    guard queue.namesThreads else { return }
    show(queue.label)
  }

  /// Sets the kernel's name: the first 15 bytes of `name`, cut at a character boundary
  /// (the kernel keeps 15 bytes and a NUL).
  private static func setKernelName(_ name: String) {
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 17) { buffer in
      var count = 0
      for byte in name.utf8.prefix(16) {
        buffer[count] = byte
        count += 1
      }
      if count == 16 {
        // Longer than 15 bytes: cut at 15, backing off over a character split by the cut
        // (a UTF-8 continuation byte at the cut belongs to a character started before it).
        count = 15
        while count > 0 && buffer[count] & 0xC0 == 0x80 { count -= 1 }
      }
      buffer[count] = 0
      // Safe: a NUL-terminated buffer alive for the call.
      buffer.withMemoryRebound(to: CChar.self) { _ = cls_set_thread_name($0.baseAddress!) }
    }
  }
}
