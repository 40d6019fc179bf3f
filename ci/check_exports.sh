#!/bin/sh
# The libraries export exactly the public API: the functions declared in the public headers
# (lib/include/fsc/*.h, as the compiler lists them with -aux-info), nothing else: no internal cpu_*,
# sim_*, ck_* ... and no internal fsc_* helper (those are hidden: lib/include/fsc/export.h).
# Usage: ci/check_exports.sh BUILD (holding libfsc.so and libfsc.a). Prints the counts; fails with the
# offending names.
set -e
B=${1:?usage: ci/check_exports.sh BUILD}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the public API: every prototype the public headers declare
sh ci/public_api.sh > "$tmp/api"
nm -D --defined-only "$B/libfsc.so" | awk 'NF == 3 { print $3 }' | sed 's/@.*//' | sort -u > "$tmp/so"
nm -g --defined-only "$B/libfsc.a" | awk 'NF == 3 { print $3 }' | sort -u > "$tmp/a"
fail=0
report() { # file, what
  if [ -s "$1" ]; then echo "check_exports: $2:"; sed 's/^/  /' "$1"; fail=1; fi
}
grep -v '^fsc_' "$tmp/so" > "$tmp/bad" || true
report "$tmp/bad" "libfsc.so exports names without the fsc_ prefix"
comm -23 "$tmp/so" "$tmp/api" | grep '^fsc_' > "$tmp/bad" || true
report "$tmp/bad" "libfsc.so exports fsc_ names no public header declares (internal: declare them in a private header)"
comm -13 "$tmp/so" "$tmp/api" > "$tmp/bad" || true
report "$tmp/bad" "public functions libfsc.so does not export (not defined, or declared outside FSC_BEGIN_DECLS)"
comm -3 "$tmp/a" "$tmp/so" > "$tmp/bad" || true
report "$tmp/bad" "names libfsc.a and libfsc.so do not both define globally"
echo "check_exports: libfsc.so exports $(wc -l < "$tmp/so") names, libfsc.a $(wc -l < "$tmp/a"), the public headers declare $(wc -l < "$tmp/api") functions"
exit $fail
