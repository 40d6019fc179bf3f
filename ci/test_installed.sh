#!/bin/sh
# Build examples/train_mlp.c against the INSTALLED library, as a user would: make install into a temporary
# prefix, compile with pkg-config's flags only (no -Ilib, no build tree), run it (it checks FSDP against DDP bit for
# bit and a resumed checkpoint, and exits non-zero on a mismatch), then make uninstall leaves no file. Usage: sh ci/test_installed.sh [build dir]
set -e
B=${1:-build/installed}
tmp=$(mktemp -d /tmp/fsc_installed_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
make -s -j${JOBS:-2} BUILD="$B" PREFIX="$tmp" install >/dev/null
export PKG_CONFIG_PATH="$tmp/lib/pkgconfig"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/train_mlp" examples/train_mlp.c $(pkg-config --cflags --libs fsc) -lm
LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/train_mlp"
make -s BUILD="$B" PREFIX="$tmp" uninstall >/dev/null 2>&1
rm -f "$tmp/train_mlp"
left=$(cd "$tmp" && find . ! -type d)
[ -z "$left" ] || { echo "FAIL make uninstall left:" $left >&2; exit 1; }
echo "PASS train_mlp built against the installed library (pkg-config) and run; make uninstall removed it all"
