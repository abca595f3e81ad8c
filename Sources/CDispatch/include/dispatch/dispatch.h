/*
 * LoopDispatch's C interface: the core of Grand Central Dispatch's C API, source-compatible
 * with libdispatch's public headers for the functions below, implemented on LoopDispatch
 * (Swift, on a libevent loop). Written from the documented API.
 *
 * Build with clang and -fblocks; link with the flags `pkg-config --libs loopdispatch` prints
 * (the library, BlocksRuntime and the Swift runtime).
 *
 * Every difference from libdispatch that remains is listed, with its reason, in the DocC
 * article "The C API and libdispatch" (Sources/LoopDispatch/LoopDispatch.docc/CAPI.md). The
 * main ones, on purpose: dispatch_main() runs the main queue inside a
 * libevent loop on the real main thread (it never calls pthread_exit), and misuse crashes
 * with a line that starts "BUG IN CLIENT OF LOOPDISPATCH:".
 */
#ifndef LOOPDISPATCH_DISPATCH_H
#define LOOPDISPATCH_DISPATCH_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* The API version this header provides (libdispatch's numbering: a date). */
#define DISPATCH_API_VERSION 20181008
#define LOOPDISPATCH_API_VERSION 1

#ifdef __cplusplus
#define DISPATCH_C_BEGIN extern "C" {
#define DISPATCH_C_END }
#else
#define DISPATCH_C_BEGIN
#define DISPATCH_C_END
#endif

#define DISPATCH_EXPORT extern __attribute__((visibility("default")))
#define DISPATCH_NOTHROW __attribute__((__nothrow__))
#define DISPATCH_NONNULL_ALL __attribute__((__nonnull__))
#define DISPATCH_NORETURN __attribute__((__noreturn__))
#define DISPATCH_WARN_RESULT __attribute__((__warn_unused_result__))
#define DISPATCH_RETURNS_RETAINED
#define DISPATCH_NOESCAPE __attribute__((__noescape__))
#define DISPATCH_DEPRECATED __attribute__((__deprecated__))
#define DISPATCH_INLINE static __inline__
#define DISPATCH_ALWAYS_INLINE __attribute__((__always_inline__))
#define DISPATCH_EXPECT(x, v) __builtin_expect((x), (v))

DISPATCH_C_BEGIN

/* ---- Objects ------------------------------------------------------------------------- */

typedef struct dispatch_object_s *dispatch_object_s_ptr;
typedef struct dispatch_queue_s *dispatch_queue_t;
typedef struct dispatch_queue_s *dispatch_queue_global_t;
typedef struct dispatch_queue_s *dispatch_queue_main_t;
typedef struct dispatch_queue_s *dispatch_queue_serial_t;
typedef struct dispatch_queue_s *dispatch_queue_concurrent_t;
typedef struct dispatch_group_s *dispatch_group_t;
typedef struct dispatch_semaphore_s *dispatch_semaphore_t;
typedef struct dispatch_source_s *dispatch_source_t;
typedef struct dispatch_queue_attr_s *dispatch_queue_attr_t;
typedef struct dispatch_data_s *dispatch_data_t;
typedef struct dispatch_io_s *dispatch_io_t;

/* Any dispatch object, in C: a transparent union, so every object type converts to it. */
#ifdef __cplusplus
typedef void *dispatch_object_t;
#else
typedef union {
  struct dispatch_object_s *_do;
  struct dispatch_queue_s *_dq;
  struct dispatch_group_s *_dg;
  struct dispatch_semaphore_s *_dsema;
  struct dispatch_source_s *_ds;
  struct dispatch_queue_attr_s *_dqa;
  struct dispatch_data_s *_ddata;
  struct dispatch_io_s *_dchannel;
} dispatch_object_t __attribute__((__transparent_union__));
#endif

typedef void (*dispatch_function_t)(void *);

/* BlocksRuntime's copy and release (as <Block.h> declares them; the toolchain ships the
 * library, not always the header). */
DISPATCH_EXPORT void *_Block_copy(const void *block);
DISPATCH_EXPORT void _Block_release(const void *block);
#ifndef Block_copy
#define Block_copy(...) ((__typeof(__VA_ARGS__))_Block_copy((const void *)(__VA_ARGS__)))
#endif
#ifndef Block_release
#define Block_release(...) _Block_release((const void *)(__VA_ARGS__))
#endif
typedef void (^dispatch_block_t)(void);
typedef int dispatch_fd_t;

DISPATCH_EXPORT void dispatch_retain(dispatch_object_t object);
DISPATCH_EXPORT void dispatch_release(dispatch_object_t object);
DISPATCH_EXPORT void *dispatch_get_context(dispatch_object_t object);
DISPATCH_EXPORT void dispatch_set_context(dispatch_object_t object, void *context);
DISPATCH_EXPORT void dispatch_set_finalizer_f(
    dispatch_object_t object, dispatch_function_t finalizer);
DISPATCH_EXPORT void dispatch_activate(dispatch_object_t object);
DISPATCH_EXPORT void dispatch_suspend(dispatch_object_t object);
DISPATCH_EXPORT void dispatch_resume(dispatch_object_t object);

/* ---- Time ---------------------------------------------------------------------------- */

typedef uint64_t dispatch_time_t;
#define DISPATCH_TIME_NOW (0ull)
#define DISPATCH_TIME_FOREVER (~0ull)
#define DISPATCH_WALLTIME_NOW (~1ull)
#define NSEC_PER_SEC 1000000000ull
#define NSEC_PER_MSEC 1000000ull
#define USEC_PER_SEC 1000000ull
#define NSEC_PER_USEC 1000ull

DISPATCH_EXPORT dispatch_time_t dispatch_time(dispatch_time_t when, int64_t delta);
DISPATCH_EXPORT dispatch_time_t dispatch_walltime(
    const struct timespec *when, int64_t delta);

/* ---- Queues -------------------------------------------------------------------------- */

#define DISPATCH_QUEUE_SERIAL ((dispatch_queue_attr_t)0)
#define DISPATCH_QUEUE_SERIAL_INACTIVE dispatch_queue_attr_make_initially_inactive(DISPATCH_QUEUE_SERIAL)
#define DISPATCH_QUEUE_CONCURRENT (&_dispatch_queue_attr_concurrent)
#define DISPATCH_QUEUE_CONCURRENT_INACTIVE \
  dispatch_queue_attr_make_initially_inactive(DISPATCH_QUEUE_CONCURRENT)
DISPATCH_EXPORT struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent;

#define DISPATCH_QUEUE_PRIORITY_HIGH 2
#define DISPATCH_QUEUE_PRIORITY_DEFAULT 0
#define DISPATCH_QUEUE_PRIORITY_LOW (-2)
#define DISPATCH_QUEUE_PRIORITY_BACKGROUND INT16_MIN
typedef long dispatch_queue_priority_t;

/* As libdispatch's Linux header: the QoS classes are plain numbers (qos_class_t and the
 * QOS_CLASS_* names belong to <sys/qos.h>, which Linux does not have; programs that need them
 * define them, so this header must not). */
#if __has_include(<sys/qos.h>)
#include <sys/qos.h>
typedef qos_class_t dispatch_qos_class_t;
#else
typedef unsigned int dispatch_qos_class_t;
#endif

DISPATCH_EXPORT dispatch_queue_t dispatch_queue_create(
    const char *label, dispatch_queue_attr_t attr);
DISPATCH_EXPORT dispatch_queue_global_t dispatch_get_global_queue(
    intptr_t identifier, uintptr_t flags);
DISPATCH_EXPORT dispatch_queue_main_t dispatch_get_main_queue(void);
DISPATCH_EXPORT DISPATCH_DEPRECATED dispatch_queue_t dispatch_get_current_queue(void);
#define DISPATCH_CURRENT_QUEUE_LABEL NULL
DISPATCH_EXPORT const char *dispatch_queue_get_label(dispatch_queue_t queue);
DISPATCH_EXPORT void dispatch_set_target_queue(
    dispatch_object_t object, dispatch_queue_t queue);
DISPATCH_EXPORT dispatch_queue_attr_t dispatch_queue_attr_make_initially_inactive(
    dispatch_queue_attr_t attr);
DISPATCH_EXPORT dispatch_queue_attr_t dispatch_queue_attr_make_with_qos_class(
    dispatch_queue_attr_t attr, dispatch_qos_class_t qos_class, int relative_priority);

/* Autorelease pools do not exist on Linux: the frequency is accepted and has no effect. */
typedef unsigned long dispatch_autorelease_frequency_t;
#define DISPATCH_AUTORELEASE_FREQUENCY_INHERIT 0ul
#define DISPATCH_AUTORELEASE_FREQUENCY_WORK_ITEM 1ul
#define DISPATCH_AUTORELEASE_FREQUENCY_NEVER 2ul
DISPATCH_EXPORT dispatch_queue_attr_t dispatch_queue_attr_make_with_autorelease_frequency(
    dispatch_queue_attr_t attr, dispatch_autorelease_frequency_t frequency);
#define DISPATCH_QUEUE_SERIAL_WITH_AUTORELEASE_POOL \
  dispatch_queue_attr_make_with_autorelease_frequency( \
      DISPATCH_QUEUE_SERIAL, DISPATCH_AUTORELEASE_FREQUENCY_WORK_ITEM)
#define DISPATCH_QUEUE_CONCURRENT_WITH_AUTORELEASE_POOL \
  dispatch_queue_attr_make_with_autorelease_frequency( \
      DISPATCH_QUEUE_CONCURRENT, DISPATCH_AUTORELEASE_FREQUENCY_WORK_ITEM)

/* The QoS class the queue was created with (QOS_CLASS_UNSPECIFIED, 0, when none was given);
 * `relative_priority_ptr`, if not NULL, receives 0. */
DISPATCH_EXPORT dispatch_qos_class_t dispatch_queue_get_qos_class(
    dispatch_queue_t queue, int *relative_priority_ptr);

/* dispatch_set_target_queue's "the default target": the default-priority global queue. */
#define DISPATCH_TARGET_QUEUE_DEFAULT NULL

DISPATCH_EXPORT void dispatch_async(dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_async_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work);
DISPATCH_EXPORT void dispatch_sync(dispatch_queue_t queue, DISPATCH_NOESCAPE dispatch_block_t block);
DISPATCH_EXPORT void dispatch_sync_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work);
DISPATCH_EXPORT void dispatch_barrier_async(dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_barrier_async_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work);
DISPATCH_EXPORT void dispatch_barrier_sync(
    dispatch_queue_t queue, DISPATCH_NOESCAPE dispatch_block_t block);
DISPATCH_EXPORT void dispatch_barrier_sync_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work);

/* Like dispatch_sync (libdispatch's "run on the queue, wait for it"). */
DISPATCH_EXPORT void dispatch_async_and_wait(
    dispatch_queue_t queue, DISPATCH_NOESCAPE dispatch_block_t block);
DISPATCH_EXPORT void dispatch_async_and_wait_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work);
DISPATCH_EXPORT void dispatch_barrier_async_and_wait(
    dispatch_queue_t queue, DISPATCH_NOESCAPE dispatch_block_t block);
DISPATCH_EXPORT void dispatch_barrier_async_and_wait_f(
    dispatch_queue_t queue, void *context, dispatch_function_t work);

DISPATCH_EXPORT dispatch_queue_t dispatch_queue_create_with_target(
    const char *label, dispatch_queue_attr_t attr, dispatch_queue_t target);

/* Crash with a "BUG IN CLIENT OF LOOPDISPATCH:" line unless the caller runs on `queue`
 * (dispatch_assert_queue), runs there as a barrier (dispatch_assert_queue_barrier), or does
 * not run on it (dispatch_assert_queue_not). */
DISPATCH_EXPORT void dispatch_assert_queue(dispatch_queue_t queue);
DISPATCH_EXPORT void dispatch_assert_queue_barrier(dispatch_queue_t queue);
DISPATCH_EXPORT void dispatch_assert_queue_not(dispatch_queue_t queue);
#ifdef NDEBUG
#define dispatch_assert_queue_debug(q) ((void)(0 && (q)))
#define dispatch_assert_queue_barrier_debug(q) ((void)(0 && (q)))
#define dispatch_assert_queue_not_debug(q) ((void)(0 && (q)))
#else
#define dispatch_assert_queue_debug(q) dispatch_assert_queue(q)
#define dispatch_assert_queue_barrier_debug(q) dispatch_assert_queue_barrier(q)
#define dispatch_assert_queue_not_debug(q) dispatch_assert_queue_not(q)
#endif

#define DISPATCH_APPLY_AUTO ((dispatch_queue_t)0)
DISPATCH_EXPORT void dispatch_apply(
    size_t iterations, dispatch_queue_t queue, DISPATCH_NOESCAPE void (^block)(size_t));
DISPATCH_EXPORT void dispatch_apply_f(
    size_t iterations, dispatch_queue_t queue, void *context,
    void (*work)(void *, size_t));

DISPATCH_EXPORT void dispatch_after(
    dispatch_time_t when, dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_after_f(
    dispatch_time_t when, dispatch_queue_t queue, void *context,
    dispatch_function_t work);

DISPATCH_EXPORT void dispatch_queue_set_specific(
    dispatch_queue_t queue, const void *key, void *context,
    dispatch_function_t destructor);
DISPATCH_EXPORT void *dispatch_queue_get_specific(dispatch_queue_t queue, const void *key);
DISPATCH_EXPORT void *dispatch_get_specific(const void *key);

/* Runs the main queue on the calling (main) thread inside LoopDispatch's libevent loop;
 * never returns. */
DISPATCH_EXPORT DISPATCH_NORETURN void dispatch_main(void);

/* LoopDispatch extension: the main loop's libevent `struct event_base *`, for adding C
 * events beside the main queue. Use it on the main thread only. */
DISPATCH_EXPORT void *loopdispatch_main_event_base(void);

/* ---- Groups -------------------------------------------------------------------------- */

DISPATCH_EXPORT dispatch_group_t dispatch_group_create(void);
DISPATCH_EXPORT void dispatch_group_enter(dispatch_group_t group);
DISPATCH_EXPORT void dispatch_group_leave(dispatch_group_t group);
DISPATCH_EXPORT void dispatch_group_async(
    dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_group_async_f(
    dispatch_group_t group, dispatch_queue_t queue, void *context,
    dispatch_function_t work);
/* Returns 0 when the group emptied, non-zero when `timeout` passed first. */
DISPATCH_EXPORT intptr_t dispatch_group_wait(dispatch_group_t group, dispatch_time_t timeout);
DISPATCH_EXPORT void dispatch_group_notify(
    dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block);
DISPATCH_EXPORT void dispatch_group_notify_f(
    dispatch_group_t group, dispatch_queue_t queue, void *context,
    dispatch_function_t work);

/* ---- Semaphores ---------------------------------------------------------------------- */

DISPATCH_EXPORT dispatch_semaphore_t dispatch_semaphore_create(intptr_t value);
/* Returns 0 on success, non-zero when `timeout` passed first. */
DISPATCH_EXPORT intptr_t dispatch_semaphore_wait(dispatch_semaphore_t dsema, dispatch_time_t timeout);
/* Returns non-zero if a waiter was woken. */
DISPATCH_EXPORT intptr_t dispatch_semaphore_signal(dispatch_semaphore_t dsema);

/* ---- Once ---------------------------------------------------------------------------- */

typedef intptr_t dispatch_once_t;
DISPATCH_EXPORT void dispatch_once(dispatch_once_t *predicate, DISPATCH_NOESCAPE dispatch_block_t block);
DISPATCH_EXPORT void dispatch_once_f(
    dispatch_once_t *predicate, void *context, dispatch_function_t function);

/* ---- Dispatch block objects ------------------------------------------------------- */

typedef unsigned long dispatch_block_flags_t;
#define DISPATCH_BLOCK_BARRIER 0x1ul
#define DISPATCH_BLOCK_DETACHED 0x2ul
#define DISPATCH_BLOCK_ASSIGN_CURRENT 0x4ul
#define DISPATCH_BLOCK_NO_QOS_CLASS 0x8ul
#define DISPATCH_BLOCK_INHERIT_QOS_CLASS 0x10ul
#define DISPATCH_BLOCK_ENFORCE_QOS_CLASS 0x20ul

/* A new block (release it with Block_release) that can be cancelled, waited on and observed.
 * It may be submitted and called any number of times; waiting on or observing one that ran
 * more than once is a client bug (as in libdispatch). dispatch_block_cancel is not a
 * completion: a cancelled block completes when it is next invoked (its work skipped), and a
 * block released without running runs its notifications. A DISPATCH_BLOCK_BARRIER block runs
 * as a barrier however it reaches a concurrent queue (async, sync, async_and_wait, after, the
 * group calls). Unknown flags, an unknown QoS class or a relative priority outside -15...0
 * give NULL. QoS flags are accepted and not modelled further. */
DISPATCH_EXPORT dispatch_block_t dispatch_block_create(
    dispatch_block_flags_t flags, dispatch_block_t block);
DISPATCH_EXPORT dispatch_block_t dispatch_block_create_with_qos_class(
    dispatch_block_flags_t flags, dispatch_qos_class_t qos_class, int relative_priority,
    dispatch_block_t block);
DISPATCH_EXPORT void dispatch_block_perform(
    dispatch_block_flags_t flags, DISPATCH_NOESCAPE dispatch_block_t block);
/* Returns 0 once the block has been invoked (run, or skipped as cancelled), non-zero when
 * `timeout` passed first. */
DISPATCH_EXPORT intptr_t dispatch_block_wait(dispatch_block_t block, dispatch_time_t timeout);
DISPATCH_EXPORT void dispatch_block_notify(
    dispatch_block_t block, dispatch_queue_t queue, dispatch_block_t notification_block);
DISPATCH_EXPORT void dispatch_block_cancel(dispatch_block_t block);
DISPATCH_EXPORT intptr_t dispatch_block_testcancel(dispatch_block_t block);

/* ---- Sources ------------------------------------------------------------------------ */

typedef const struct dispatch_source_type_s *dispatch_source_type_t;
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_read;
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_write;
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_timer;
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_signal;
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_data_add;
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_data_or;
#define DISPATCH_SOURCE_TYPE_READ (&_dispatch_source_type_read)
#define DISPATCH_SOURCE_TYPE_WRITE (&_dispatch_source_type_write)
#define DISPATCH_SOURCE_TYPE_TIMER (&_dispatch_source_type_timer)
#define DISPATCH_SOURCE_TYPE_SIGNAL (&_dispatch_source_type_signal)
#define DISPATCH_SOURCE_TYPE_DATA_ADD (&_dispatch_source_type_data_add)
#define DISPATCH_SOURCE_TYPE_DATA_OR (&_dispatch_source_type_data_or)
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_data_replace;
#define DISPATCH_SOURCE_TYPE_DATA_REPLACE (&_dispatch_source_type_data_replace)
#define DISPATCH_TIMER_STRICT 0x1

/* The exit of a process (handle: its pid_t; mask: DISPATCH_PROC_EXIT), watched through a
 * pidfd (Linux 5.3+): fires once, with data DISPATCH_PROC_EXIT, and does not reap (waitpid
 * still returns the child's status). NULL if no such process exists (or it was reaped) or the
 * kernel lacks pidfd_open. Linux cannot report FORK, EXEC or SIGNAL: a mask with any of them,
 * with unknown bits, or without EXIT is a client bug (libdispatch on Linux has no PROC type). */
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_proc;
#define DISPATCH_SOURCE_TYPE_PROC (&_dispatch_source_type_proc)
#define DISPATCH_PROC_EXIT 0x80000000
#define DISPATCH_PROC_FORK 0x40000000
#define DISPATCH_PROC_EXEC 0x20000000
#define DISPATCH_PROC_SIGNAL 0x08000000
typedef unsigned long dispatch_source_proc_flags_t;

/* Memory pressure from Linux PSI triggers (handle 0; mask: the levels to report; data: the
 * levels seen since the last handler run). WARN: some task stalled on memory 300 ms of a 2 s
 * window; CRITICAL: all non-idle tasks stalled 200 ms of a 2 s window; NORMAL: 4 s with no
 * WARN/CRITICAL report after one. NULL where the kernel has no pressure stall information (no
 * /proc/pressure/memory) or refuses the trigger. Unknown bits or an empty mask are a client
 * bug (libdispatch on Linux has no MEMORYPRESSURE type). */
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_memorypressure;
#define DISPATCH_SOURCE_TYPE_MEMORYPRESSURE (&_dispatch_source_type_memorypressure)
#define DISPATCH_MEMORYPRESSURE_NORMAL 0x01
#define DISPATCH_MEMORYPRESSURE_WARN 0x02
#define DISPATCH_MEMORYPRESSURE_CRITICAL 0x04
typedef unsigned long dispatch_source_memorypressure_flags_t;
/* Changes to the file a descriptor names (LoopDispatch watches it through inotify; libdispatch
 * on Linux has no VNODE type). The handle is an open descriptor (any access mode), the mask a
 * set of DISPATCH_VNODE_* flags; dispatch_source_get_data returns the flags seen since the last
 * handler run. NULL for a descriptor that is not open or when inotify refuses (its limits:
 * /proc/sys/fs/inotify/max_user_watches, max_user_instances). DISPATCH_VNODE_FUNLOCK, or any
 * other bit, is a client bug (a crash): inotify reports no lock releases. An unlink of the
 * last name reports DELETE at once although the descriptor keeps the file open. See the
 * reference's FileSource for how each flag is recognised and what inotify cannot see. */
DISPATCH_EXPORT const struct dispatch_source_type_s _dispatch_source_type_vnode;
#define DISPATCH_SOURCE_TYPE_VNODE (&_dispatch_source_type_vnode)
typedef unsigned long dispatch_source_vnode_flags_t;
#define DISPATCH_VNODE_DELETE 0x1
#define DISPATCH_VNODE_WRITE 0x2
#define DISPATCH_VNODE_EXTEND 0x4
#define DISPATCH_VNODE_ATTRIB 0x8
#define DISPATCH_VNODE_LINK 0x10
#define DISPATCH_VNODE_RENAME 0x20
#define DISPATCH_VNODE_REVOKE 0x40
#define DISPATCH_VNODE_FUNLOCK 0x100

/* Returns NULL when the source cannot be made (a bad descriptor or signal number, or a handle
 * or mask the type does not take, as libdispatch refuses them). A new source is inactive:
 * dispatch_activate or dispatch_resume starts it. Every handler, the cancel handler included,
 * waits while the source is inactive or suspended; a registration handler set after
 * activation runs at once; an _f handler gets the source's context as it was at activation;
 * the target may be changed (dispatch_set_target_queue) until activation; the last
 * dispatch_release of a source cancels it. */
DISPATCH_EXPORT dispatch_source_t dispatch_source_create(
    dispatch_source_type_t type, uintptr_t handle, uintptr_t mask, dispatch_queue_t queue);
DISPATCH_EXPORT void dispatch_source_set_event_handler(
    dispatch_source_t source, dispatch_block_t handler);
DISPATCH_EXPORT void dispatch_source_set_event_handler_f(
    dispatch_source_t source, dispatch_function_t handler);
DISPATCH_EXPORT void dispatch_source_set_cancel_handler(
    dispatch_source_t source, dispatch_block_t handler);
DISPATCH_EXPORT void dispatch_source_set_cancel_handler_f(
    dispatch_source_t source, dispatch_function_t handler);
DISPATCH_EXPORT void dispatch_source_set_registration_handler(
    dispatch_source_t source, dispatch_block_t handler);
DISPATCH_EXPORT void dispatch_source_set_registration_handler_f(
    dispatch_source_t source, dispatch_function_t handler);
DISPATCH_EXPORT void dispatch_source_cancel(dispatch_source_t source);
DISPATCH_EXPORT intptr_t dispatch_source_testcancel(dispatch_source_t source);
DISPATCH_EXPORT uintptr_t dispatch_source_get_data(dispatch_source_t source);
DISPATCH_EXPORT uintptr_t dispatch_source_get_handle(dispatch_source_t source);
DISPATCH_EXPORT uintptr_t dispatch_source_get_mask(dispatch_source_t source);
DISPATCH_EXPORT void dispatch_source_merge_data(dispatch_source_t source, uintptr_t value);
/* An `interval` of DISPATCH_TIME_FOREVER or 0 makes a one-shot timer; `start`
 * DISPATCH_TIME_FOREVER never fires. `leeway` is accepted and not used (timers are precise). */
DISPATCH_EXPORT void dispatch_source_set_timer(
    dispatch_source_t source, dispatch_time_t start, uint64_t interval, uint64_t leeway);

/* ---- Data ---------------------------------------------------------------------------- */

/* Immutable bytes in one or more regions of memory. Concatenation and subranges share the
 * regions (no copy); the destructor of memory adopted without a copy runs once, after the
 * last object that uses it is released. dispatch_data_empty is one object for the process,
 * which dispatch_retain and dispatch_release leave alone. */
DISPATCH_EXPORT struct dispatch_data_s _dispatch_data_empty;
#define dispatch_data_empty (&_dispatch_data_empty)

/* Destructors for dispatch_data_create: DEFAULT copies the buffer; FREE adopts it and calls
 * free(3) (the queue is ignored); MUNMAP adopts it and calls munmap(2) on the whole size;
 * any other block adopts it and is submitted to the queue (NULL: the default global queue). */
#define DISPATCH_DATA_DESTRUCTOR_DEFAULT NULL
DISPATCH_EXPORT const dispatch_block_t _dispatch_data_destructor_free;
DISPATCH_EXPORT const dispatch_block_t _dispatch_data_destructor_munmap;
#define DISPATCH_DATA_DESTRUCTOR_FREE (_dispatch_data_destructor_free)
#define DISPATCH_DATA_DESTRUCTOR_MUNMAP (_dispatch_data_destructor_munmap)

DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_data_t dispatch_data_create(
    const void *buffer, size_t size, dispatch_queue_t queue, dispatch_block_t destructor);
DISPATCH_EXPORT size_t dispatch_data_get_size(dispatch_data_t data);
DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_data_t dispatch_data_create_map(
    dispatch_data_t data, const void **buffer_ptr, size_t *size_ptr);
DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_data_t dispatch_data_create_concat(
    dispatch_data_t data1, dispatch_data_t data2);
DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_data_t dispatch_data_create_subrange(
    dispatch_data_t data, size_t offset, size_t length);
typedef bool (^dispatch_data_applier_t)(
    dispatch_data_t region, size_t offset, const void *buffer, size_t size);
DISPATCH_EXPORT bool dispatch_data_apply(
    dispatch_data_t data, DISPATCH_NOESCAPE dispatch_data_applier_t applier);
DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_data_t dispatch_data_copy_region(
    dispatch_data_t data, size_t location, size_t *offset_ptr);

/* ---- I/O channels ---------------------------------------------------------------------- */

/* Reads and writes of whole buffers on a descriptor. Sockets, pipes and terminals are read
 * and written when the event loop reports them ready (non-blocking for the channel's life);
 * regular files with pread/pwrite on a pool worker. Handlers get partial data between the
 * water marks and a last call with done; errors are errno values. */
#define DISPATCH_IO_STREAM 0
#define DISPATCH_IO_RANDOM 1
typedef unsigned long dispatch_io_type_t;
#define DISPATCH_IO_STOP 0x1
typedef unsigned long dispatch_io_close_flags_t;
#define DISPATCH_IO_STRICT_INTERVAL 0x1
typedef unsigned long dispatch_io_interval_flags_t;
typedef void (^dispatch_io_handler_t)(bool done, dispatch_data_t data, int error);

DISPATCH_EXPORT void dispatch_read(dispatch_fd_t fd, size_t length, dispatch_queue_t queue,
    void (^handler)(dispatch_data_t data, int error));
DISPATCH_EXPORT void dispatch_write(dispatch_fd_t fd, dispatch_data_t data,
    dispatch_queue_t queue, void (^handler)(dispatch_data_t data, int error));
DISPATCH_EXPORT dispatch_io_t dispatch_io_create(dispatch_io_type_t type, dispatch_fd_t fd,
    dispatch_queue_t queue, void (^cleanup_handler)(int error));
DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_io_t dispatch_io_create_with_path(
    dispatch_io_type_t type, const char *path, int oflag, mode_t mode, dispatch_queue_t queue,
    void (^cleanup_handler)(int error));
DISPATCH_EXPORT DISPATCH_WARN_RESULT dispatch_io_t dispatch_io_create_with_io(
    dispatch_io_type_t type, dispatch_io_t io, dispatch_queue_t queue,
    void (^cleanup_handler)(int error));
DISPATCH_EXPORT void dispatch_io_read(dispatch_io_t channel, off_t offset, size_t length,
    dispatch_queue_t queue, dispatch_io_handler_t io_handler);
DISPATCH_EXPORT void dispatch_io_write(dispatch_io_t channel, off_t offset,
    dispatch_data_t data, dispatch_queue_t queue, dispatch_io_handler_t io_handler);
DISPATCH_EXPORT void dispatch_io_close(dispatch_io_t channel, dispatch_io_close_flags_t flags);
DISPATCH_EXPORT void dispatch_io_barrier(dispatch_io_t channel, dispatch_block_t barrier);
DISPATCH_EXPORT dispatch_fd_t dispatch_io_get_descriptor(dispatch_io_t channel);
DISPATCH_EXPORT void dispatch_io_set_high_water(dispatch_io_t channel, size_t high_water);
DISPATCH_EXPORT void dispatch_io_set_low_water(dispatch_io_t channel, size_t low_water);
DISPATCH_EXPORT void dispatch_io_set_interval(
    dispatch_io_t channel, uint64_t interval, dispatch_io_interval_flags_t flags);

/* ---- Debugging ----------------------------------------------------------------------- */

DISPATCH_EXPORT void dispatch_debug(dispatch_object_t object, const char *message, ...)
    __attribute__((__format__(printf, 2, 3)));
DISPATCH_EXPORT void dispatch_debugv(
    dispatch_object_t object, const char *message, va_list arguments)
    __attribute__((__format__(printf, 2, 0)));

/* ---- Generic forms (C11 _Generic, as libdispatch's object.h) --------------------------- */

#if !defined(__cplusplus) && __has_extension(c_generic_selections)
#define dispatch_wait(object, timeout) \
  _Generic((object), \
      dispatch_block_t: dispatch_block_wait, \
      dispatch_group_t: dispatch_group_wait, \
      dispatch_semaphore_t: dispatch_semaphore_wait)((object), (timeout))
#define dispatch_notify(object, queue, notification_block) \
  _Generic((object), \
      dispatch_block_t: dispatch_block_notify, \
      dispatch_group_t: dispatch_group_notify)((object), (queue), (notification_block))
#define dispatch_cancel(object) \
  _Generic((object), \
      dispatch_block_t: dispatch_block_cancel, \
      dispatch_source_t: dispatch_source_cancel)((object))
#define dispatch_testcancel(object) \
  _Generic((object), \
      dispatch_block_t: dispatch_block_testcancel, \
      dispatch_source_t: dispatch_source_testcancel)((object))
#endif

DISPATCH_C_END

#endif /* LOOPDISPATCH_DISPATCH_H */
