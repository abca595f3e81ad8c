// dispatch_data_t: creation with each destructor, size, concatenation and subranges (which
// share memory: the custom destructor runs once, only after the last object that uses its
// buffer is released), maps, apply and copy_region, and the empty object. Both libraries
// must print the same lines.
#include "diff_compat.h"

#include <sys/mman.h>

static dispatch_semaphore_t destructed;
static atomic_int destructor_runs;

static void say_bytes(const char *name, dispatch_data_t data) {
  const void *buffer = NULL;
  size_t size = 0;
  dispatch_data_t map = dispatch_data_create_map(data, &buffer, &size);
  printf("%s: size %zu \"%.*s\"\n", name, size, (int)size, (const char *)buffer);
  dispatch_release(map);
}

static size_t region_count(dispatch_data_t data) {
  __block size_t count = 0;
  dispatch_data_apply(data, ^bool(dispatch_data_t region, size_t offset, const void *buffer,
                                  size_t size) {
    (void)region, (void)offset, (void)buffer, (void)size;
    count++;
    return true;
  });
  return count;
}

int main(void) {
  destructed = dispatch_semaphore_create(0);
  dispatch_queue_t queue = dispatch_queue_create("data.destructor", NULL);

  // DEFAULT copies: changing the source afterwards changes nothing.
  char source[] = "hello";
  dispatch_data_t copied = dispatch_data_create(source, 5, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  source[0] = 'J';
  say_bytes("copied", copied);
  SAY("copied size", "%zu", dispatch_data_get_size(copied));

  // FREE and MUNMAP adopt the memory.
  char *heap = malloc(6);
  memcpy(heap, "world!", 6);
  dispatch_data_t freed = dispatch_data_create(heap, 6, NULL, DISPATCH_DATA_DESTRUCTOR_FREE);
  say_bytes("free", freed);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *mapped = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memcpy(mapped, "mapped", 6);
  dispatch_data_t unmapped = dispatch_data_create(mapped, 6, NULL, DISPATCH_DATA_DESTRUCTOR_MUNMAP);
  say_bytes("munmap", unmapped);

  // A custom destructor runs once, on its queue, after the last object sharing the buffer.
  static const char fixed[] = "0123456789";
  dispatch_data_t custom = dispatch_data_create(fixed, 10, queue, ^{
    atomic_fetch_add(&destructor_runs, 1);
    dispatch_semaphore_signal(destructed);
  });
  dispatch_data_t tail = dispatch_data_create_subrange(custom, 4, 100);  // clamped: "456789"
  dispatch_data_t joined = dispatch_data_create_concat(copied, tail);
  say_bytes("subrange clamped", tail);
  say_bytes("concat", joined);
  SAY("concat regions", "%zu", region_count(joined));
  dispatch_release(custom);
  dispatch_release(tail);
  SAY("destructor runs while shared", "%d", atomic_load(&destructor_runs));
  dispatch_data_t middle = dispatch_data_create_subrange(joined, 3, 4);  // "lo45"
  say_bytes("subrange across regions", middle);
  SAY("subrange regions", "%zu", region_count(middle));
  dispatch_release(joined);
  SAY("destructor runs while a subrange lives", "%d", atomic_load(&destructor_runs));
  dispatch_release(middle);
  long waited = dispatch_semaphore_wait(
      destructed, dispatch_time(DISPATCH_TIME_NOW, 10 * (int64_t)NSEC_PER_SEC));
  SAY("destructor ran after the last release", "%s", waited == 0 ? "yes" : "no");
  SAY("destructor runs", "%d", atomic_load(&destructor_runs));

  // Maps: a one-region object maps onto its own memory; several regions are copied.
  const void *buffer = NULL;
  size_t size = 0;
  dispatch_data_t map = dispatch_data_create_map(freed, &buffer, &size);
  SAY("map of one region is the same memory", "%s", buffer == (const void *)heap ? "yes" : "no");
  SAY("map regions", "%zu", region_count(map));
  dispatch_release(map);
  dispatch_data_t three = dispatch_data_create_concat(freed, unmapped);
  dispatch_data_t four = dispatch_data_create_concat(three, copied);
  map = dispatch_data_create_map(four, &buffer, &size);
  printf("map of three regions: %zu \"%.*s\", %zu region\n", size, (int)size,
         (const char *)buffer, region_count(map));
  dispatch_release(map);

  // apply: regions in order with their offsets; stopping early returns false.
  __block int calls = 0;
  bool finished = dispatch_data_apply(four, ^bool(dispatch_data_t region, size_t offset,
                                                  const void *bytes, size_t length) {
    calls++;
    printf("apply region at %zu: %zu bytes \"%.*s\", region size %zu\n", offset, length,
           (int)length, (const char *)bytes, dispatch_data_get_size(region));
    return true;
  });
  SAY("apply finished", "%s calls %d", finished ? "true" : "false", calls);
  calls = 0;
  finished = dispatch_data_apply(four, ^bool(dispatch_data_t region, size_t offset,
                                             const void *bytes, size_t length) {
    (void)region, (void)offset, (void)bytes, (void)length;
    calls++;
    return false;
  });
  SAY("apply stopped", "%s calls %d", finished ? "true" : "false", calls);

  // copy_region: the region holding a location, and its offset.
  size_t locations[] = {0, 5, 6, 11, 12, 16, 17, 100};
  for (size_t i = 0; i < sizeof locations / sizeof locations[0]; i++) {
    size_t offset = 999;
    dispatch_data_t region = dispatch_data_copy_region(four, locations[i], &offset);
    printf("copy_region at %zu: offset %zu, size %zu, empty %s\n", locations[i], offset,
           dispatch_data_get_size(region), region == dispatch_data_empty ? "yes" : "no");
    dispatch_release(region);
  }
  dispatch_release(three);
  dispatch_release(four);

  // The empty object: size 0, one object, and retain/release leave it alone.
  SAY("empty size", "%zu", dispatch_data_get_size(dispatch_data_empty));
  dispatch_retain(dispatch_data_empty);
  dispatch_release(dispatch_data_empty);
  dispatch_release(dispatch_data_empty);
  dispatch_data_t nothing = dispatch_data_create("", 0, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
  SAY("create of 0 bytes is the empty object", "%s", nothing == dispatch_data_empty ? "yes" : "no");
  dispatch_data_t none = dispatch_data_create(fixed, 0, queue, ^{
    dispatch_semaphore_signal(destructed);
  });
  waited = dispatch_semaphore_wait(
      destructed, dispatch_time(DISPATCH_TIME_NOW, 10 * (int64_t)NSEC_PER_SEC));
  SAY("create of 0 bytes runs the destructor", "%s", waited == 0 ? "yes" : "no");
  SAY("and is the empty object", "%s", none == dispatch_data_empty ? "yes" : "no");
  dispatch_data_t same = dispatch_data_create_concat(dispatch_data_empty, copied);
  say_bytes("concat with empty", same);
  dispatch_release(same);
  dispatch_data_t cut = dispatch_data_create_subrange(copied, 5, 1);
  SAY("subrange at the end", "%zu %s", dispatch_data_get_size(cut),
      cut == dispatch_data_empty ? "empty" : "object");
  dispatch_release(cut);
  map = dispatch_data_create_map(dispatch_data_empty, &buffer, &size);
  SAY("map of empty", "%zu", size);
  dispatch_release(map);

  dispatch_release(copied);
  dispatch_release(freed);
  // `unmapped` stays alive to the exit: libdispatch on Linux has no MUNMAP case in
  // _dispatch_data_destroy_buffer (data.c: only FREE and NONE, VM_DEALLOCATE under Mach), so
  // it submits DISPATCH_DATA_DESTRUCTOR_MUNMAP as a block, and that block traps. Released
  // here, the reference build died with SIGILL whenever a worker ran it before the process
  // exited (2 runs in 60). Tests/CAPI's test_data checks that ours unmaps the page.
  dispatch_release(queue);
  dispatch_release(destructed);
  return 0;
}
