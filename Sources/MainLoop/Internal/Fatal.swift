import Glibc

/// Reports a misuse by the caller on one line of standard error and traps.
///
/// The line starts with `BUG IN CLIENT OF LOOPDISPATCH:` so that logs and exit tests can
/// recognise it. Written with `write(2)` so it reaches the terminal even mid-crash.
@inline(never)
package func clientBug(_ message: String) -> Never {
  writeStandardError("BUG IN CLIENT OF LOOPDISPATCH: \(message)\n")
  abort()
}

/// Reports a broken internal invariant (a bug in this library) and traps.
@inline(never)
package func internalBug(_ message: String) -> Never {
  writeStandardError("BUG IN LOOPDISPATCH: \(message)\n")
  abort()
}

/// Reports that the system refused something the runtime cannot work without (the first
/// pool worker, the supervisor or service-loop thread) and traps.
///
/// Neither a misuse nor a bug in this library, so the line starts with
/// `LOOPDISPATCH CANNOT CONTINUE:`; the message names the failed call and its `errno` text.
@inline(never)
package func resourceFailure(_ message: String) -> Never {
  writeStandardError("LOOPDISPATCH CANNOT CONTINUE: \(message)\n")
  abort()
}

/// Writes `text` to standard error in full, retrying short writes and `EINTR`.
package func writeStandardError(_ text: String) {
  var copy = text
  copy.withUTF8 { bytes in
    var offset = 0
    while offset < bytes.count {
      let n = write(2, bytes.baseAddress! + offset, bytes.count - offset)
      if n > 0 {
        offset += n
      } else if n < 0 && errno == EINTR {
        continue
      } else {
        return
      }
    }
  }
}
