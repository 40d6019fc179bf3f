#!/bin/sh
# make fuzz: build every libFuzzer harness given with the library sources (clang, ASan + UBSan) and run
# each for SECONDS. Usage: ci/fuzz.sh SECONDS fuzz/fuzz_NAME.c ...
# Harness fuzz/fuzz_NAME.c starts from the seeds in fuzz/corpus/NAME/ (read only; new inputs go to
# build/fuzz/corpus/NAME/) and uses the dictionary fuzz/fuzz_NAME.dict when present. A crash, leak or
# sanitizer report fails the script; the input that caused it is kept in build/fuzz/artifacts/.
set -e
secs=${1:?usage: ci/fuzz.sh SECONDS fuzz/fuzz_NAME.c ...}
shift
[ $# -gt 0 ] || { echo "ci/fuzz.sh: no harnesses given" >&2; exit 2; }
CC=${FUZZ_CC:-clang}
J=${JOBS:-2}
B=build/fuzz
FLAGS="-std=c11 -O1 -g -fno-omit-frame-pointer -pthread -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Ilib/include -Ilib"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
mkdir -p $B/obj $B/artifacts

# Library objects, instrumented for coverage (fuzzer-no-link); rebuilt when the source or a header is newer.
todo=""
objs=""
for src in lib/*/*.c backends/cpu/*.c backends/count/*.c sim/*.c; do
  [ -f "$src" ] || continue
  o=$B/obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')
  objs="$objs $o"
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || \
     [ -n "$(find lib backends/cpu sim -name '*.h' -newer "$o" 2>/dev/null | head -1)" ]; then
    todo="$todo $src:$o"
  fi
done
if [ -n "$todo" ]; then
  echo "== building the library for fuzzing ($(echo $todo | wc -w) files)"
  echo $todo | tr ' ' '\n' | xargs -P "$J" -I{} sh -c \
    'src=${1%%:*}; o=${1#*:}; '"$CC $FLAGS $SAN"' -fsanitize=fuzzer-no-link -c "$src" -o "$o"' _ {}
fi
rm -f $B/libfsc_fuzz.a
ar rcs $B/libfsc_fuzz.a $objs

fail=0
for h in "$@"; do
  name=$(basename "$h" .c)
  short=${name#fuzz_}
  echo "== $name: building"
  $CC $FLAGS $SAN -fsanitize=fuzzer "$h" -o $B/$name $B/libfsc_fuzz.a -lcjson -lz -lnettle -lpcre2-8 -lopenblas -lm -lpthread -ldl
  mkdir -p $B/corpus/$short
  seeds=""
  [ -d fuzz/corpus/$short ] && seeds=fuzz/corpus/$short
  dict=""
  [ -f fuzz/$name.dict ] && dict=-dict=fuzz/$name.dict
  echo "== $name: fuzzing for ${secs}s"
  if ! $B/$name -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix=$B/artifacts/$name- $dict $B/corpus/$short $seeds > $B/$name.log 2>&1; then
    echo "FAIL $name: the fuzzer found a problem; log follows (inputs in $B/artifacts/)"
    tail -60 $B/$name.log
    fail=1
  else
    echo "PASS $name ($(grep -E '^stat::number_of_executed_units' $B/$name.log | awk '{print $2}') runs)"
  fi
done
exit $fail
