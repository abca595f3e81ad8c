/// A growable FIFO ring buffer. Not thread-safe: callers protect it.
struct RingBuffer<Element> {
  private var storage: [Element?]
  private var head = 0
  private(set) var count = 0

  /// Creates a buffer; the capacity is rounded up to a power of two.
  init(capacity: Int = 64) {
    var size = 2
    while size < capacity { size <<= 1 }
    storage = Array(repeating: nil, count: size)
  }

  var isEmpty: Bool { count == 0 }

  mutating func append(_ element: Element) {
    if count == storage.count { grow() }
    storage[(head + count) & (storage.count - 1)] = element
    count += 1
  }

  mutating func popFirst() -> Element? {
    guard count > 0 else { return nil }
    let element = storage[head].take()
    head = (head + 1) & (storage.count - 1)
    count -= 1
    return element
  }

  var first: Element? { count > 0 ? storage[head] : nil }

  private mutating func grow() {
    var bigger = [Element?](repeating: nil, count: storage.count * 2)
    for index in 0..<count {
      bigger[index] = storage[(head + index) & (storage.count - 1)].take()
    }
    storage = bigger
    head = 0
  }
}
