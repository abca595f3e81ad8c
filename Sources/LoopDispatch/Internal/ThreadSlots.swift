import CLoopThreadSlots

/// LoopDispatch's C thread-local slots (`Sources/CLoopThreadSlots`).
///
/// Each slot is one `extern __thread` variable defined once in C with the initial-exec TLS
/// model, so these accessors may be inlined anywhere: every object file reaches the same
/// variable, with a `%fs`-relative access and no call to `__tls_get_addr`. (The slots used to
/// be `static __thread` variables inside `static inline` C functions, one copy per object
/// file, which forced every access through one file behind `@inline(never)`.)
///
/// Thread-safety: each slot belongs to the calling thread.
enum ThreadSlots {
  /// The calling thread's innermost `ThreadFrame`, or nil.
  @inline(__always)
  static func frame() -> UnsafeMutableRawPointer? { lds_frame_get() }

  /// Sets the calling thread's innermost `ThreadFrame`.
  @inline(__always)
  static func setFrame(_ frame: UnsafeMutableRawPointer?) { lds_frame_set(frame) }

  /// The calling worker's retained `ThreadName`, or nil.
  static func nameState() -> UnsafeMutableRawPointer? { lds_name_state_get() }

  /// Sets the calling worker's `ThreadName` (retained by the caller).
  static func setNameState(_ state: UnsafeMutableRawPointer?) { lds_name_state_set(state) }

  /// The calling thread's pool worker (unretained), or nil off the pool.
  static func worker() -> UnsafeMutableRawPointer? { lds_worker_get() }

  /// Sets the calling thread's pool worker (the worker object outlives its thread's use).
  static func setWorker(_ worker: UnsafeMutableRawPointer?) { lds_worker_set(worker) }

  /// The calling thread's I/O driver flags (see `DriverThreadMark`).
  static func driverFlags() -> Int32 { lds_driver_get() }

  /// Sets the calling thread's I/O driver flags.
  static func setDriverFlags(_ flags: Int32) { lds_driver_set(flags) }

  /// Whether the calling thread owes a deferred pool wake-up (`WorkerPool+DeferredWake.swift`).
  @inline(__always)
  static func owesWake() -> Bool { lds_owes_wake_get() != 0 }

  @inline(__always)
  static func setOwesWake(_ owes: Bool) { lds_owes_wake_set(owes ? 1 : 0) }

  /// The calling thread's spare `SyncWaiter` (retained), or nil.
  @inline(__always)
  static func syncWaiter() -> UnsafeMutableRawPointer? { lds_sync_waiter_get() }

  /// Sets the calling thread's spare `SyncWaiter` (the slot owns one retain).
  @inline(__always)
  static func setSyncWaiter(_ waiter: UnsafeMutableRawPointer?) { lds_sync_waiter_set(waiter) }

  /// The queue whose diverted drain the calling thread runs with its slot of the cap still
  /// held (`WorkerPool.runDivertedDrain`), or nil.
  @inline(__always)
  static func divertedDrain() -> UnsafeMutableRawPointer? { lds_diverted_drain_get() }

  /// Sets the calling thread's diverted drain (see `divertedDrain`).
  @inline(__always)
  static func setDivertedDrain(_ queue: UnsafeMutableRawPointer?) { lds_diverted_drain_set(queue) }

  /// The calling thread's free-node cache (`NodeCache`); valid for the thread's life,
  /// including its pthread key destructors.
  @inline(__always)
  static func nodeCache() -> UnsafeMutablePointer<lds_node_cache> { lds_node_cache_get() }
}
