#!/bin/sh
# make demo: train the default GPT (examples/data/coriolanus.txt, 4 layers, width 128) with the trainer
# built in BUILD, one line per step. Arguments after BUILD go to the trainer.
set -e
B=${1:-build}
[ $# -gt 0 ] && shift
echo "== $B/train_gpt $*"
"$B/train_gpt" "$@"
