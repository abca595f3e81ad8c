// The one definition of each thread-local slot (see include/thread_slots.h).
#include "thread_slots.h"

__thread void *lds_frame LDS_THREAD_SLOT = 0;
__thread void *lds_name_state LDS_THREAD_SLOT = 0;
__thread void *lds_worker LDS_THREAD_SLOT = 0;
__thread int lds_driver LDS_THREAD_SLOT = 0;
__thread int lds_owes_wake LDS_THREAD_SLOT = 0;
__thread struct lds_node_cache lds_node_cache_slot LDS_THREAD_SLOT = {0, 0, 0, 0, 0};
__thread void *lds_sync_waiter LDS_THREAD_SLOT = 0;
__thread void *lds_diverted_drain LDS_THREAD_SLOT = 0;
__thread unsigned long long lds_stamp_state LDS_THREAD_SLOT = 0;
__thread unsigned long long lds_stamps_taken LDS_THREAD_SLOT = 0;
