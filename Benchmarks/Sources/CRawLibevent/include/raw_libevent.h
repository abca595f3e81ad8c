// Raw libevent baselines, written directly in C: what LoopDispatch's MainLoop is measured
// against. No locks, no Swift, no allocation in the hot path.
#ifndef LOOPDISPATCH_RAW_LIBEVENT_H
#define LOOPDISPATCH_RAW_LIBEVENT_H

/// One-loop socketpair ping-pong.
///
/// One event_base (epoll, EVENT_BASE_FLAG_NOLOCK), an AF_UNIX stream socketpair (both ends
/// non-blocking) and one persistent EV_READ event per end. End A writes one byte; B's callback
/// reads it and writes one byte back; A's callback reads it and writes again, until
/// `round_trips` round trips have completed. Driven by event_base_dispatch and stopped with
/// event_base_loopbreak.
///
/// Returns nanoseconds per round trip (CLOCK_MONOTONIC, from the first write until the loop
/// returns), or a negative value if setup or I/O failed (errno is left set). Unless
/// `cpu_ns_per_round_trip` is NULL, it receives the process's CPU time (user + system,
/// getrusage RUSAGE_SELF) over the same interval, in nanoseconds per round trip.
double raw_libevent_pingpong(int round_trips, double *cpu_ns_per_round_trip);

/// The libevent version string of the linked library, e.g. "2.1.12-stable".
const char *raw_libevent_version(void);

#endif
