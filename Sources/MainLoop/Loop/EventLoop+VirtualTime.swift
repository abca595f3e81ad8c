import CLibevent

/// Driving a loop in virtual time, for tests (SwiftNIO's `EmbeddedEventLoop` is the model):
/// the test's thread is the loop thread, the clock moves only when that thread moves it, and
/// nothing ever sleeps, so ordering, missed-period and cancel-race tests do not depend on how
/// busy the machine is.
///
/// A loop made with `EventLoop(name:clock: .virtual(startingAt:))` is the same loop as any
/// other (heap, pending-insertion stack, inbox, libevent base) with three differences: its
/// timers read `virtualNanoseconds` (`currentTimeNanoseconds()`), its timer descriptor is never
/// armed (`armedTimerDeadline` is recorded only, the simulated descriptor), and `wakePending`
/// stays true, so no producer writes its eventfd. `run` traps on it.
///
/// Virtual time is package-only, so misusing it is a bug in this package (in its tests), not
/// in a client: the traps below are `internalBug`s, and not listed in Misuse.md.
///
/// `advance(to: target)` walk-through (on the driving thread, which it binds like `run`):
/// 1. Run what is ready now (`runReadyWork`): a non-blocking poll (fd and signal watches),
///    the timers other threads scheduled, and posted closures, until no post waits.
/// 2. While the simulated descriptor is armed for an instant at or before `target`: move the
///    clock to that instant (never backwards), run steps 2–5 of a real expiry
///    (`fireTimerPasses`: every timer due then, in deadline order, ties in scheduling order,
///    the timer-pass observer, re-arming by the same rule as the real loop, coalescing
///    window included), then step 1 again. Handlers may schedule, cancel, post or `stall`.
/// 3. Move the clock to `target`, then step 1 once more.
///
/// So an idle loop advanced by ten periods of a repeating timer fires it ten times, once per
/// slot, as a real idle loop would; `stall(for:)` models a loop that was busy instead (the
/// clock moves, nothing runs), after which the overdue timers fire once and missed slots are
/// skipped.
extension EventLoop {
  /// Moves the virtual clock `duration` ahead, running every timer that falls due on the way
  /// at its armed instant, and the posted work, on the calling thread.
  ///
  /// `advance(by: .zero)` runs what is due now. Loop thread only (the first call binds the
  /// loop to the calling thread); not from one of the loop's handlers.
  package func advance(by duration: Duration) {
    advance(to: now + duration)
  }

  /// Moves the virtual clock to `target` (not backwards: an earlier target runs what is due
  /// now), as ``advance(by:)`` does. Handlers that `stall` may leave the clock past `target`:
  /// their time counts, as on a real loop.
  package func advance(to target: Deadline) {
    enterVirtualDrive()
    defer { running.store(false, ordering: .releasing) }
    runReadyWork()
    while armedTimerDeadline != 0 && armedTimerDeadline <= target.uptimeNanoseconds {
      moveVirtualClock(to: armedTimerDeadline)
      fireTimerPasses()
      runReadyWork()
    }
    moveVirtualClock(to: target.uptimeNanoseconds)
    runReadyWork()
  }

  /// Moves the virtual clock `duration` ahead without running anything, as if the loop
  /// thread had been busy that long: from a handler, a handler that takes `duration`; from
  /// the driving thread, a loop held up between turns. Timers that fell due fire at the next
  /// ``advance(by:)`` (or the next pass of the current expiry), once, missed slots skipped.
  /// Loop thread only.
  package func stall(for duration: Duration) {
    requireVirtualTimeOnLoopThread()
    moveVirtualClock(to: (now + duration).uptimeNanoseconds)
  }

  /// Binds the loop to the calling thread and marks it running (so a handler cannot
  /// re-enter the driver), or traps on misuse.
  private func enterVirtualDrive() {
    if !isVirtualTime {
      internalBug("EventLoop \"\(name)\" runs on the real clock; advance(to:) needs a virtual one")
    }
    bindToCurrentThread()
    if running.exchange(true, ordering: .acquiringAndReleasing) {
      internalBug(
        "EventLoop \"\(name)\" advanced from its own handler; use stall(for:) to model a slow one"
      )
    }
  }

  private func requireVirtualTimeOnLoopThread() {
    if !isVirtualTime || !isInLoopThread {
      internalBug("stall(for:) needs a virtual-time loop and its driving thread (\"\(name)\")")
    }
  }

  /// Sets the virtual clock, never backwards. Loop thread only (the single writer).
  private func moveVirtualClock(to instant: UInt64) {
    if instant > virtualNanoseconds.load(ordering: .relaxed) {
      virtualNanoseconds.store(instant, ordering: .relaxed)
    }
  }

  /// Step 1: turns of the loop that never block, until no post or pending timer waits. A
  /// closure that posts itself forever keeps this from returning, as it would keep a real
  /// loop busy. Loop thread only.
  private func runReadyWork() {
    repeat {
      if event_base_loop(base, cl_evloop_once | cl_evloop_nonblock) < 0 {
        internalBug("event_base_loop failed on loop \"\(name)\"")
      }
      finishTurn()
      turns.wrappingAdd(1, ordering: .relaxed)
    } while hasWork
  }
}
