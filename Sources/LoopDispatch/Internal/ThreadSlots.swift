import CLoopShims

/// The only code that touches LoopDispatch's C thread-local slots.
///
/// Each slot is a `static __thread` variable inside a `static inline` C function, which every
/// object file that calls the function gets its own copy of; an optimised build compiles
/// this module into several object files. Keeping every call in this one file, behind
/// `@inline(never)` accessors that are never inlined into other files, makes each slot one
/// variable per thread. (Inlined into `Queue+Serial.swift`, a setter would write a copy that
/// `Queue.current` never reads: exactly what release builds did before this file existed.)
///
/// Thread-safety: each slot belongs to the calling thread.
enum ThreadSlots {
  /// The calling thread's innermost `ThreadFrame`, or nil.
  @inline(never)
  static func frame() -> UnsafeMutableRawPointer? { cls_frame_get() }

  /// Sets the calling thread's innermost `ThreadFrame`.
  @inline(never)
  static func setFrame(_ frame: UnsafeMutableRawPointer?) { cls_frame_set(frame) }

  /// The calling worker's retained `ThreadName`, or nil.
  @inline(never)
  static func nameState() -> UnsafeMutableRawPointer? { cls_name_state_get() }

  /// Sets the calling worker's `ThreadName` (retained by the caller).
  @inline(never)
  static func setNameState(_ state: UnsafeMutableRawPointer?) { cls_name_state_set(state) }

  /// The calling thread's pool worker (unretained), or nil off the pool.
  @inline(never)
  static func worker() -> UnsafeMutableRawPointer? { cls_worker_get() }

  /// Sets the calling thread's pool worker (the worker object outlives its thread's use).
  @inline(never)
  static func setWorker(_ worker: UnsafeMutableRawPointer?) { cls_worker_set(worker) }

  /// The calling thread's I/O driver flags (see `DriverThreadMark`).
  @inline(never)
  static func driverFlags() -> Int32 { cls_driver_get() }

  /// Sets the calling thread's I/O driver flags.
  @inline(never)
  static func setDriverFlags(_ flags: Int32) { cls_driver_set(flags) }

  /// The calling thread's free-node cache (`NodeCache`); valid for the thread's life,
  /// including its pthread key destructors.
  @inline(never)
  static func nodeCache() -> UnsafeMutablePointer<cls_node_cache> { cls_node_cache_ptr() }
}
