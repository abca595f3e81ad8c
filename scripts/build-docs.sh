#!/usr/bin/env bash
# Builds the DocC documentation of MainLoop and LoopDispatch with the toolchain's own `docc`
# (no SwiftPM plugin, so nothing is fetched):
#   1. the compiler emits public symbol graphs while building the two modules (own scratch
#      path, so the ordinary build is not rebuilt with different flags);
#   2. every public declaration must have a `///` comment and a place in a Topics group (read
#      from the symbol graphs), and every `BUG IN CLIENT OF LOOPDISPATCH:` message in Sources
#      must appear in Misuse.md;
#   3. `docc convert` turns each catalog plus its module's graphs into
#      docs-out/<Module>.doccarchive, with warnings treated as errors.
# Exits non-zero on any warning or failed check. Usage: scripts/build-docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SWIFT=${SWIFT:-swift}
if [ -z "${DOCC:-}" ]; then
  DOCC=$(command -v docc || true)
  if [ -z "$DOCC" ]; then
    DOCC="$(dirname "$(readlink -f "$(command -v "$SWIFT")")")/docc"
  fi
fi
MODULES=(MainLoop LoopDispatch)
SCRATCH=.build/docs
GRAPHS=$PWD/$SCRATCH/symbol-graphs
OUT=docs-out

step() { printf '==> %s\n' "$*"; }
seconds() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1fs", b - a }'; }
start=$(seconds)

# 1. Symbol graphs. Building LoopDispatch builds MainLoop too; both get graphs. An up-to-date
# build emits nothing, so the graphs of the last real build are kept in $GRAPHS. Extension
# blocks (`extension Duration`) get their own symbols, as with the DocC plugin, so DocC files
# them under the extended module.
build_graphs() {
  # Always build afresh (about 30 s): an incremental build may re-emit a module's graph
  # without its extension graph (Module@Swift), and stale graphs would document removed code.
  rm -rf "$SCRATCH"
  mkdir -p "$GRAPHS"
  "$SWIFT" build --scratch-path "$SCRATCH" --target LoopDispatch \
    -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$GRAPHS" \
    -Xswiftc -symbol-graph-minimum-access-level -Xswiftc public \
    -Xswiftc -emit-extension-block-symbols
}
step "symbol graphs ($SCRATCH)"
t=$(seconds)
build_graphs
for module in "${MODULES[@]}"; do
  if [ ! -f "$GRAPHS/$module.symbols.json" ]; then
    # Built before without graphs (or the graphs were deleted): force a fresh build.
    rm -rf "$SCRATCH"
    build_graphs
    break
  fi
done
echo "    $(elapsed "$t")"

# Each module's graphs in a directory of their own: Module.symbols.json plus the graphs of
# its extensions to other modules (Module@Swift.symbols.json), which are written by the same
# compile; one much older than the module's graph is left over from code since removed.
for module in "${MODULES[@]}"; do
  rm -rf "$SCRATCH/graphs-$module"
  mkdir -p "$SCRATCH/graphs-$module"
  cp "$GRAPHS/$module.symbols.json" "$SCRATCH/graphs-$module/"
  emitted=$(stat -c %Y "$GRAPHS/$module.symbols.json")
  for extension in "$GRAPHS/$module"@*.symbols.json; do
    if [ -e "$extension" ] && [ "$(stat -c %Y "$extension")" -ge $((emitted - 10)) ]; then
      cp "$extension" "$SCRATCH/graphs-$module/"
    fi
  done
done

# 2a. Every public declaration of ours has a doc comment. Symbols the compiler synthesises
# or inherits from the standard library (`hashValue`, `OptionSet.insert`, ...) are not ours.
step "public symbols without a /// comment"
python3 - "$SCRATCH" "${MODULES[@]}" <<'PY'
import json, os, sys, pathlib
scratch, modules = pathlib.Path(sys.argv[1]), sys.argv[2:]
missing = {}
for module in modules:
    for graph in sorted((scratch / f"graphs-{module}").glob("*.symbols.json")):
        for symbol in json.loads(graph.read_text())["symbols"]:
            precise = symbol["identifier"]["precise"]
            if "::SYNTHESIZED::" in precise or "location" not in symbol:
                continue  # synthesized or implicit (`init(rawValue:)` of a raw-value enum)
            if symbol["kind"]["identifier"] == "swift.extension":
                continue  # an `extension Duration` block; its members are checked
            doc = symbol.get("docComment")
            if doc and doc.get("module", module) in modules and any(
                line["text"].strip() for line in doc.get("lines", [])
            ):
                continue
            location = symbol["location"]
            where = os.path.relpath(location["uri"].removeprefix("file://"))
            line = location.get("position", {}).get("line", -1) + 1
            name = ".".join(symbol["pathComponents"])
            missing[precise] = f"{where}:{line}: public {symbol['kind']['displayName'].lower()} {name} has no /// doc comment"
for message in sorted(missing.values()):
    print(f"error: {message}")
if missing:
    print(f"{len(missing)} public symbol(s) undocumented")
    sys.exit(1)
PY

# 2b. Every public symbol is organized: each top-level symbol is linked from the module's
# landing page, and each member of a type that has an extension page (``Module/Type``) is
# linked from that page (overloads once each), so DocC never files one under a generated
# group.
step "public symbols curated in Topics"
python3 - "$SCRATCH" "${MODULES[@]}" <<'PY'
import collections, json, pathlib, re, sys
scratch, modules = pathlib.Path(sys.argv[1]), sys.argv[2:]
failures = 0
for module in modules:
    catalog = pathlib.Path(f"Sources/{module}/{module}.docc")
    pages = {}  # path components of the documented symbol -> (page, its text)
    for page in sorted(catalog.glob("*.md")):
        text = page.read_text()
        title = re.match(r"#\s*``([^`]+)``", text)
        if title:
            parts = title.group(1).split("/")
            pages[tuple(parts[1:] if parts[0] == module else parts)] = (page, text)
    children = collections.defaultdict(collections.Counter)
    graph = json.loads((scratch / f"graphs-{module}" / f"{module}.symbols.json").read_text())
    for symbol in graph["symbols"]:
        if "::SYNTHESIZED::" in symbol["identifier"]["precise"] or "location" not in symbol:
            continue
        path = symbol["pathComponents"]
        children[tuple(path[:-1])][path[-1]] += 1
    for parent, page_and_text in pages.items():
        page, text = page_and_text
        for name, overloads in children.get(parent, {}).items():
            links = set(re.findall("``" + re.escape(name) + r"(-[^`]+)?``", text))
            if len(links) < overloads:
                shown = ".".join(parent + (name,))
                print(f"error: {page}: {shown} ({overloads} overload(s)) is not in a Topics group")
                failures += 1
if failures:
    sys.exit(1)
PY

# 2c. Every client-bug message is listed in Misuse.md: each literal fragment of the message
# (the text between interpolations, longer than a few characters) must appear there.
step "client-bug messages listed in Misuse.md"
python3 - Sources Sources/LoopDispatch/LoopDispatch.docc/Misuse.md <<'PY'
import pathlib, re, sys
sources, misuse_path = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
misuse = misuse_path.read_text()

def call_arguments(text, start):
    """The source text of the call's arguments, from the '(' at `start` to its match."""
    depth, i, in_string = 0, start, False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return ""

def fragments(arguments):
    """Literal text of the string literals in `arguments`, split at interpolations."""
    pieces, current, i, in_string = [], "", 0, False
    while i < len(arguments):
        c = arguments[i]
        if not in_string:
            if c == '"':
                in_string = True
            i += 1
            continue
        if c == "\\" and arguments[i + 1] == "(":
            pieces.append(current)
            current, depth, i = "", 0, i + 1
            while True:  # skip the interpolated expression
                if arguments[i] == "(":
                    depth += 1
                elif arguments[i] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
        elif c == "\\":
            current += {"n": "\n", "t": "\t"}.get(arguments[i + 1], arguments[i + 1])
            i += 1
        elif c == '"':
            in_string = False  # literals joined with `+` continue the same message
        else:
            current += c
        i += 1
    pieces.append(current)
    return [p.strip() for p in pieces if len(p.strip()) > 3]

failures = 0
for path in sorted(sources.rglob("*.swift")):
    text = path.read_text()
    for match in re.finditer(r"\bclientBug\(", text):
        line = text.count("\n", 0, match.start()) + 1
        if text[: match.start()].rstrip().endswith("func"):
            continue  # the definition
        for piece in fragments(call_arguments(text, match.end() - 1)):
            if piece not in misuse:
                print(f'error: {path}:{line}: message text "{piece}" is not in {misuse_path}')
                failures += 1
if failures:
    sys.exit(1)
PY

# 3. docc convert, warnings as errors (and any "warning:" line fails too, belt and braces).
mkdir -p "$OUT"
for module in "${MODULES[@]}"; do
  step "docc convert $module"
  t=$(seconds)
  rm -rf "$OUT/$module.doccarchive"
  log=$SCRATCH/docc-$module.log
  status=0
  "$DOCC" convert "Sources/$module/$module.docc" \
    --fallback-display-name "$module" \
    --fallback-bundle-identifier "org.loopdispatch.$module" \
    --fallback-default-module-kind "Framework" \
    --additional-symbol-graph-dir "$SCRATCH/graphs-$module" \
    --output-path "$OUT/$module.doccarchive" \
    --warnings-as-errors >"$log" 2>&1 || status=$?
  grep -v "^\s*$" "$log" || true
  if [ "$status" -ne 0 ] || grep -q -E '(^|: )(warning|error):' "$log"; then
    echo "docc reported problems for $module (log: $log)" >&2
    exit 1
  fi
  # The landing page must have no group DocC generated itself: everything is curated.
  python3 - "$OUT/$module.doccarchive" "$module" <<'PY'
import json, pathlib, sys
archive, module = pathlib.Path(sys.argv[1]), sys.argv[2]
page = json.loads((archive / "data/documentation" / f"{module.lower()}.json").read_text())
generated = [s for s in page.get("topicSections", []) if s.get("generated")]
for section in generated:
    names = ", ".join(i.rsplit("/", 1)[-1] for i in section["identifiers"])
    print(f"error: Sources/{module}/{module}.docc/{module}.md: add to a Topics group: {names} "
          f"(DocC filed them under a generated \"{section.get('title')}\" group)")
sys.exit(1 if generated else 0)
PY
  echo "    $(elapsed "$t")"
done
step "docs built in $(elapsed "$start"): $OUT/MainLoop.doccarchive, $OUT/LoopDispatch.doccarchive"
