// The header compiles and links from C++ too (blocks with clang++ -fblocks).
#include <dispatch/dispatch.h>
#include <cstdio>
#include <cstdlib>
int main() {
  dispatch_queue_t q = dispatch_queue_create("cxx", DISPATCH_QUEUE_SERIAL);
  __block int n = 0;
  dispatch_sync(q, ^{ n = 42; });
  dispatch_group_t g = dispatch_group_create();
  dispatch_group_async(g, q, ^{ n++; });
  dispatch_group_wait(g, DISPATCH_TIME_FOREVER);
  dispatch_release(g);
  dispatch_release(q);
  std::printf("n=%d\n", n);
  return n == 43 ? 0 : 1;
}
