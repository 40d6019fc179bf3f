#!/bin/sh
# Run every test binary in a folder (optionally only those whose name matches a pattern); fail if any fails.
# Each test runs under timeout(1), so that a hung test fails by name instead of taking the whole CI run: one still
# running after FSC_TEST_TIMEOUT seconds (default 1200, 0: no limit; the slowest, test_pipe under TSan, takes about
# 160 s) is sent SIGTERM, with the processes it started, and SIGKILL 30 s later if it is still there.
dir=$1; pat=${2:-.}
limit=${FSC_TEST_TIMEOUT:-1200}
case $limit in ''|*[!0-9]*) echo "FSC_TEST_TIMEOUT='$limit' is not a whole number of seconds"; exit 2;; esac
# timeout puts a test in a process group of its own, which a Ctrl-C does not reach: stop it from here
pid=
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid"; exit 130' INT TERM HUP
fail=0; n=0
for t in "$dir"/test_*; do
  [ -x "$t" ] || continue
  echo "$t" | grep -Eq "$pat" || continue
  n=$((n+1))
  start=$(date +%s)
  timeout -k 30 "$limit" "$t" > "$t.log" 2>&1 < /dev/null &
  pid=$!
  wait "$pid"; rc=$?; pid=
  if [ $rc -eq 0 ]; then
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test(s).*/\1/p' "$t.log" | tail -1)
    skipped=${skipped:-0}
    if [ "$skipped" -gt 0 ]; then
      why=$(grep -m1 '^skipped: ' "$t.log" | cut -c10-120)
      echo "PASS $(basename "$t") ($(( $(date +%s) - start ))s; $skipped skipped: $why)"
    else
      echo "PASS $(basename "$t") ($(( $(date +%s) - start ))s)"
    fi
  elif { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$limit" -gt 0 ] && [ $(( $(date +%s) - start )) -ge "$limit" ]
  then # timeout's statuses (SIGTERM, SIGKILL), at the limit: not a test that exits 124 or is killed by the system
    echo "FAIL $(basename "$t"): timed out after $(( $(date +%s) - start ))s (the limit is ${limit}s:" \
         "FSC_TEST_TIMEOUT), log follows"; cat "$t.log"; fail=1
  else
    echo "FAIL $(basename "$t"), log follows"; cat "$t.log"; fail=1
  fi
done
[ $n -gt 0 ] || { echo "no tests found in $dir"; exit 1; }
exit $fail
