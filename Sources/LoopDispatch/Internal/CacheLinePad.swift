/// 128 bytes that keep the stored properties before them and after them on different cache
/// lines, and on different 128-byte pairs (x86's adjacent-line prefetcher fetches lines in
/// pairs, so a write to one line of a pair still costs the reader of the other), whatever
/// the alignment of the object that holds them. Never read.
struct CacheLinePad: Sendable {
  private let words: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (
    0, 0, 0, 0, 0, 0, 0, 0
  )
  private let more: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (
    0, 0, 0, 0, 0, 0, 0, 0
  )
}
