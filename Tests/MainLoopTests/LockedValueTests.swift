@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization
import TestSupport
import Testing

@testable import MainLoop

/// `LockedValue` holding a function: reading it must leave the stored function as it was.
@Suite struct LockedValueTests {
  /// Read through `withLock { $0 }`, a stored function gained two reabstraction thunks per
  /// read in a debug build (see `LockedValue.load()`), so a call after 500 reads ran about
  /// 2000 frames deeper than the first call, and a hook read at every drain grew without end
  /// until releasing it overflowed a stack. Through `load()` both calls run at the same depth.
  @Test func readingAStoredFunctionDoesNotWrapIt() {
    let depth = Atomic<Int>(0)
    let slot = LockedValue<(@Sendable () -> Void)?>({
      depth.store(currentStackDepth(), ordering: .relaxed)
    })
    slot.load()?()
    let first = depth.load(ordering: .relaxed)
    for _ in 0..<500 { _ = slot.load() }
    slot.load()?()
    let later = depth.load(ordering: .relaxed)
    #expect(later - first < 16, "the call after 500 reads ran \(later - first) frames deeper")
    // Replaced: the old function is released (recursively, once per thunk, if it was wrapped).
    slot.withLock { $0 = nil }
    #expect(slot.load() == nil)
  }
}
