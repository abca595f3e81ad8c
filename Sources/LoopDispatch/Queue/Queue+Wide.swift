@_spi(LoopDispatchRuntime) import MainLoop
import Synchronization

/// A serial queue made wide by ``Queue/setWidth(_:)`` (libdispatch's old idiom: create the
/// queue with no attribute, then `dispatch_queue_set_width(queue, n)`).
///
/// Such a queue keeps its serial front and gains a concurrent back:
///
/// ```
///  async / sync / barrier / child drains ──▶ serial front (one FIFO list, one drainer)
///                                                   │ after the WIDE bit: forwarded, in order
///                                                   ▼
///                                   concurrent back (`ConcurrentState`, `concurrentWord`)
///                                                   │ up to the width; barriers alone
///                                                   ▼
///                                               the target
/// ```
///
/// Walk-through:
/// 1. `setWidth(n)` on a serial queue submits a barrier item through the front; it takes
///    effect for the work submitted after the call, as libdispatch applies the width at a
///    barrier. Items submitted before it run one at a time, as before.
/// 2. The first such item runs as an ordinary serial item, alone: it creates the back
///    (width `n`), publishes it, and sets WIDE in the serial state word (sequentially
///    consistent read-modify-write). WIDE is never cleared (`setWidth(1)` later makes the
///    back one wide, which runs items one at a time in order).
/// 3. From then on the front's drainer does not run items: it moves each, in submission
///    order, to the back (`concurrentEnqueue`), which starts it when the width allows. Items
///    keep their barrier flag, so a barrier still runs alone. A later `setWidth` item is a
///    barrier of the back, so it changes the width between the items before and after it.
/// 4. Every submission keeps going through the front (`kind` stays `.serial`), so order is
///    the front's FIFO order whatever the moment of the switch. The cost is one hop per item,
///    paid only by queues made wide. (The helpers of an `apply` already running on the queue
///    go straight to the back: they are part of that call, not new submissions.)
/// 5. `sync`: WIDE is set only while a drainer holds SCHEDULED (never together with
///    SYNC_LOCKED), and the lock-free `sync` takes SYNC_LOCKED only from a state word of 0,
///    so once WIDE is set every `sync` queues a waiter through the front. A caller that saw
///    WIDE queues one whose slot the back hands to it (it runs the closure and gives the
///    slot back itself, `SyncWaiter.callerReleasesSlot`, when the target is a global queue);
///    a caller that queued its waiter before the switch is held for by a worker of the back,
///    as a concurrent queue with a custom target does.
/// 6. Suspension: the front's count is the only count. A `suspend` or `resume` that finds
///    WIDE, and the switch itself, copy the count into the back under its lock (re-read
///    there, so the last copy is the newest: a change that preceded the switch in the word's
///    order is seen by the switch's copy, one after it copies for itself). A suspended wide
///    queue therefore starts nothing, neither from the front nor among the back's waiting
///    items.
/// 7. A wide queue is no longer serial: `dispatch_apply` on it spreads like on a concurrent
///    queue, and an I/O channel's handlers for it go through a serial queue of their own (from
///    the `setWidth` call: WIDTH_REQ). Actor jobs are barrier items, so an actor whose
///    executor is made wide still runs one job at a time.
extension Queue {
  /// Whether this serial queue was made wide (WIDE is set; never cleared).
  var isWide: Bool {
    kind == .serial && state.load(ordering: .acquiring) & SerialState.wide != 0
  }

  /// Whether `setWidth` was ever called on this serial queue (WIDTH_REQ; WIDE may not be
  /// set yet). Handlers that rely on the queue's order check this.
  var widthRequested: Bool {
    kind == .serial && state.load(ordering: .acquiring) & SerialState.widthRequested != 0
  }

  /// Step 1: the width change as a barrier item through the front. `setWidth(1)` on a queue
  /// never made wide changes nothing.
  func serialSetWidth(_ width: Int) {
    if width == 1 && !widthRequested { return }
    state.bitwiseOr(SerialState.widthRequested, ordering: .sequentiallyConsistent)
    // Unowned: the item runs only inside this queue's drain, which holds the queue; a queue
    // released with the item still queued (suspended or inactive) frees it unrun.
    serialEnqueue(.closure({ [unowned self] in applyWidth(width) }, barrier: true))
  }

  /// Steps 2 and 3: runs alone, as the queue's item.
  private func applyWidth(_ width: Int) {
    if isWide {
      concurrentSetWidth(width)
      return
    }
    // Only this item (the front's drainer) reaches here before WIDE is set: one back.
    let back = LockedValue(ConcurrentState(inactive: false, width: width), adaptive: true)
    concurrentWidth.store(width, ordering: .relaxed)
    sanitizerWidth = UInt16(clamping: width)
    // Releasing: the back is complete before anyone that loads the pointer reads it.
    wideStatePointer.store(Unmanaged.passRetained(back).toOpaque(), ordering: .releasing)
    // Sequentially consistent: ordered with `suspend`'s add in the word (step 6).
    state.bitwiseOr(SerialState.wide, ordering: .sequentiallyConsistent)
    copySuspensionToBack()
  }

  /// Step 6: the back's suspension count becomes the front's, re-read under the back's lock;
  /// then whatever may start does.
  func copySuspensionToBack() {
    concurrentReplaceSuspension {
      Int((state.load(ordering: .sequentiallyConsistent) & SerialState.suspendMask) >> 8)
    }
  }
}
