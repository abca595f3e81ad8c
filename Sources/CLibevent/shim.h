// The libevent API as Swift sees it. Macros that Swift cannot import are wrapped inline here.
#ifndef LOOPDISPATCH_CLIBEVENT_SHIM_H
#define LOOPDISPATCH_CLIBEVENT_SHIM_H

// System headers first: libevent's event-config.h defines _GNU_SOURCE, and a system header
// first seen after that would be imported with other feature macros than Glibc's module,
// which clang rejects as two different definitions (for example of fd_set).
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <sys/eventfd.h>

// EV_* flags are plain #defines of int; re-export them as typed constants.
static const short cl_ev_timeout = EV_TIMEOUT;
static const short cl_ev_read = EV_READ;
static const short cl_ev_write = EV_WRITE;
static const short cl_ev_signal = EV_SIGNAL;
static const short cl_ev_persist = EV_PERSIST;
static const int cl_evloop_once = EVLOOP_ONCE;
static const int cl_evloop_nonblock = EVLOOP_NONBLOCK;

#endif
