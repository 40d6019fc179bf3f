#!/bin/sh
# ci/bench_compare.sh BASE_REV [ROUNDS]: bench_gpt of an older commit against the working tree, in one run.
# Builds BASE_REV's bench_gpt from `git archive` under build/bench_base/ (no worktree, nothing committed) and
# this tree's under build/bench/, both with -O3 -march=native, then runs them alternately: ROUNDS (default 5)
# rounds of {old, new} x {1, 2 BLAS threads}, the order of old and new swapped every round, so that load
# from other programs on a shared machine falls on both alike. Both run from this tree's root on the same
# data. Prints medians over rounds, the median of the per-round ratios new / old, and the load average seen.
# A measurement, not a test: it prints numbers and fails only if a build or a run fails.
set -e
BASE=${1:?usage: ci/bench_compare.sh BASE_REV [ROUNDS]}
R=${2:-5}
OPT="-O3 -march=native"
O=build/bench_base
rev=$(git rev-parse --short "$BASE")
rm -rf "$O/src"
mkdir -p "$O/src"
git archive "$rev" | tar -x -C "$O/src"
make --no-print-directory -C "$O/src" OPT="$OPT" BUILD=build/bench build/bench/bench_gpt > "$O/build.log"
make --no-print-directory OPT="$OPT" BUILD=build/bench build/bench/bench_gpt > /dev/null
old="$O/src/build/bench/bench_gpt"
new=build/bench/bench_gpt
S="$O/compare.txt"
: > "$S"
one() { # round side threads binary
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$4" --threads "$3" > "$O/run-$1-$2-$3.out"
  tps=$(awk '/^RESULT fsc/ { print $4 }' "$O/run-$1-$2-$3.out")
  echo "round $1 $2 ($rev$( [ "$2" = new ] && echo ' -> working tree')), $3 BLAS thread(s): $tps tokens/s, load $load"
  echo "$1 $2 $3 $tps $load" >> "$S"
}
for r in $(seq "$R"); do
  for t in 1 2; do
    if [ $((r % 2)) = 1 ]; then one "$r" old $t "$old"; one "$r" new $t "$new"
    else one "$r" new $t "$new"; one "$r" old $t "$old"; fi
  done
done
echo
echo "== bench_gpt, $rev (old) against the working tree (new), medians over $R rounds"
awk '
function med(list,   n, a, i, j, t) {
  n = split(list, a, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ tok[$2 " " $3] = tok[$2 " " $3] " " $4; v[$1 " " $2 " " $3] = $4
  if (lo == "" || $5 < lo) lo = $5; if ($5 > hi) hi = $5 }
END {
  for (t = 1; t <= 2; t++) {
    ratios = ""
    for (k in v) { split(k, f, " "); if (f[2] == "new" && f[3] == t && v[f[1] " old " t] > 0) ratios = ratios sprintf(" %.3f", v[k] / v[f[1] " old " t]) }
    printf "%d BLAS thread%s: old %7.0f tokens/s, new %7.0f tokens/s, new/old %.3f (median of per-round ratios %.3f; per round:%s)\n",
      t, (t > 1 ? "s" : ""), med(tok["old " t]), med(tok["new " t]), med(tok["new " t]) / med(tok["old " t]), med(ratios), ratios
  }
  printf "load average (1 min) at the start of each run: %s - %s\n", lo, hi
}' "$S"
