/// Number formatting without Foundation.

/// `value` with `digits` decimals (rounded half away from zero); "n/a" for NaN/infinity.
func formatted(_ value: Double, decimals digits: Int) -> String {
  guard value.isFinite else { return "n/a" }
  var scale = 1.0
  for _ in 0..<digits { scale *= 10 }
  let scaled = (abs(value) * scale).rounded()
  guard scaled < 9.0e15 else { return String(value) }
  let whole = UInt64(scaled) / UInt64(scale)
  let fraction = UInt64(scaled) % UInt64(scale)
  var text = (value < 0 && scaled != 0 ? "-" : "") + String(whole)
  if digits > 0 {
    let digitsText = String(fraction)
    text += "." + String(repeating: "0", count: digits - digitsText.count) + digitsText
  }
  return text
}

/// `value` with about three significant digits (at most two decimals above 1).
func formatted(_ value: Double) -> String {
  let magnitude = abs(value)
  if magnitude >= 100 { return formatted(value, decimals: 0) }
  if magnitude >= 10 { return formatted(value, decimals: 1) }
  if magnitude >= 1 || magnitude == 0 { return formatted(value, decimals: 2) }
  return formatted(value, decimals: 3)
}

/// A fraction as a percentage, e.g. "±3%".
func formattedSpread(_ fraction: Double) -> String {
  guard fraction.isFinite else { return "n/a" }
  let percent = fraction * 100
  return "±" + (percent < 10 ? formatted(percent, decimals: 1) : formatted(percent, decimals: 0))
    + "%"
}

/// `value` with at most `digits` decimals and no trailing zeros, e.g. "1.2" or "20".
func formattedCompact(_ value: Double, maxDecimals digits: Int = 3) -> String {
  var text = formatted(value, decimals: digits)
  guard text.contains(".") else { return text }
  while text.hasSuffix("0") { text.removeLast() }
  if text.hasSuffix(".") { text.removeLast() }
  return text
}
