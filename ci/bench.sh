#!/bin/sh
# make bench: the single-rank GPT benchmark against the sgemm peak, then PyTorch on the same model and batch
# (when /usr/bin/python3 has torch) and the ratio fsc / best PyTorch. Prints numbers; never fails on a
# missing baseline.
set -e
B=${1:-build/bench}
: > "$B/bench_gpt.out"
for t in 1 2; do
  echo "== fsc: bench_gpt, 1 rank, $t BLAS threads"
  "$B/bench_gpt" --threads $t | tee -a "$B/bench_gpt.out"
done
fsc=$(awk '/^RESULT fsc/ { if ($4 > m) m = $4 } END { print m }' "$B/bench_gpt.out")
echo
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "== PyTorch: the same GPT, batch and steps"
  if /usr/bin/python3 bench/torch_gpt.py | tee "$B/torch_gpt.out"; then
    best=$(awk '/^RESULT torch/ { if ($6 > m) { m = $6; t = $4 } } END { print m, t }' "$B/torch_gpt.out")
    set -- $best
    awk -v f="$fsc" -v t="$1" -v n="$2" 'BEGIN { printf "fsc best %.0f tokens/s vs PyTorch best (%d threads) %.0f tokens/s: ratio %.2f\n", f, n, t, f / t }'
  else
    echo "PyTorch baseline failed; no ratio"
  fi
else
  echo "PyTorch is not installed (/usr/bin/python3 cannot import torch): no baseline. apt-get install python3-torch"
fi

echo
echo "== fsc: 2 simulated ranks, DDP vs FSDP (flat and per block)"
"$B/bench_dp"

echo
echo "== fsc: pipeline bubble, measured vs ideal (P-1)/(M+P-1)"; "$B/bench_pipe" | tee "$B/bench_pipe.out"
