#!/bin/sh
# Install the Debian packages fsc needs to build and test, when missing.
# As root: installs them with apt-get. Otherwise: prints the one command to run and fails.
# ci/deps.sh plot: only what make plot needs (gnuplot, for tools/plot), which make test does not.
set -e
need=""
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if [ "$1" = plot ]; then
  have gnuplot-nox || have gnuplot-qt || have gnuplot-x11 || need=" gnuplot-nox"
else
# g++ and binutils (readelf, objcopy): ci/check_install.sh's C++ program and ci/check_exports.sh;
# libpcre2-dev: the GPT-2 tokenizer's pattern (lib/text/bpe.c, Unicode classes);
# Open MPI (mpicc, mpirun): the MPI plug-in backends/mpi and the multi-process tests (tests/test_mpi.c)
for p in libopenblas-dev libcmocka-dev gcovr clang pkg-config libclang-rt-dev libcjson-dev zlib1g-dev nettle-dev libpcre2-dev g++ binutils \
         libopenmpi-dev openmpi-bin; do
  have "$p" || need="$need $p"
done
fi
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "ci/deps.sh: installing:$need" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq --no-install-recommends $need >/dev/null
else
  echo "ci/deps.sh: missing packages; run as root:" >&2
  echo "  apt-get install -y$need" >&2
  exit 1
fi
