#!/bin/sh
# The public API: the name of every function the public headers (lib/include/fsc/*.h) declare, one a line,
# sorted, as the compiler lists them (-aux-info). ci/check_exports.sh checks that libfsc.so exports exactly
# these; tests/test_null_args.c that its table of NULL-argument cases covers each. Run from the repository root.
set -e
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '#include "fsc/fsc.h"' | gcc -std=c11 -D_GNU_SOURCE -Ilib/include -aux-info "$tmp/aux" -fsyntax-only -x c -
grep '/\* lib/include/fsc/' "$tmp/aux" | sed 's/^[^*]*\*\/ *//; s/ (.*//; s/.*[ *]//' | sort -u
