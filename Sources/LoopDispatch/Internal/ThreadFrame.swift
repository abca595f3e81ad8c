import CLoopShims

/// What the calling thread is doing for a queue: a frame per queue it currently drains or
/// holds (innermost first), kept in a thread-local slot as a linked list of stack frames.
///
/// Frames answer `Queue.current`, `Queue.getSpecific` and deadlock detection for `sync`.
/// Each frame lives on the stack of the function that pushed it (`withFrame`), so pushing
/// and popping allocate nothing.
struct ThreadFrame {
  /// Unowned: the queue is kept alive by whoever is draining or holding it for the whole
  /// lifetime of the frame.
  unowned(unsafe) let queue: Queue
  /// True when this thread holds the queue exclusively (a serial drain, a barrier, a sync
  /// lock); false for one of several items of a concurrent queue.
  let exclusive: Bool
  let previous: UnsafeMutablePointer<ThreadFrame>?

  /// The calling thread's innermost frame.
  @inline(__always)
  static var current: UnsafeMutablePointer<ThreadFrame>? {
    ThreadSlots.frame()?.assumingMemoryBound(to: ThreadFrame.self)
  }

  /// Runs `body` with a frame for `queue` pushed on the calling thread.
  @inline(__always)
  static func with<T, E: Error>(
    _ queue: Queue, exclusive: Bool, _ body: () throws(E) -> T
  ) throws(E) -> T {
    let previous = current
    var frame = ThreadFrame(queue: queue, exclusive: exclusive, previous: previous)
    // Safe: the pointer is published only for the duration of `body`, during which `frame`
    // stays alive on this stack; it is unpublished before returning (also on throw).
    // Unprotected (no stack-protector canary check on every `sync`): the pointer addresses
    // one `ThreadFrame`, only ever read and written whole through its type, never indexed
    // or copied into as a buffer, so there is no overflow for a canary to catch.
    return try _withUnprotectedUnsafeMutablePointer(to: &frame) { (pointer) throws(E) -> T in
      ThreadSlots.setFrame(pointer)
      defer { ThreadSlots.setFrame(previous.map { UnsafeMutableRawPointer($0) }) }
      return try body()
    }
  }

  /// Whether the calling thread holds `queue` (exclusively if `exclusiveOnly`).
  static func holds(_ queue: Queue, exclusiveOnly: Bool) -> Bool {
    var frame = current
    while let pointer = frame {
      if pointer.pointee.queue === queue && (!exclusiveOnly || pointer.pointee.exclusive) {
        return true
      }
      frame = pointer.pointee.previous
    }
    return false
  }
}
