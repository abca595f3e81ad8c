import CLoopShims
import Glibc
import Synchronization

/// A 32-bit word that threads can sleep on (Linux futex), with atomic access.
///
/// Safe: the word lives in its own heap allocation, owned by this object, so its address is
/// stable for the kernel for as long as anyone can reach the object.
final class FutexWord: @unchecked Sendable {
  // @unchecked Sendable: the only state is the atomic word behind `pointer`.
  let pointer: UnsafeMutablePointer<Atomic<UInt32>>

  /// With `ownBlock`, the word is allocated alone on a 128-byte-aligned block of 128 bytes,
  /// so writes to it (a park and its wake) disturb no other data, and writes to neighbouring
  /// allocations do not take its line from the thread sleeping on it.
  init(_ initial: UInt32 = 0, ownBlock: Bool = false) {
    // Safe: a fresh allocation, bound to the type it is initialised as.
    pointer = UnsafeMutableRawPointer.allocate(
      byteCount: ownBlock ? 128 : MemoryLayout<Atomic<UInt32>>.size,
      alignment: ownBlock ? 128 : MemoryLayout<Atomic<UInt32>>.alignment
    ).bindMemory(to: Atomic<UInt32>.self, capacity: 1)
    pointer.initialize(to: Atomic(initial))
  }

  deinit {
    pointer.deinitialize(count: 1)
    pointer.deallocate()
  }

  @inline(__always)
  var atomic: UnsafeMutablePointer<Atomic<UInt32>> { pointer }

  /// Sleeps while the word equals `expected`, or until `timeoutNanoseconds` pass (nil: no
  /// limit). May return spuriously: callers re-check their condition.
  func wait(whileEqualTo expected: UInt32, timeoutNanoseconds: UInt64? = nil) {
    FutexWord.wait(on: pointer, whileEqualTo: expected, timeoutNanoseconds: timeoutNanoseconds)
  }

  /// Wakes up to `count` threads sleeping on the word.
  func wake(_ count: Int32 = 1) { FutexWord.wake(on: pointer, count) }

  /// `wait` on any word whose address stays valid while the caller sleeps.
  ///
  /// A pool worker first hands its run-next job to the pool (`flushBeforeBlocking`): it
  /// cannot run it while asleep, and the job may be what the wait is for. Inside a job it
  /// counts itself asleep for the sleep; another thread makes the pool wake-up it deferred
  /// (`WorkerPool+DeferredWake.swift`).
  static func wait(
    on word: UnsafeMutablePointer<Atomic<UInt32>>, whileEqualTo expected: UInt32,
    timeoutNanoseconds: UInt64? = nil
  ) {
    let inJob = WorkerPool.flushBeforeBlocking()
    defer { if inJob { WorkerPool.shared.wokeInJob() } }
    let raw = UnsafeMutableRawPointer(word).assumingMemoryBound(to: UInt32.self)
    if let timeoutNanoseconds {
      var relative = timespec(
        tv_sec: Int(timeoutNanoseconds / 1_000_000_000),
        tv_nsec: Int(timeoutNanoseconds % 1_000_000_000))
      _ = cls_futex_wait(raw, expected, &relative)
    } else {
      _ = cls_futex_wait(raw, expected, nil)
    }
  }

  /// `wake` on any word whose address stays valid during the call.
  static func wake(on word: UnsafeMutablePointer<Atomic<UInt32>>, _ count: Int32 = 1) {
    let raw = UnsafeMutableRawPointer(word).assumingMemoryBound(to: UInt32.self)
    _ = cls_futex_wake(raw, count)
  }
}

/// The one-shot protocol for a single waiter on a futex word: `wait()` returns once
/// `signal()` has been called.
///
/// Word states: 0 not signalled (waiter awake), 2 waiter asleep or about to sleep,
/// 1 signalled. The signaller makes the `futex_wake` system call only when it replaces a 2,
/// so a waiter that is still spinning costs the signaller one atomic exchange.
///
/// Safe: the word is allocated and freed by an object (`OneShotEvent`, `SyncWaiter`) that
/// both sides hold a reference to while they use it, so its address is stable and valid.
struct OneShotWord {
  let word: UnsafeMutablePointer<Atomic<UInt32>>

  func signal() {
    // Releasing; pairs with the acquiring loads in `wait()`.
    if word.pointee.exchange(1, ordering: .acquiringAndReleasing) == 2 {
      FutexWord.wake(on: word, 1)
    }
  }

  /// `admission`: who may spin (the process's, but in tests).
  func wait(admission: SpinAdmission = .waits) {
    // Spins only where it pays (`SpinAdmission`): a few microseconds, for an item or a
    // hand-off that is ending on another core.
    if admission.enter() {
      defer { admission.leave() }
      for _ in 0..<256 {
        if word.pointee.load(ordering: .acquiring) == 1 { return }
        spinLoopHint()
      }
    }
    let (slept, _) = word.pointee.compareExchange(
      expected: 0, desired: 2, ordering: .acquiringAndReleasing)
    if !slept { return }  // Already signalled.
    while word.pointee.load(ordering: .acquiring) == 2 {
      FutexWord.wait(on: word, whileEqualTo: 2)
    }
  }
}

/// A one-shot event for a single waiter (`OneShotWord`): the object and its word, two
/// allocations (a `ManagedBuffer` would make it one, but cannot be `Sendable`).
final class OneShotEvent: @unchecked Sendable {
  // @unchecked Sendable: the only state is the atomic word behind `pointer`.
  private let pointer: UnsafeMutablePointer<Atomic<UInt32>>

  init() {
    pointer = .allocate(capacity: 1)
    pointer.initialize(to: Atomic(0))
  }

  deinit {
    pointer.deinitialize(count: 1)
    pointer.deallocate()
  }

  /// Safe: the word lives as long as this object, which the caller holds.
  func signal() { OneShotWord(word: pointer).signal() }
  func wait() { OneShotWord(word: pointer).wait() }
}

/// A CPU hint for spin-wait loops (x86 `pause`), through the shim.
@inline(__always)
func spinLoopHint() {
  cls_cpu_relax()
}
