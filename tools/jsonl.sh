# Sourced by tools/plot and tools/trace_merge: find_jsonl NAME sets $jsonl to the fsc-jsonl program that reads
# their JSON (tools/fsc_jsonl.c): $FSC_JSONL when set, else this repository's build/fsc-jsonl (made with make
# when missing), else fsc-jsonl on PATH. It exits with a message (NAME: ...) when there is none.
find_jsonl() {
  if [ -n "${FSC_JSONL:-}" ]; then
    jsonl=$FSC_JSONL
  else
    root=$(cd "$(dirname "$0")/.." && pwd)
    jsonl=$root/build/fsc-jsonl
    if [ ! -x "$jsonl" ] && [ -f "$root/Makefile" ] && [ -f "$root/tools/fsc_jsonl.c" ]; then
      echo "$1: building build/fsc-jsonl (make build/fsc-jsonl)" >&2
      make -s -C "$root" build/fsc-jsonl >&2 || { echo "$1: make build/fsc-jsonl failed" >&2; exit 1; }
    fi
    [ -x "$jsonl" ] || jsonl=$(command -v fsc-jsonl 2>/dev/null || echo "$jsonl")
  fi
  [ -x "$jsonl" ] || { echo "$1: $jsonl not found: make build/fsc-jsonl (or set FSC_JSONL)" >&2; exit 1; }
}
