// The C side of LoopDispatch's GCD C API: what needs C to express. Block forms (a block is
// copied for asynchronous use and released after it ran, as libdispatch does), queue
// attributes, dispatch_once on the caller's word, and dispatch_debug's varargs. Every other
// function is implemented in Swift (Sources/LoopDispatchC, `@_cdecl`).
#include <dispatch/dispatch.h>

#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>

// BlocksRuntime (the toolchain's libBlocksRuntime), declared here so no header path is needed.
extern void *_Block_copy(const void *block);
extern void _Block_release(const void *block);

// ---- Block forms ---------------------------------------------------------------------------

// Runs a copied block once and releases the copy.
static void run_copied_block(void *context) {
  dispatch_block_t block = (dispatch_block_t)context;
  block();
  _Block_release(block);
}

// Runs a block the caller keeps (the synchronous forms: the block outlives the call).
static void run_borrowed_block(void *context) { ((dispatch_block_t)context)(); }

// The start of every block (the blocks ABI, clang's and BlocksRuntime's Block_private.h).
struct block_header {
  void *isa;
  int flags;
  int reserved;
  void (*invoke)(void *block);
};

// A borrowed block's own invoke function, to pass with the block as its context: a
// `void (^)(void)` block's invoke takes exactly the block, so calling it with the block is
// calling the block (libdispatch's `_dispatch_Block_invoke` does the same). It saves the
// `run_borrowed_block` call on every dispatch_sync.
static inline dispatch_function_t borrowed_block_invoke(dispatch_block_t block) {
  return ((const struct block_header *)(const void *)block)->invoke;
}

static void run_apply_block(void *context, size_t index) {
  ((void (^)(size_t))context)(index);
}

static int is_barrier_block(dispatch_block_t block);
static int qos_index(dispatch_qos_class_t qos);

void dispatch_async(dispatch_queue_t queue, dispatch_block_t block) {
  if (is_barrier_block(block)) {
    dispatch_barrier_async_f(queue, _Block_copy(block), run_copied_block);
    return;
  }
  dispatch_async_f(queue, _Block_copy(block), run_copied_block);
}

void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block) {
  if (is_barrier_block(block)) {
    dispatch_barrier_sync_f(queue, (void *)block, run_borrowed_block);
    return;
  }
  dispatch_sync_f(queue, (void *)block, borrowed_block_invoke(block));
}

void dispatch_async_and_wait(dispatch_queue_t queue, dispatch_block_t block) {
  dispatch_sync(queue, block);
}

void dispatch_async_and_wait_f(dispatch_queue_t queue, void *context, dispatch_function_t work) {
  dispatch_sync_f(queue, context, work);
}

void dispatch_barrier_async_and_wait(dispatch_queue_t queue, dispatch_block_t block) {
  dispatch_barrier_sync_f(queue, (void *)block, run_borrowed_block);
}

void dispatch_barrier_async_and_wait_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work) {
  dispatch_barrier_sync_f(queue, context, work);
}

void dispatch_barrier_async(dispatch_queue_t queue, dispatch_block_t block) {
  dispatch_barrier_async_f(queue, _Block_copy(block), run_copied_block);
}

void dispatch_barrier_sync(dispatch_queue_t queue, dispatch_block_t block) {
  dispatch_barrier_sync_f(queue, (void *)block, run_borrowed_block);
}

void dispatch_apply(size_t iterations, dispatch_queue_t queue, void (^block)(size_t)) {
  dispatch_apply_f(iterations, queue, (void *)block, run_apply_block);
}

// Implemented in Swift: the `_f` forms with a barrier flag, for DISPATCH_BLOCK_BARRIER block
// objects (block.h: such a block acts as a barrier however it reaches a concurrent queue).
extern void _loopdispatch_after_f(
    dispatch_time_t when, dispatch_queue_t queue, void *context, dispatch_function_t work,
    int barrier);
extern void _loopdispatch_group_async_f(
    dispatch_group_t group, dispatch_queue_t queue, void *context, dispatch_function_t work,
    int barrier);

void dispatch_after(dispatch_time_t when, dispatch_queue_t queue, dispatch_block_t block) {
  // Never fires: nothing to copy (a copy would never be released).
  if (when == DISPATCH_TIME_FOREVER) return;
  _loopdispatch_after_f(
      when, queue, _Block_copy(block), run_copied_block, is_barrier_block(block));
}

void dispatch_group_async(dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block) {
  _loopdispatch_group_async_f(
      group, queue, _Block_copy(block), run_copied_block, is_barrier_block(block));
}

void dispatch_group_notify(
    dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block) {
  dispatch_group_notify_f(group, queue, _Block_copy(block), run_copied_block);
}

void dispatch_once(dispatch_once_t *predicate, dispatch_block_t block) {
  dispatch_once_f(predicate, (void *)block, run_borrowed_block);
}

// ---- Dispatch block objects ----------------------------------------------------------------

// A block made by dispatch_block_create is built here by hand, as a heap block (the shape
// _Block_copy gives a copied block: refcount 1, BLOCK_NEEDS_FREE) with a copy/dispose
// descriptor. It holds one value, the id of its record in Swift (`_loopdispatch_block_*`;
// ids are never reused). The runtime calls `dispose_block` when the last reference goes
// (the program's Block_release, and each copy made to queue it), and that frees the record
// and the program's block copy. A block is recognised as one of ours by its invoke function.
// The layout and flags are the blocks ABI's (clang's and BlocksRuntime's Block_private.h).
enum {
  block_needs_free = 1 << 24,
  block_has_copy_dispose = 1 << 25,
  block_refcount_one = 2,  // The runtime counts references in steps of 2.
};

struct block_descriptor {
  unsigned long reserved;
  unsigned long size;
  void (*copy)(void *destination, const void *source);
  void (*dispose)(const void *block);
};

struct dispatch_block_object {
  void *isa;
  volatile int flags;
  int reserved;
  void (*invoke)(struct dispatch_block_object *);
  const struct block_descriptor *descriptor;
  uint64_t id;
};

extern void *_NSConcreteMallocBlock[];

extern uint64_t _loopdispatch_block_register(
    dispatch_block_flags_t flags, void *block, dispatch_function_t invoke,
    void (*release)(const void *));
extern void _loopdispatch_block_run(uint64_t id);
extern void _loopdispatch_block_dispose(uint64_t id);
extern intptr_t _loopdispatch_block_wait(uint64_t id, dispatch_time_t timeout);
extern void _loopdispatch_block_notify(
    uint64_t id, dispatch_queue_t queue, void *block, dispatch_function_t invoke);
extern void _loopdispatch_block_cancel(uint64_t id);
extern intptr_t _loopdispatch_block_testcancel(uint64_t id);
extern dispatch_block_flags_t _loopdispatch_block_flags(uint64_t id);
extern void _loopdispatch_client_bug(const char *message) __attribute__((__noreturn__));

static void invoke_block_object(struct dispatch_block_object *block) {
  _loopdispatch_block_run(block->id);
}

// Never called for a heap block (only a stack block's copy runs it); required by the ABI.
static void copy_block_object(void *destination, const void *source) {
  (void)destination;
  (void)source;
}

static void dispose_block_object(const void *block) {
  _loopdispatch_block_dispose(((const struct dispatch_block_object *)block)->id);
}

static const struct block_descriptor block_object_descriptor = {
    0, sizeof(struct dispatch_block_object), copy_block_object, dispose_block_object};

// The flags libdispatch accepts (the public ones and two private bits); others: NULL.
enum { block_flags_known = 0xff };

dispatch_block_t dispatch_block_create(dispatch_block_flags_t flags, dispatch_block_t block) {
  if (flags & ~(dispatch_block_flags_t)block_flags_known) return NULL;
  struct dispatch_block_object *made = malloc(sizeof *made);
  if (made == NULL) {  // Not the client's bug: the process is out of memory.
    fputs("LOOPDISPATCH CANNOT CONTINUE: out of memory in dispatch_block_create\n", stderr);
    abort();
  }
  made->isa = _NSConcreteMallocBlock;
  made->flags = block_needs_free | block_has_copy_dispose | block_refcount_one;
  made->reserved = 0;
  made->invoke = invoke_block_object;
  made->descriptor = &block_object_descriptor;
  made->id = _loopdispatch_block_register(
      flags, _Block_copy(block), run_borrowed_block, _Block_release);
  return (dispatch_block_t)(void *)made;
}

dispatch_block_t dispatch_block_create_with_qos_class(
    dispatch_block_flags_t flags, dispatch_qos_class_t qos_class, int relative_priority,
    dispatch_block_t block) {
  // As libdispatch: an unknown class or a relative priority outside -15...0 is refused.
  if (qos_index(qos_class) < 0 || relative_priority > 0 || relative_priority < -15) return NULL;
  // QoS is not modelled further; the block behaves as dispatch_block_create's.
  return dispatch_block_create(flags, block);
}

// The record id of one of our blocks, or 0.
static uint64_t block_id(dispatch_block_t block) {
  if (block == NULL) return 0;
  const struct dispatch_block_object *object = (const void *)block;
  return object->invoke == invoke_block_object ? object->id : 0;
}

static uint64_t required_block_id(dispatch_block_t block, const char *message) {
  uint64_t id = block_id(block);
  if (id == 0) _loopdispatch_client_bug(message);
  return id;
}

static int is_barrier_block(dispatch_block_t block) {
  uint64_t id = block_id(block);
  return id != 0 && (_loopdispatch_block_flags(id) & DISPATCH_BLOCK_BARRIER) != 0;
}

void dispatch_block_perform(dispatch_block_flags_t flags, dispatch_block_t block) {
  dispatch_block_t made = dispatch_block_create(flags, block);
  made();
  _Block_release(made);
}

intptr_t dispatch_block_wait(dispatch_block_t block, dispatch_time_t timeout) {
  return _loopdispatch_block_wait(
      required_block_id(block, "dispatch_block_wait on a block not made by dispatch_block_create"),
      timeout);
}

void dispatch_block_notify(
    dispatch_block_t block, dispatch_queue_t queue, dispatch_block_t notification_block) {
  uint64_t id = required_block_id(
      block, "dispatch_block_notify on a block not made by dispatch_block_create");
  _loopdispatch_block_notify(id, queue, _Block_copy(notification_block), run_copied_block);
}

void dispatch_block_cancel(dispatch_block_t block) {
  _loopdispatch_block_cancel(required_block_id(
      block, "dispatch_block_cancel on a block not made by dispatch_block_create"));
}

intptr_t dispatch_block_testcancel(dispatch_block_t block) {
  return _loopdispatch_block_testcancel(required_block_id(
      block, "dispatch_block_testcancel on a block not made by dispatch_block_create"));
}

// ---- Queue attributes ----------------------------------------------------------------------

// An attribute is a pointer to one of these constants (DISPATCH_QUEUE_SERIAL is NULL): every
// combination exists once, so attributes are never allocated or freed.
struct dispatch_queue_attr_s {
  unsigned char concurrent;
  unsigned char inactive;
  unsigned char qos;             // A dispatch_qos_class_t value; 0: unspecified.
  signed char relative_priority;  // -15...0, with a QoS class.
};

struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent = {1, 0, 0, 0};

// libdispatch's QoS class numbers (<sys/qos.h> on Darwin; Linux has no header for them):
// unspecified, maintenance, background, utility, default, user-initiated, user-interactive.
enum { qos_count = 7, relative_priorities = 16 };
static const dispatch_qos_class_t qos_classes[qos_count] = {
    0x00, 0x05, 0x09, 0x11, 0x15, 0x19, 0x21};
static struct dispatch_queue_attr_s attributes[2][2][qos_count][relative_priorities];

// The index of a QoS class, or -1 for a number that is not one.
static int qos_index(dispatch_qos_class_t qos) {
  for (int i = 0; i < qos_count; i++) {
    if (qos_classes[i] == qos) return i;
  }
  return -1;
}

static dispatch_queue_attr_t attribute(int concurrent, int inactive, int qos, int relative) {
  if (qos == 0) relative = 0;
  if (concurrent && !inactive && qos == 0) return &_dispatch_queue_attr_concurrent;
  if (!concurrent && !inactive && qos == 0) return DISPATCH_QUEUE_SERIAL;
  struct dispatch_queue_attr_s *attr = &attributes[concurrent][inactive][qos][-relative];
  // Filling the constant is idempotent: racing callers write the same bytes.
  attr->concurrent = (unsigned char)concurrent;
  attr->inactive = (unsigned char)inactive;
  attr->qos = (unsigned char)qos_classes[qos];
  attr->relative_priority = (signed char)relative;
  return attr;
}

static int attr_qos_index(dispatch_queue_attr_t attr) {
  return attr ? qos_index(attr->qos) : 0;
}

dispatch_queue_attr_t dispatch_queue_attr_make_initially_inactive(dispatch_queue_attr_t attr) {
  return attribute(
      attr ? attr->concurrent : 0, 1, attr_qos_index(attr), attr ? attr->relative_priority : 0);
}

dispatch_queue_attr_t dispatch_queue_attr_make_with_qos_class(
    dispatch_queue_attr_t attr, dispatch_qos_class_t qos_class, int relative_priority) {
  // As libdispatch: an unknown class or a relative priority outside -15...0 leaves the
  // attribute as it was.
  int qos = qos_index(qos_class);
  if (qos < 0 || relative_priority > 0 || relative_priority < -15) return attr;
  return attribute(attr ? attr->concurrent : 0, attr ? attr->inactive : 0, qos, relative_priority);
}

dispatch_queue_attr_t dispatch_queue_attr_make_with_autorelease_frequency(
    dispatch_queue_attr_t attr, dispatch_autorelease_frequency_t frequency) {
  (void)frequency;  // There are no autorelease pools on Linux: nothing to change.
  return attr;
}

// Implemented in Swift: creates the queue from the decoded attribute.
extern dispatch_queue_t _loopdispatch_queue_create(
    const char *label, int concurrent, int inactive, int qos, int relative_priority);

static dispatch_queue_t create_queue(const char *label, dispatch_queue_attr_t attr, int inactive) {
  return _loopdispatch_queue_create(
      label, attr ? attr->concurrent : 0, inactive, attr ? attr->qos : 0,
      attr ? attr->relative_priority : 0);
}

dispatch_queue_t dispatch_queue_create(const char *label, dispatch_queue_attr_t attr) {
  return create_queue(label, attr, attr ? attr->inactive : 0);
}

dispatch_queue_t dispatch_queue_create_with_target(
    const char *label, dispatch_queue_attr_t attr, dispatch_queue_t target) {
  // Created inactive so that the target is set before any work can run, then activated
  // unless the caller asked for an inactive queue.
  dispatch_queue_t queue = create_queue(label, attr, 1);
  if (target != NULL) dispatch_set_target_queue(queue, target);
  if (!(attr && attr->inactive)) dispatch_activate(queue);
  return queue;
}

// ---- dispatch_once -------------------------------------------------------------------------

// The predicate word: 0 not started; 1 running; 2 running with waiters; ~0 done. Waiters sleep
// on the word's low 32 bits (x86-64 and aarch64 are little-endian: 1 and 2 fit there).
enum { once_running = 1, once_waited = 2 };

void dispatch_once_f(dispatch_once_t *predicate, void *context, dispatch_function_t function) {
  if (__atomic_load_n(predicate, __ATOMIC_ACQUIRE) == ~0l) return;
  intptr_t expected = 0;
  if (__atomic_compare_exchange_n(
          predicate, &expected, once_running, false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
    function(context);
    // Releasing: the initialisation is visible to every caller that sees "done".
    intptr_t previous = __atomic_exchange_n(predicate, ~0l, __ATOMIC_ACQ_REL);
    if (previous == once_waited) {
      syscall(SYS_futex, (int *)predicate, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
    return;
  }
  while (1) {
    intptr_t seen = __atomic_load_n(predicate, __ATOMIC_ACQUIRE);
    if (seen == ~0l) return;
    if (seen == once_running) {
      __atomic_compare_exchange_n(
          predicate, &seen, once_waited, false, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE);
      continue;
    }
    syscall(SYS_futex, (int *)predicate, FUTEX_WAIT_PRIVATE, once_waited, NULL, NULL, 0);
  }
}

// ---- Sources -------------------------------------------------------------------------------

// A source type is the address of one of these constants; the tag tells Swift which kind.
struct dispatch_source_type_s {
  int tag;
};
const struct dispatch_source_type_s _dispatch_source_type_read = {1};
const struct dispatch_source_type_s _dispatch_source_type_write = {2};
const struct dispatch_source_type_s _dispatch_source_type_timer = {3};
const struct dispatch_source_type_s _dispatch_source_type_signal = {4};
const struct dispatch_source_type_s _dispatch_source_type_data_add = {5};
const struct dispatch_source_type_s _dispatch_source_type_data_or = {6};
const struct dispatch_source_type_s _dispatch_source_type_data_replace = {7};
const struct dispatch_source_type_s _dispatch_source_type_proc = {8};
const struct dispatch_source_type_s _dispatch_source_type_memorypressure = {9};
// 10, not 8: the process and memory-pressure types were planned beside it.
const struct dispatch_source_type_s _dispatch_source_type_vnode = {10};

// Implemented in Swift.
extern dispatch_source_t _loopdispatch_source_create(
    int tag, uintptr_t handle, uintptr_t mask, dispatch_queue_t queue);
// Sets handler `which` (0 event, 1 cancel, 2 registration): `invoke(argument)` when
// `argument` is not NULL (then `release(argument)` when the handler is replaced or dropped),
// else `invoke(<the source's context>)`; a NULL `invoke` clears the handler.
extern void _loopdispatch_source_set_handler(
    dispatch_source_t source, int which, dispatch_function_t invoke, void *argument,
    void (*release)(const void *));

dispatch_source_t dispatch_source_create(
    dispatch_source_type_t type, uintptr_t handle, uintptr_t mask, dispatch_queue_t queue) {
  return _loopdispatch_source_create(type ? type->tag : 0, handle, mask, queue);
}

static void set_block_handler(dispatch_source_t source, int which, dispatch_block_t block) {
  if (block == NULL) {
    _loopdispatch_source_set_handler(source, which, NULL, NULL, NULL);
    return;
  }
  _loopdispatch_source_set_handler(
      source, which, run_borrowed_block, _Block_copy(block), _Block_release);
}

static void set_function_handler(dispatch_source_t source, int which, dispatch_function_t f) {
  _loopdispatch_source_set_handler(source, which, f, NULL, NULL);
}

void dispatch_source_set_event_handler(dispatch_source_t source, dispatch_block_t handler) {
  set_block_handler(source, 0, handler);
}
void dispatch_source_set_event_handler_f(dispatch_source_t source, dispatch_function_t handler) {
  set_function_handler(source, 0, handler);
}
void dispatch_source_set_cancel_handler(dispatch_source_t source, dispatch_block_t handler) {
  set_block_handler(source, 1, handler);
}
void dispatch_source_set_cancel_handler_f(dispatch_source_t source, dispatch_function_t handler) {
  set_function_handler(source, 1, handler);
}
void dispatch_source_set_registration_handler(
    dispatch_source_t source, dispatch_block_t handler) {
  set_block_handler(source, 2, handler);
}
void dispatch_source_set_registration_handler_f(
    dispatch_source_t source, dispatch_function_t handler) {
  set_function_handler(source, 2, handler);
}

// ---- dispatch_debug ------------------------------------------------------------------------

// Implemented in Swift: writes a one-line description of `object` into `buffer`.
extern void _loopdispatch_describe(void *object, char *buffer, size_t size);

void dispatch_debugv(dispatch_object_t object, const char *message, va_list arguments) {
  char description[256];
  _loopdispatch_describe(object._do, description, sizeof description);
  char text[512];
  vsnprintf(text, sizeof text, message, arguments);
  fprintf(stderr, "%s: %s\n", description, text);
}

void dispatch_debug(dispatch_object_t object, const char *message, ...) {
  va_list arguments;
  va_start(arguments, message);
  dispatch_debugv(object, message, arguments);
  va_end(arguments);
}
