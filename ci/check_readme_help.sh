#!/bin/sh
# docs/trainer.md pastes `fsc-train --help` and `sample --help`, and README the table `make demo` ends with; fail when
# they drift apart (each option table is the one source; the demo's lines must each appear in what ci/demo.sh prints).
# usage: ci/check_readme_help.sh BUILD_DIR
set -e
B=${1:-build}
"$B/fsc-train" --help > "$B/help.txt"
awk '/^usage: fsc-train/ { on = 1 } on && /^```/ { exit } on { print }' docs/trainer.md > "$B/readme_help.txt"
if ! diff -u "$B/readme_help.txt" "$B/help.txt"; then
  echo "docs/trainer.md's fsc-train --help text differs from the binary's (above): paste the binary's"
  exit 1
fi
# and the sampler's
"$B/sample" --help > "$B/help_sample.txt"
awk '/^usage: sample/ { on = 1 } on && /^```/ { exit } on { print }' docs/trainer.md > "$B/readme_help_sample.txt"
if ! diff -u "$B/readme_help_sample.txt" "$B/help_sample.txt"; then
  echo "docs/trainer.md's sample --help text differs from the binary's (above): paste the binary's"
  exit 1
fi
# and the demo's table (README's lines of it, "..." for the ones it leaves out)
awk '/^per rank \(max over ranks\)/ { on = 1 } on && /^```/ { exit } on && $0 != "..." { print }' README.md > "$B/readme_demo.txt"
sh ci/demo.sh "$B" > "$B/demo.txt" 2>&1
grep -Fxvf "$B/demo.txt" "$B/readme_demo.txt" > "$B/demo_missing.txt" || true
if [ ! -s "$B/readme_demo.txt" ] || [ -s "$B/demo_missing.txt" ]; then
  echo "README.md's make demo table differs from what ci/demo.sh prints; lines it does not print:"
  cat "$B/demo_missing.txt"
  exit 1
fi
echo "check_readme_help: docs/trainer.md's --help texts and README's demo table are the programs'"
