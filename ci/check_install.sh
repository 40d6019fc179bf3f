#!/bin/sh
# The library as other programs see it: install into a temporary PREFIX, check that only the public and
# plug-in headers went in and that the shared library has its SONAME and links, then build and run with
# pkg-config, using only the installed headers:
#   tests/install/consumer.c     C, against libfsc.so and against libfsc.a
#   tests/install/consumer.cpp   C++ (the headers' extern "C"), against libfsc.so
#   tests/install/own_names.c    a program defining cpu_gemm, ck_remove_dir, ... itself: the library must
#                                keep its own (against libfsc.so and libfsc.a)
#   tests/install/from_env.c     fsc_cluster_run_from_env, built with an rpath into a folder of its own and run
#                                as 2 MPI processes with no FSC_ variable: the cpu device (no GPU here) and
#                                the MPI plug-in found beside libfsc.so (when the plug-in and mpirun exist)
#   tests/install/bpe_default.c  fsc_bpe_load_default, built into that folder and run from another: the installed
#                                GPT-2 vocabulary found beside libfsc.so (PREFIX/share/fsc)
#   make install says which plug-ins it installed or skipped; make uninstall removes every file it put there
#   bin/fsc-train, bin/fsc-ckpt, bin/fsc-sample, bin/fsc-tokenize, bin/fsc-plan (their --help and --version in
#                                their names), share/fsc/coriolanus.txt and gpt2.tiktoken.gz are installed (fsc-tokenize
#                                encodes with the installed vocabulary from another directory), the plug-ins
#                                built in BUILD (libfsc_cuda.so, libfsc_mpi.so) are in lib/, and the installed
#                                fsc-train trains from another directory without --data (the default corpus),
#                                and, with the MPI plug-in and mpirun, as 2 processes finding the plug-in in lib/
# Usage: ci/check_install.sh BUILD (a build folder holding the library: make BUILD=... lib; make install
# builds the programs it installs).
set -e
B=${1:?usage: ci/check_install.sh BUILD}
CC=${CC:-cc}
CXX=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix
make -s --no-print-directory BUILD="$B" install PREFIX="$P" > "$tmp/install.out"
fail() { echo "check_install: $*" >&2; exit 1; }

# what was installed
ls "$P/include/fsc" | grep -v '^plugin$' > "$tmp/h"
(cd lib/include/fsc && ls *.h) | diff - "$tmp/h" >/dev/null || fail "installed headers differ from lib/include/fsc/*.h: $(tr '\n' ' ' < "$tmp/h")"
! grep -q '_impl\.h$' "$tmp/h" || fail "a private header was installed"
[ "$(cd "$P/include/fsc/plugin" && ls)" = "$(cd lib/include/fsc/plugin && ls)" ] || fail "plug-in headers"
v=$(pkg-config --modversion "$P/lib/pkgconfig/fsc.pc")
major=${v%%.*}
[ -f "$P/lib/libfsc.so.$v" ] && [ -L "$P/lib/libfsc.so.$major" ] && [ -L "$P/lib/libfsc.so" ] ||
  fail "expected libfsc.so.$v with the links libfsc.so.$major and libfsc.so"
readelf -d "$P/lib/libfsc.so.$v" | grep -q "SONAME.*\[libfsc.so.$major\]" || fail "no SONAME libfsc.so.$major"
for prog in fsc-train fsc-ckpt fsc-sample fsc-tokenize fsc-plan; do
  [ -x "$P/bin/$prog" ] || fail "bin/$prog was not installed"
  "$P/bin/$prog" --help > "$tmp/help" 2>&1 || fail "bin/$prog --help failed: $(head -3 "$tmp/help")"
  [ "$("$P/bin/$prog" --version)" = "$prog $v" ] || fail "bin/$prog --version does not say $prog $v"
  head -1 "$tmp/help" | grep -q "^usage: $prog " || fail "bin/$prog --help does not say usage: $prog"
done
for plugin in libfsc_cuda.so libfsc_mpi.so; do
  if [ -f "$B/$plugin" ]; then [ -f "$P/lib/$plugin" ] || fail "$B/$plugin was built but not installed"
    grep -q "installed the plug-in lib/$plugin" "$tmp/install.out" || fail "make install did not say it installed $plugin"
  else grep -q "skipped the plug-in $plugin: not built (make " "$tmp/install.out" || fail "make install did not say it skipped $plugin"
  fi
done
cmp -s examples/data/coriolanus.txt "$P/share/fsc/coriolanus.txt" || fail "share/fsc/coriolanus.txt was not installed"
cmp -s examples/data/gpt2.tiktoken.gz "$P/share/fsc/gpt2.tiktoken.gz" || fail "share/fsc/gpt2.tiktoken.gz was not installed"
src=$(pwd)
(cd "$tmp" && "$P/bin/fsc-tokenize" "$src/examples/data/coriolanus.txt" c.u16 > tok.out 2>&1) &&
  grep -q "15991 bytes -> 4681 tokens" "$tmp/tok.out" ||
  fail "the installed fsc-tokenize did not encode with share/fsc/gpt2.tiktoken.gz: $(tail -2 "$tmp/tok.out")"
mkdir "$tmp/elsewhere"
(cd "$tmp/elsewhere" && "$P/bin/fsc-train" --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 2 > "$tmp/train.out" 2>&1) ||
  fail "the installed fsc-train did not train from another directory without --data: $(tail -3 "$tmp/train.out")"
grep -q "data: $P/bin/../share/fsc/coriolanus.txt" "$tmp/train.out" || fail "the installed fsc-train did not read share/fsc: $(head -2 "$tmp/train.out")"
if [ -f "$P/lib/libfsc_mpi.so" ] && command -v mpirun >/dev/null; then # the plug-in from ../lib, not build/
  (cd "$tmp/elsewhere" && mpirun -n 2 --oversubscribe --bind-to none --allow-run-as-root "$P/bin/fsc-train" --layers 1 \
     --dim 16 --heads 2 --seq 8 --batch 2 --steps 1 --parallel ddp > "$tmp/mpi.out" 2>&1) && grep -q "world 2" "$tmp/mpi.out" ||
    fail "the installed fsc-train as 2 MPI processes (plug-in in lib/): $(tail -3 "$tmp/mpi.out")"
fi

export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cflags=$(pkg-config --cflags fsc)
shared="$(pkg-config --libs fsc) -Wl,-rpath,$P/lib"
static="$(pkg-config --libs-only-L fsc) -Wl,-Bstatic -lfsc -Wl,-Bdynamic $(pkg-config --static --libs-only-l fsc | sed 's/-lfsc\b//')"
W="-Wall -Wextra -Werror"
build() { # name, compiler and flags... ; runs it after
  out=$tmp/$1; shift
  "$@" -o "$out" || fail "could not build $(basename "$out")"
}
build c_shared $CC -std=c11 $W $cflags tests/install/consumer.c $shared -lm
build c_static $CC -std=c11 $W $cflags tests/install/consumer.c $static
build cxx_shared $CXX -std=c++11 $W -pedantic $cflags tests/install/consumer.cpp $shared
build own_shared $CC -std=c11 $W $cflags tests/install/own_names.c $shared -lm
build own_static $CC -std=c11 $W $cflags tests/install/own_names.c $static
readelf -d "$tmp/c_shared" | grep -q "NEEDED.*\[libfsc.so.$major\]" || fail "c_shared does not need libfsc.so.$major"
! readelf -d "$tmp/c_static" | grep -q 'NEEDED.*libfsc' || fail "c_static needs the shared library"
for t in c_shared c_static cxx_shared own_shared own_static; do
  printf '%-11s ' "$t:"
  "$tmp/$t" || fail "$t failed"
done
mkdir "$tmp/own"
build own/from_env $CC -std=c11 $W $cflags tests/install/from_env.c $shared
(cd "$tmp/elsewhere" && env -u FSC_DEVICE -u FSC_MPI_PLUGIN "$tmp/own/from_env" > "$tmp/fe1.out" 2>&1) &&
  grep -q "world 1 on cpu" "$tmp/fe1.out" ||
  [ -e /dev/nvidia0 -o -e /proc/driver/nvidia/version ] || fail "from_env, one process: $(tail -2 "$tmp/fe1.out")"
if [ -f "$P/lib/libfsc_mpi.so" ] && command -v mpirun >/dev/null && [ ! -e /dev/nvidia0 ] && [ ! -e /proc/driver/nvidia/version ]; then
  (cd "$tmp/elsewhere" && env -u FSC_DEVICE -u FSC_MPI_PLUGIN mpirun -n 2 --oversubscribe --bind-to none \
     --allow-run-as-root "$tmp/own/from_env" > "$tmp/fe2.out" 2>&1) && grep -q "world 2 on cpu, sum 3" "$tmp/fe2.out" ||
    fail "a program linked against libfsc.so, as 2 MPI processes (plug-in beside libfsc.so): $(tail -3 "$tmp/fe2.out")"
  echo "from_env:   2 MPI processes on the cpu, the plug-in found beside libfsc.so"
fi

build own/bpe_default $CC -std=c11 $W $cflags tests/install/bpe_default.c $shared
(cd "$tmp/elsewhere" && "$tmp/own/bpe_default") || fail "a program of one's own did not find the installed GPT-2 vocabulary"

plugins=$(ls "$P/lib" | grep -o 'libfsc_[a-z]*\.so' | sed 's/^/, /' | tr -d '\n')
# make uninstall: exactly what install put there, nothing left behind
make -s --no-print-directory BUILD="$B" uninstall PREFIX="$P" >/dev/null 2>&1 || fail "make uninstall failed"
left=$(cd "$P" && find . ! -type d | sort | tr '\n' ' ')
[ -z "$left" ] || fail "make uninstall left: $left"
echo "check_install: fsc $v installed (fsc-train, fsc-ckpt, fsc-sample, fsc-tokenize, fsc-plan, the default corpus and GPT-2 vocabulary$plugins), C and C++ programs built from the installed headers and run, then uninstalled"
