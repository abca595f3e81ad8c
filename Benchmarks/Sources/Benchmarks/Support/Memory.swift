import Glibc

/// The process's memory as the kernel sees it.
enum Memory {
  /// Resident set size in bytes: the second field of `/proc/self/statm`, in pages.
  static func residentBytes() -> Int {
    guard let file = fopen("/proc/self/statm", "r") else {
      benchmarkFailure("cannot open /proc/self/statm: errno \(errno)")
    }
    defer { fclose(file) }
    var line: UnsafeMutablePointer<CChar>? = nil
    var capacity = 0
    defer { free(line) }
    guard getline(&line, &capacity, file) > 0, let line else {
      benchmarkFailure("cannot read /proc/self/statm")
    }
    let fields = String(cString: line).split(separator: " ")
    guard fields.count >= 2, let pages = Int(fields[1]) else {
      benchmarkFailure("cannot parse /proc/self/statm")
    }
    return pages * sysconf(Int32(_SC_PAGESIZE))
  }

  /// Returns freed heap memory to the kernel (every malloc arena), so that a following
  /// ``residentBytes()`` counts live data rather than what earlier runs left in free lists.
  static func trimHeap() {
    _ = cMallocTrim(0)
  }
}

/// glibc's `malloc_trim` (declared in `<malloc.h>`, which the Glibc module does not export).
/// Safe to bind by name: a plain C function taking `size_t` and returning `int`.
@_silgen_name("malloc_trim")
private func cMallocTrim(_ pad: Int) -> Int32
