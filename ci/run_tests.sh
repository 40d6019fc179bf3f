#!/bin/sh
# Run every test binary in a folder (optionally only those whose name matches a pattern); fail if any fails.
dir=$1; pat=${2:-.}
fail=0; n=0
for t in "$dir"/test_*; do
  [ -x "$t" ] || continue
  echo "$t" | grep -Eq "$pat" || continue
  n=$((n+1))
  start=$(date +%s)
  if "$t" > "$t.log" 2>&1; then
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test(s).*/\1/p' "$t.log" | tail -1)
    skipped=${skipped:-0}
    if [ "$skipped" -gt 0 ]; then
      why=$(grep -m1 '^skipped: ' "$t.log" | cut -c10-120)
      echo "PASS $(basename "$t") ($(( $(date +%s) - start ))s; $skipped skipped: $why)"
    else
      echo "PASS $(basename "$t") ($(( $(date +%s) - start ))s)"
    fi
  else
    echo "FAIL $(basename "$t"), log follows"; cat "$t.log"; fail=1
  fi
done
[ $n -gt 0 ] || { echo "no tests found in $dir"; exit 1; }
exit $fail
