#!/bin/sh
# Build examples/train_mlp.c and examples/train_classifier.c against the INSTALLED library, as a user would: make
# install into a temporary prefix, compile with pkg-config's flags only (no -Ilib, no build tree), run them (they
# check FSDP against DDP bit for bit, a resumed checkpoint, a held-out accuracy, and exit non-zero on a failure), then
# make uninstall leaves no file. Usage: sh ci/test_installed.sh [build dir]
set -e
B=${1:-build/installed}
tmp=$(mktemp -d /tmp/fsc_installed_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
make -s -j${JOBS:-2} BUILD="$B" PREFIX="$tmp" install >/dev/null
export PKG_CONFIG_PATH="$tmp/lib/pkgconfig"
for ex in train_mlp train_classifier; do
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/$ex" "examples/$ex.c" $(pkg-config --cflags --libs fsc) -lm
  LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/$ex"
  rm -f "$tmp/$ex"
done
# the installed fsc-tokenize, run away from the source tree, finds GPT-2's vocabulary in share/fsc/ and decodes its
# tokens back to the same bytes
mkdir "$tmp/run"
head -c 2000 examples/data/coriolanus.txt > "$tmp/run/t.txt"
lp="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
(cd "$tmp/run" && LD_LIBRARY_PATH="$lp" "$tmp/bin/fsc-tokenize" t.txt t.u16 >/dev/null &&
  LD_LIBRARY_PATH="$lp" "$tmp/bin/fsc-tokenize" --decode t.u16 back.txt >/dev/null && cmp -s t.txt back.txt) ||
  { echo "FAIL the installed fsc-tokenize did not encode and decode back" >&2; exit 1; }
rm -rf "$tmp/run"
make -s BUILD="$B" PREFIX="$tmp" uninstall >/dev/null 2>&1
left=$(cd "$tmp" && find . ! -type d)
[ -z "$left" ] || { echo "FAIL make uninstall left:" $left >&2; exit 1; }
echo "PASS train_mlp and train_classifier built against the installed library (pkg-config) and run;" \
     "the installed fsc-tokenize round-trips with share/fsc's vocabulary; make uninstall removed it all"
