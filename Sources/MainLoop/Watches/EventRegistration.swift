import CLibevent
import Glibc
import Synchronization

/// The libevent `struct event` behind an ``FDWatch`` or ``SignalWatch``, and its cancel
/// protocol.
///
/// Cancel walk-through:
/// 1. `cancel()` (any thread) sets `cancelled` with a releasing exchange. From then on the
///    loop's dispatch (`fire`) sees it with its acquiring load and starts no handler.
/// 2. The removal itself (`event_del` + `event_free`) happens on the loop thread: at once if
///    `cancel()` runs there, otherwise on the loop's next turn through the inbox.
/// 3. After removal the completion closures run on the loop thread, in order. By then no
///    handler is running and none will start, so a completion may close the descriptor.
/// 4. The handler closure is released, then the loop's retain on this object (taken when
///    the event was added) is dropped last.
final class EventRegistration: @unchecked Sendable {
  // @unchecked Sendable: `event`, `state` and `completions` are only touched on the loop
  // thread; `cancelled` is atomic; the rest is immutable.

  // Strong: a loop with live registrations stays alive until they are cancelled.
  let loop: EventLoop
  /// The user's handler; dropped on removal so that a handler capturing its own watch (a
  /// common pattern) does not keep the watch and its loop alive. Only touched on the loop
  /// thread after init.
  private var handler: (@Sendable (Int16) -> Void)?
  let descriptor: String
  /// Runs once, on the loop thread, when the registration reaches its final state.
  let onRemoved: (@Sendable () -> Void)?

  private enum State { case pending, added, removed }
  /// Only touched on the loop thread.
  private var state = State.pending
  /// The libevent event. Only touched on the loop thread (created on the registering thread
  /// before the object is published).
  private var event: OpaquePointer?
  /// Only touched on the loop thread.
  private var completions: [@Sendable () -> Void] = []
  /// Atomic; see the walk-through.
  private let cancelled = Atomic<Bool>(false)
  /// For fd watches: the descriptor, and the identity (device, inode) its file had when the
  /// event was added (see `EventLoop+Descriptors.swift`). Only touched on the loop thread.
  private(set) var watchedFD: Int32 = -1
  private(set) var fileIdentity = FileIdentity(device: 0, inode: 0)
  /// Set when a newer watch on a reused descriptor number took the event out of the base:
  /// this registration never fires again (its file was closed), and `rearmOnLoop` does
  /// nothing. Only touched on the loop thread.
  private var evicted = false

  init(
    loop: EventLoop, descriptor: String, onRemoved: (@Sendable () -> Void)? = nil,
    handler: @escaping @Sendable (Int16) -> Void
  ) {
    self.loop = loop
    self.descriptor = descriptor
    self.onRemoved = onRemoved
    self.handler = handler
  }

  var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

  /// Creates the libevent event and adds it to the loop's base. Loop thread only.
  /// Returns 0, or an errno when libevent refuses.
  func addOnLoop(fd: Int32, events: Int16) -> Int32 {
    precondition(state == .pending)
    if isCancelled {
      finish()
      return 0
    }
    var identity: FileIdentity?
    if fd >= 0 && events & cl_ev_signal == 0 {
      // A number closed and reused while an older watch is still registered on it: libevent
      // still counts that watch's interest, so it would not tell epoll about ours (the kernel
      // dropped the old registration when the file closed). Take the stale ones out first.
      guard let current = FileIdentity(of: fd) else {
        finish()
        return EBADF
      }
      loop.evictStaleWatches(on: fd, keeping: current)
      identity = current
    }
    // Safe: the context pointer stays valid because the loop holds a +1 retain on `self`
    // from here until `finish()`, which runs only after `event_free`.
    let context = Unmanaged.passRetained(self).toOpaque()
    guard
      let created = event_new(
        loop.base, fd, events,
        { _, what, context in
          // Guaranteed without a retain of its own: the loop's +1 (above) outlives the call.
          Unmanaged<EventRegistration>.fromOpaque(context!)._withUnsafeGuaranteedRef {
            $0.fire(what)
          }
        }, context)
    else {
      // libevent refused the event (out of memory, or an invalid combination of flags). The
      // registration is over: finish it, so that a later `cancel` completes at once instead
      // of waiting for an add that will never come.
      Unmanaged<EventRegistration>.fromOpaque(context).release()
      finish()
      return ENOMEM
    }
    errno = 0
    if event_add(created, nil) != 0 {
      let code = errno == 0 ? EINVAL : errno
      event_free(created)
      Unmanaged<EventRegistration>.fromOpaque(context).release()
      finish()
      return code
    }
    event = created
    state = .added
    loop.registrationAdded()
    if let identity {
      watchedFD = fd
      fileIdentity = identity
      loop.recordWatch(self, on: fd)
    }
    return 0
  }

  /// Runs the handler unless cancelled. Loop thread only (called by libevent).
  @inline(__always)
  private func fire(_ what: Int16) {
    // Acquiring; pairs with the releasing exchange in `cancel()`.
    if cancelled.load(ordering: .acquiring) { return }
    loop.noteAwake()
    // Single writer (the loop thread): a plain load-then-store is enough.
    loop.eventsRun.store(loop.eventsRun.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    handler?(what)
  }

  /// Whether a persistent event was taken out of the base by `pauseOnLoop`. Only touched on
  /// the loop thread.
  private var paused = false

  /// Adds a fired one-shot event, or a paused persistent one, back to the base. Loop thread
  /// only. No effect once cancelled or removed, or on a persistent event that is not paused
  /// (so no system call is made for it).
  func rearmOnLoop(oneShot: Bool) {
    guard state == .added, !isCancelled, !evicted, let event, oneShot || paused else { return }
    paused = false
    if event_add(event, nil) != 0 {
      internalBug("event_add failed re-arming \(descriptor): errno \(errno)")
    }
  }

  /// Takes a persistent event out of the base until `rearmOnLoop`. Loop thread only.
  func pauseOnLoop() {
    guard state == .added, !paused, !evicted, let event else { return }
    paused = true
    event_del(event)
  }

  /// Takes the event out of the base for good because its descriptor's number now names
  /// another file (see `addOnLoop`). The registration stays until cancelled, so its cancel
  /// protocol is unchanged. Loop thread only.
  func evictOnLoop() {
    guard state == .added, !evicted, let event else { return }
    evicted = true
    // libevent removes its interest; epoll's answer (ENOENT: the number's new file was never
    // added) is ignored by libevent's epoll backend.
    event_del(event)
  }

  /// Requests cancellation; `completion` runs on the loop thread once the event is removed.
  func cancel(then completion: (@Sendable () -> Void)?) {
    // Releasing; pairs with the acquiring load in `fire`.
    cancelled.store(true, ordering: .releasing)
    if loop.isInLoopThread {
      removeOnLoop(adding: completion)
    } else {
      loop.execute { [self] in removeOnLoop(adding: completion) }
    }
  }

  /// Loop thread only.
  private func removeOnLoop(adding completion: (@Sendable () -> Void)?) {
    if let completion { completions.append(completion) }
    switch state {
    case .pending:
      // Still waiting for its add in the inbox; `addOnLoop` sees the flag and finishes.
      return
    case .added:
      if let event {
        event_del(event)
        event_free(event)
        self.event = nil
      }
      loop.registrationRemoved()
      if watchedFD >= 0 { loop.forgetWatch(self, on: watchedFD) }
      // Drop the loop's retain, taken in `addOnLoop`, after running completions.
      let retained = Unmanaged.passUnretained(self)
      finish()
      retained.release()
    case .removed:
      finish()
    }
  }

  /// Enters the final state (once) and runs pending completions. Loop thread only.
  private func finish() {
    if state != .removed {
      state = .removed
      handler = nil
      onRemoved?()
    }
    let pending = completions
    completions = []
    for completion in pending { completion() }
  }
}
