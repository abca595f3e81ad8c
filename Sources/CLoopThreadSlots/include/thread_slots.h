// LoopDispatch's thread-local slots: one definition of each (thread_slots.c), reached with
// the initial-exec TLS model.
//
// Why not `static __thread` in a `static inline` function (as CLoopShims once had): such a
// variable has internal linkage, so every object file that calls the function gets its own
// copy, and an optimised Swift build compiles one module into several object files (a setter
// inlined into one file wrote a copy that readers in another file never saw). These are
// `extern` variables defined once in thread_slots.c, so every inlined accessor, in whatever
// object file, reaches the same variable.
//
// Why initial-exec: a shared library's thread-locals default to the general-dynamic model,
// where every access calls `__tls_get_addr`. Initial-exec reads the variable's offset from
// the thread pointer out of the GOT (set once when the library is loaded) and then accesses
// `%fs:offset` directly, as libdispatch does for its own thread-locals. The cost: the
// variables live in the static TLS block, so a library loaded with dlopen after startup draws
// on glibc's surplus static TLS space (hundreds of bytes; these take 100). Hidden: they are
// not part of the library's interface.
//
// Thread-safety: each slot belongs to the calling thread; nothing here is shared.
#ifndef LOOPDISPATCH_THREAD_SLOTS_H
#define LOOPDISPATCH_THREAD_SLOTS_H

#define LDS_THREAD_SLOT __attribute__((tls_model("initial-exec"), visibility("hidden")))

/// The calling thread's innermost LoopDispatch frame (`ThreadFrame`), or NULL.
extern __thread void *lds_frame LDS_THREAD_SLOT;
/// The calling pool worker's thread-name state (NULL on other threads).
extern __thread void *lds_name_state LDS_THREAD_SLOT;
/// The calling thread's pool worker (unretained; NULL on threads that are not workers).
extern __thread void *lds_worker LDS_THREAD_SLOT;
/// The calling thread's I/O driver flags (bit 0: a driver thread; bit 1: it holds the poller
/// role). 0 on every other thread.
extern __thread int lds_driver LDS_THREAD_SLOT;
/// Whether the calling thread (never a pool worker) left a pool wake-up deferred that it must
/// make before it blocks (Sources/LoopDispatch/Pool/WorkerPool+DeferredWake.swift).
extern __thread int lds_owes_wake LDS_THREAD_SLOT;

/// The calling thread's cache of free pool job nodes (Sources/LoopDispatch/Pool/JobNode.swift,
/// `NodeCache`): `spare_*` is a list of nodes this thread freed, `borrowed` a chain it took from
/// the shared stack, `registered` whether its exit hook is installed. Zero on a thread that
/// never used it.
struct lds_node_cache {
  void *spare_head;
  void *spare_tail;
  long spare_count;
  void *borrowed;
  long registered;
};
extern __thread struct lds_node_cache lds_node_cache_slot LDS_THREAD_SLOT;

/// The calling thread's spare `SyncWaiter` (retained; Sources/LoopDispatch/Queue/QueueItem.swift,
/// `SyncWaiter.reusable`), or NULL: taken while the thread waits, put back after its turn.
extern __thread void *lds_sync_waiter LDS_THREAD_SLOT;

/// The serial queue whose diverted drain the calling overcommit worker runs while that drain
/// still holds its slot of the cap (Sources/LoopDispatch/Pool/Overcommit.swift,
/// `runDivertedDrain`), or NULL.
extern __thread void *lds_diverted_drain LDS_THREAD_SLOT;

/// The calling thread's pseudo-random sequence that picks which submissions read the clock
/// (Sources/LoopDispatch/Internal/Ticks.swift, `Ticks.sampledStamp`): a xorshift64 state, 0
/// until the thread's first submission; and how many it picked.
extern __thread unsigned long long lds_stamp_state LDS_THREAD_SLOT;
extern __thread unsigned long long lds_stamps_taken LDS_THREAD_SLOT;

/// Whether the calling thread's submission should be stamped: true with a chance of one in
/// eight, from the thread's own sequence (seeded from the address of its slot, which
/// differs between threads), so that no regular pattern of submissions always lands on, or
/// always misses, the stamped turns.
static inline int lds_stamp_due(void) {
  unsigned long long x = lds_stamp_state;
  if (x == 0) x = ((unsigned long long)(unsigned long)&lds_stamp_state) ^ 0x9E3779B97F4A7C15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  lds_stamp_state = x;
  if (x >> 61) return 0;
  lds_stamps_taken++;
  return 1;
}

static inline unsigned long long lds_stamps_taken_get(void) { return lds_stamps_taken; }

static inline void *lds_frame_get(void) { return lds_frame; }
static inline void lds_frame_set(void *frame) { lds_frame = frame; }
static inline void *lds_name_state_get(void) { return lds_name_state; }
static inline void lds_name_state_set(void *state) { lds_name_state = state; }
static inline void *lds_worker_get(void) { return lds_worker; }
static inline void lds_worker_set(void *worker) { lds_worker = worker; }
static inline int lds_driver_get(void) { return lds_driver; }
static inline void lds_driver_set(int flags) { lds_driver = flags; }
static inline int lds_owes_wake_get(void) { return lds_owes_wake; }
static inline void lds_owes_wake_set(int owes) { lds_owes_wake = owes; }
static inline struct lds_node_cache *lds_node_cache_get(void) { return &lds_node_cache_slot; }
static inline void *lds_sync_waiter_get(void) { return lds_sync_waiter; }
static inline void lds_sync_waiter_set(void *waiter) { lds_sync_waiter = waiter; }
static inline void *lds_diverted_drain_get(void) { return lds_diverted_drain; }
static inline void lds_diverted_drain_set(void *queue) { lds_diverted_drain = queue; }

#endif
