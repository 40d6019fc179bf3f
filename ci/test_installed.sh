#!/bin/sh
# Build examples/train_mlp.c and examples/train_classifier.c against the INSTALLED library, as a user would: make
# install into a temporary prefix, compile with pkg-config's flags only (no -Ilib, no build tree), run them (they
# check FSDP against DDP bit for bit, a resumed checkpoint, a held-out accuracy, and exit non-zero on a failure), check
# that every example compiles with the installed headers alone and that examples/train_family.c (with the trainer's
# sources) links and trains, then make uninstall leaves no file. Usage: sh ci/test_installed.sh [build dir]
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
# every example compiles with the installed headers alone, without the Makefile's -D_GNU_SOURCE (each file asks for
# the POSIX it uses); train_family (docs/models.md: a family of one's own run by the trainer's code) links and trains
for f in examples/*.c examples/train/*.c; do
  ${CC:-cc} -std=c11 -Wall -Wextra -Werror -pedantic -DFSC_TRAIN_NO_MAIN -Iexamples -fsyntax-only "$f" \
    $(pkg-config --cflags fsc) || { echo "FAIL $f does not compile against the installed headers" >&2; exit 1; }
done
src=$(pwd)
${CC:-cc} -std=c11 -Wall -Wextra -Werror -DFSC_TRAIN_NO_MAIN -Iexamples -o "$tmp/train_family" examples/train_family.c \
  examples/train_gpt.c examples/train/*.c $(pkg-config --cflags --libs fsc) -lcjson -lm -pthread
(cd "$tmp" && LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ./train_family --model mini \
   --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 2 --data "$src/examples/data/coriolanus.txt" \
   > family.out 2>&1) && grep -q '^model: mini' "$tmp/family.out" ||
  { echo "FAIL train_family built against the installed library did not train: $(tail -2 "$tmp/family.out")" >&2
    exit 1; }
rm -f "$tmp/train_family" "$tmp/family.out"
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
echo "PASS train_mlp, train_classifier and train_family built against the installed library (pkg-config) and run;" \
     "the installed fsc-tokenize round-trips with share/fsc's vocabulary; make uninstall removed it all"
