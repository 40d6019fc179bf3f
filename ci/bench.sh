#!/bin/sh
# make bench: the single-rank GPT benchmark against the sgemm peak, then PyTorch on the same model and batch
# (when /usr/bin/python3 has torch) and the ratio fsc / best PyTorch. Prints numbers; never fails on a
# missing baseline. Then the Llama the same way: fsc's bench_llama and PyTorch's bench/torch_llama.py.
# ROUNDS (default 3) rounds each run fsc with 1 and 2 BLAS threads and PyTorch with 1 and 2 threads one
# after another, so that load from other programs on a shared machine falls on both sides alike; the
# summary gives medians over rounds and the median of the per-round ratios.
set -e
B=${1:-build/bench}
R=${ROUNDS:-3}
# awk functions both summaries share: the median of a space-separated list, and the median over rounds of
# (fsc's best of 1 and 2 threads / PyTorch's best) from rt["ROUND fsc|torch THREADS"] and rounds[ROUND].
MED='
function med(list,   n, a, i, j, t) {
  n = split(list, a, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function ratios(   r, f, p, list) {
  list = ""
  for (r in rounds) {
    f = rt[r " fsc 1"] > rt[r " fsc 2"] ? rt[r " fsc 1"] : rt[r " fsc 2"]
    p = rt[r " torch 1"] > rt[r " torch 2"] ? rt[r " torch 1"] : rt[r " torch 2"]
    if (p > 0) list = list " " f / p
  }
  return med(list)
}
'
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
awk "$MED"'
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
    printf "fsc best (%d BLAS threads) %.0f tokens/s vs PyTorch best (%d threads) %.0f tokens/s: ratio %.2f (median of per-round ratios %.2f)\n", ft, fbest, tt, tbest, fbest / tbest, ratios()
  } else {
    print "PyTorch is not installed (/usr/bin/python3 cannot import torch): no baseline. apt-get install python3-torch"
  }
}' "$S"

echo
echo "== fsc: 2 simulated ranks, DDP vs FSDP (flat and per block)"
"$B/bench_dp"

echo
echo "== fsc: 2 simulated ranks, DDP, --reduce exact vs ordered (step time, bytes per step, gradient error vs float64)"
"$B/bench_exact"

echo
echo "== fsc: pipeline bubble, measured vs ideal (P-1)/(M+P-1)"; "$B/bench_pipe" | tee "$B/bench_pipe.out"

echo
echo "== fsc: the split backward's cost per layer (backward vs backward_input + backward_weight), 1 and 2 BLAS threads, then tensor-parallel layers on 2 ranks"
"$B/bench_split" | tee "$B/bench_split.out"

echo
echo "== fsc: the planner's step time against the simulator's, on the virtual clock (22 layouts, the search's top three)"
if command -v python3 > /dev/null; then python3 bench/plan_accuracy.py "$B" | tee "$B/plan_accuracy.out"
else echo "(no python3: skipped)"; fi

echo
echo "== fsc: overlap of communication with computation on a simulated network (communication = computation)"
"$B/bench_overlap" | tee "$B/bench_overlap.out"

echo
echo "== fsc: offload to host memory, per-rank peak device memory with --offload none, optim and all"
"$B/bench_offload" | tee "$B/bench_offload.out"

echo
echo "== the Llama (4 layers, width 256, 4 heads, 2 kv heads, ffn 768, context 128, batch 8), 1 rank: fsc's"
echo "   bench_llama (alternating steps with the GPT-2 of the same shape) and PyTorch on the same Llama ($R rounds)"
L="$B/bench_llama_summary.txt"
: > "$L"
for r in $(seq "$R"); do
  for t in 1 2; do
    echo "== round $r/$R: fsc bench_llama, 1 rank, $t BLAS threads"
    "$B/bench_llama" --threads $t | tee "$B/bench_llama.out"
    awk -v r="$r" -v t="$t" '/^RESULT llama/ { print r, "fsc", t, $3, $9 }' "$B/bench_llama.out" >> "$L"
  done
  if [ $torch = 1 ]; then
    for t in 1 2; do
      echo "== round $r/$R: PyTorch, the same Llama, batch and steps, torch.set_num_threads($t)"
      if /usr/bin/python3 bench/torch_llama.py --threads $t | tee "$B/torch_llama.out"; then
        awk -v r="$r" '/^RESULT torch_llama/ { print r, "torch", $4, $6, $8 }' "$B/torch_llama.out" >> "$L"
      else
        echo "PyTorch Llama baseline failed"
      fi
    done
  fi
done

echo
echo "== the Llama: summary over $R rounds (medians)"
awk "$MED"'
{ key = $2 " " $3; tok[key] = tok[key] " " $4; rt[$1 " " key] = $4; rounds[$1] = 1
  if ($2 == "fsc") lg[key] = lg[key] " " $5; else blas[key] = $5 }
END {
  for (t = 1; t <= 2; t++) {
    k = "fsc " t
    if (k in tok) printf "fsc Llama, %d BLAS threads: %7.0f tokens/s (%.2f x the GPT-2 of the same shape)\n", t, med(tok[k]), med(lg[k])
    if (tok[k] != "" && med(tok[k]) > fbest) { fbest = med(tok[k]); ft = t }
  }
  for (t = 1; t <= 2; t++) {
    k = "torch " t
    if (k in tok) printf "PyTorch Llama, %d threads:  %7.0f tokens/s (OpenBLAS %s threads)\n", t, med(tok[k]), blas[k]
    if (tok[k] != "" && med(tok[k]) > tbest) { tbest = med(tok[k]); tt = t }
  }
  if (tbest > 0) {
    printf "fsc Llama best (%d BLAS threads) %.0f tokens/s vs PyTorch Llama best (%d threads) %.0f tokens/s: ratio %.2f (median of per-round ratios %.2f)\n", ft, fbest, tt, tbest, fbest / tbest, ratios()
  } else {
    print "PyTorch is not installed (/usr/bin/python3 cannot import torch): no baseline. apt-get install python3-torch"
  }
}' "$L"

# DDP and FSDP as 2 MPI processes beside the same job on 2 simulated ranks (1 BLAS thread per rank on both
# sides), reductions in rank order (the simulator's bits) and MPI's native ones. Skipped without mpirun.
echo
echo "== fsc: 2 MPI processes vs 2 simulated ranks (train_gpt, 4 layers, width 256, context 128, batch 8)"
if command -v mpirun >/dev/null 2>&1 && [ -f "$B/libfsc_mpi.so" ]; then
  M="--layers 4 --dim 256 --heads 4 --seq 128 --batch 8 --steps ${MPI_STEPS:-8} --threads 1 --json"
  tps() { tail -1 "$1" | sed -n 's/.*"tokens_per_s":\([0-9.e+]*\).*/\1/p'; }
  printf "%-6s %14s %16s %8s %16s %8s\n" "" "simulated" "mpi ordered" "ratio" "mpi native" "ratio"
  for par in ddp fsdp; do
    "$B/train_gpt" $M --parallel $par --world 2 > "$B/mpi_sim.out"
    mpirun -n 2 --oversubscribe --bind-to none --allow-run-as-root "$B/train_gpt" $M --parallel $par > "$B/mpi_ord.out"
    mpirun -n 2 --oversubscribe --bind-to none --allow-run-as-root "$B/train_gpt" $M --parallel $par --reduce native > "$B/mpi_nat.out"
    s=$(tps "$B/mpi_sim.out"); o=$(tps "$B/mpi_ord.out"); n=$(tps "$B/mpi_nat.out")
    awk -v p=$par -v s="$s" -v o="$o" -v n="$n" 'BEGIN { printf "%-6s %8.0f tok/s %10.0f tok/s %8.2f %10.0f tok/s %8.2f\n", p, s, o, o / s, n, n / s }'
  done
else
  echo "mpirun or $B/libfsc_mpi.so missing: skipped (apt-get install libopenmpi-dev openmpi-bin, then make)"
fi
