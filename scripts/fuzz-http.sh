#!/usr/bin/env bash
# Fuzzes the HTTP request parser (Sources/ExampleHTTP) with libFuzzer under AddressSanitizer
# for a bounded time. The target (Fuzz/HTTPParserFuzz.swift) is compiled with the parser's
# sources by the toolchain's swiftc (-sanitize=fuzzer,address), so a clean clone needs
# nothing but the toolchain. It starts from the seeds in Fuzz/corpus/http (the cases of
# issue 21) and a working corpus in .build/fuzz/corpus that grows across runs. Fails on any
# crash (a broken invariant traps), leak, input that runs over 5 s, or out-of-memory;
# libFuzzer saves the input under .build/fuzz/artifacts/ (replay: the binary plus the file).
#
# Usage: scripts/fuzz-http.sh [seconds]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
swift="${SWIFT:-swift}"
swiftc="${SWIFTC:-$(dirname "$(command -v "$swift")")/swiftc}"
out=.build/fuzz
mkdir -p "$out/corpus" "$out/artifacts"
# lld: the default gold linker warns about every ASan check symbol.
"$swiftc" -sanitize=fuzzer,address -parse-as-library -O -g -warnings-as-errors -use-ld=lld \
  -module-name HTTPParserFuzz Fuzz/HTTPParserFuzz.swift Sources/ExampleHTTP/*.swift \
  -o "$out/http-parser-fuzz"
# -max_len reaches past the 8 KiB head limit (its 431 and the boundary a split must respect).
status=0
timeout $((seconds + 300)) "$out/http-parser-fuzz" -max_total_time="$seconds" -timeout=5 \
  -rss_limit_mb=2048 -max_len=8400 -dict=Fuzz/http.dict -print_final_stats=1 \
  -artifact_prefix="$out/artifacts/" "$out/corpus" Fuzz/corpus/http > "$out/fuzz.log" 2>&1 ||
  status=$?
if [ "$status" -ne 0 ]; then
  tail -n 60 "$out/fuzz.log" >&2
  echo "FAIL fuzz-http: libFuzzer exited with $status (log: $out/fuzz.log)" >&2
  exit 1
fi
grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
  "$out/fuzz.log" || true
echo "ok fuzz-http: $seconds s, no crash, leak or timeout"
