#!/usr/bin/env python3
"""The planner's step time against the simulator's (docs/planning.md, "Step time").

Runs fsc-train with --plan (which calibrates this machine's cpu device in the same process just before training)
on 20 layouts of the default GPT over a simulated network, and prints for each the measured ms a step (--json's
ms_per_step: the mean of the steps after the first), the predicted one (predicted.ms_per_step) and the error,
then the median and the worst error. Python's standard library only.

    python3 bench/plan_accuracy.py [BUILD_DIR] [--steps N] [--bandwidth GBPS] [--latency US]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

LAYOUTS = [
    ("ddp, world 2", "--world 2 --parallel ddp"),
    ("ddp, world 4", "--world 4 --parallel ddp"),
    ("fsdp, world 2", "--world 2 --parallel fsdp"),
    ("fsdp, world 4", "--world 4 --parallel fsdp"),
    ("fsdp grad_op, world 4", "--world 4 --parallel fsdp --shard grad_op"),
    ("fsdp hybrid, world 4", "--world 4 --parallel fsdp --shard hybrid"),
    ("zero1, world 2", "--world 2 --parallel zero1"),
    ("zero2, world 2", "--world 2 --parallel zero2"),
    ("zero2, world 4", "--world 4 --parallel zero2"),
    ("pp 2, 4 micro-batches", "--world 2 --pp 2 --parallel pipe --accum 4"),
    ("pp 2 x dp 2, 4 micro-batches", "--world 4 --pp 2 --parallel pipe --accum 4"),
    ("pp 2, 1f1b, 4 micro-batches", "--world 2 --pp 2 --parallel pipe --accum 4 --schedule 1f1b"),
    ("ddp, world 2, no prefetch", "--world 2 --parallel ddp --prefetch 0"),
    ("fsdp, world 2, no prefetch", "--world 2 --parallel fsdp --prefetch 0"),
    ("zero2, world 2, no prefetch", "--world 2 --parallel zero2 --prefetch 0"),
    ("pp 2 x dp 2, no prefetch", "--world 4 --pp 2 --parallel pipe --accum 4 --prefetch 0"),
    ("ddp, world 2, recompute", "--world 2 --parallel ddp --recompute 1"),
    ("fsdp, world 2, accum 2", "--world 2 --parallel fsdp --accum 2"),
    ("fsdp, world 2, bf16", "--world 2 --parallel fsdp --precision bf16"),
    ("zero1, world 2, offload optim", "--world 2 --parallel zero1 --offload optim"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--bandwidth", default="0.2")
    ap.add_argument("--latency", default="50")
    ap.add_argument("--clock", default="virtual", choices=["virtual", "wall"],
                    help="the simulated cluster's clock (fsc-train --sim-clock): virtual, each rank's own thread's "
                         "CPU time and the modelled network, or wall, the machine's, shared by the ranks")
    a = ap.parse_args()
    trainer = os.path.join(a.build, "fsc-train")
    errors = []
    print("%-32s %10s %10s %8s" % ("layout", "measured", "predicted", "error"))
    for name, opts in LAYOUTS:
        cmd = [trainer, "--plan", "--json", "--peak-tflops", "1", "--steps", str(a.steps), "--sim-bandwidth",
               a.bandwidth, "--sim-latency", a.latency, "--sim-clock", a.clock] + opts.split()
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print("%-32s failed: %s" % (name, out.stderr.strip().splitlines()[-1:]))
            continue
        d = json.loads(out.stdout.strip().splitlines()[-1])
        measured, predicted = d["ms_per_step"], d["predicted"]["ms_per_step"]
        err = predicted / measured - 1
        errors.append(err)
        print("%-32s %10.2f %10.2f %+7.0f%%" % (name, measured, predicted, 100 * err))
    if errors:
        worst = max(errors, key=abs)
        print("%d layouts: median error %+.0f%%, worst %+.0f%%, within 15%%: %d" %
              (len(errors), 100 * statistics.median(errors), 100 * worst, sum(abs(e) <= 0.15 for e in errors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
