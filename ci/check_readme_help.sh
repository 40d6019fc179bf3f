#!/bin/sh
# README pastes `fsc-train --help` and `sample --help`; fail when they drift apart (each option table is the one source).
# usage: ci/check_readme_help.sh BUILD_DIR
set -e
B=${1:-build}
"$B/fsc-train" --help > "$B/help.txt"
awk '/^usage: fsc-train/ { on = 1 } on && /^```/ { exit } on { print }' README.md > "$B/readme_help.txt"
if ! diff -u "$B/readme_help.txt" "$B/help.txt"; then
  echo "README.md's fsc-train --help text differs from the binary's (above): paste the binary's"
  exit 1
fi
# and the sampler's
"$B/sample" --help > "$B/help_sample.txt"
awk '/^usage: sample/ { on = 1 } on && /^```/ { exit } on { print }' README.md > "$B/readme_help_sample.txt"
if ! diff -u "$B/readme_help_sample.txt" "$B/help_sample.txt"; then
  echo "README.md's sample --help text differs from the binary's (above): paste the binary's"
  exit 1
fi
echo "check_readme_help: README's --help texts are the binaries'"
