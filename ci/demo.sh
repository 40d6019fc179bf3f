#!/bin/sh
# make demo: train the default GPT (examples/data/coriolanus.txt, 4 layers, width 128) on 4 simulated ranks
# with FSDP full_shard, one line per step; then the same training with DDP and a table: per-rank peak memory
# by tag, communication per step, and whether the two runs are bit-identical. Arguments after BUILD replace
# the default ones.
set -e
B=${1:-build}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- --world 4 --parallel fsdp --shard full --wrap block --check-ddp
echo "== $B/train_gpt $*"
"$B/train_gpt" "$@"
