import Glibc

/// A descriptor number that is closed and that no other test will open meanwhile: the
/// highest the limit allows (at most 65,535) that is closed now. Descriptors are handed out
/// lowest first, so a number a test closes itself (`dup`, then `close`) can be reused by a
/// test running beside it before the code under test looks at it: seen under
/// ThreadSanitizer, where a "closed" descriptor was a watchable pipe again.
public func descriptorNobodyOpens() -> Int32 {
  var limit = rlimit()
  getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
  var candidate = Int32(clamping: min(limit.rlim_cur, 65_536)) - 1
  while candidate > 0 && fcntl(candidate, F_GETFD) != -1 { candidate -= 1 }
  return candidate
}
