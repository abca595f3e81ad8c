import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// `LockedValue` holding a function: reading it must leave the stored function as it was.
@Suite struct LockedValueTests {
  /// Read through `withLock { $0 }`, a stored function gained two reabstraction thunks per
  /// read in a debug build (see `LockedValue.load()`), so a call after 2000 reads ran 4000
  /// frames deeper than the first call: at least 64 KB, and a hook read at every drain grew
  /// without end until releasing it overflowed a stack. Through `load()` both calls run at
  /// the same depth, give or take a frame's worth of difference between call sites.
  @Test func readingAStoredFunctionDoesNotWrapIt() {
    let depth = Atomic<UInt>(0)
    let slot = LockedValue<(@Sendable () -> Void)?>({
      depth.store(currentStackAddress(), ordering: .relaxed)
    })
    slot.load()?()
    let first = depth.load(ordering: .relaxed)
    for _ in 0..<2000 { _ = slot.load() }
    slot.load()?()
    let later = depth.load(ordering: .relaxed)
    let deeperBy = first > later ? first - later : 0
    #expect(deeperBy < 16 * 1024, "the call after 2000 reads ran \(deeperBy) bytes deeper")
    // Replaced: the old function is released (recursively, once per thunk, if it was wrapped).
    slot.withLock { $0 = nil }
    #expect(slot.load() == nil)
  }
}
