#!/bin/sh
# make bench: the single-rank GPT benchmark against the sgemm peak, then PyTorch on the same model and batch
# (when /usr/bin/python3 has torch) and the ratio fsc / best PyTorch. Prints numbers; never fails on a
# missing baseline.
# ROUNDS (default 3) rounds each run fsc with 1 and 2 BLAS threads and PyTorch with 1 and 2 threads one
# after another, so that load from other programs on a shared machine falls on both sides alike; the
# summary gives medians over rounds and the median of the per-round ratios.
set -e
B=${1:-build/bench}
R=${ROUNDS:-3}
S="$B/bench_summary.txt"
: > "$S"
torch=0
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then torch=1; fi
for r in $(seq "$R"); do
  for t in 1 2; do
    echo "== round $r/$R: fsc bench_gpt, 1 rank, $t BLAS threads"
    "$B/bench_gpt" --threads $t | tee "$B/bench_gpt.out"
    awk -v r="$r" '/^RESULT fsc/ { print r, "fsc", $14, $4, $10, $12 }' "$B/bench_gpt.out" >> "$S"
  done
  if [ $torch = 1 ]; then
    for t in 1 2; do
      echo "== round $r/$R: PyTorch, the same GPT, batch and steps, torch.set_num_threads($t)"
      if /usr/bin/python3 bench/torch_gpt.py --threads $t | tee "$B/torch_gpt.out"; then
        awk -v r="$r" '/^RESULT torch/ { print r, "torch", $4, $6, $8 }' "$B/torch_gpt.out" >> "$S"
      else
        echo "PyTorch baseline failed"
      fi
    done
  fi
done

echo
echo "== summary over $R rounds (medians)"
awk '
function med(list,   n, a, i, j, t) {
  n = split(list, a, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ key = $2 " " $3; tok[key] = tok[key] " " $4; rt[$1 " " key] = $4; rounds[$1] = 1
  if ($2 == "fsc") { fp[key] = fp[key] " " $5; fq[key] = fq[key] " " $6 } else blas[key] = $5 }
END {
  for (t = 1; t <= 2; t++) {
    k = "fsc " t
    if (k in tok) printf "fsc, %d BLAS threads:     %7.0f tokens/s, %3.0f%% of the sgemm peak (same-conditions %3.0f%%)\n", t, med(tok[k]), 100 * med(fp[k]), 100 * med(fq[k])
    if (tok[k] != "" && med(tok[k]) > fbest) { fbest = med(tok[k]); ft = t }
  }
  for (t = 1; t <= 2; t++) {
    k = "torch " t
    if (k in tok) printf "PyTorch, %d threads:      %7.0f tokens/s (OpenBLAS %s threads)\n", t, med(tok[k]), blas[k]
    if (tok[k] != "" && med(tok[k]) > tbest) { tbest = med(tok[k]); tt = t }
  }
  if (tbest > 0) {
    ratios = ""
    for (r in rounds) {
      f = rt[r " fsc 1"] > rt[r " fsc 2"] ? rt[r " fsc 1"] : rt[r " fsc 2"]
      p = rt[r " torch 1"] > rt[r " torch 2"] ? rt[r " torch 1"] : rt[r " torch 2"]
      if (p > 0) ratios = ratios " " f / p
    }
    printf "fsc best (%d BLAS threads) %.0f tokens/s vs PyTorch best (%d threads) %.0f tokens/s: ratio %.2f (median of per-round ratios %.2f)\n", ft, fbest, tt, tbest, fbest / tbest, med(ratios)
  } else {
    print "PyTorch is not installed (/usr/bin/python3 cannot import torch): no baseline. apt-get install python3-torch"
  }
}' "$S"

echo
echo "== fsc: 2 simulated ranks, DDP vs FSDP (flat and per block)"
"$B/bench_dp"

echo
echo "== fsc: pipeline bubble, measured vs ideal (P-1)/(M+P-1)"; "$B/bench_pipe" | tee "$B/bench_pipe.out"

echo
echo "== fsc: the Llama beside the GPT-2 of the same shape, 1 rank (alternating steps; no PyTorch Llama baseline yet)"
"$B/bench_llama"
