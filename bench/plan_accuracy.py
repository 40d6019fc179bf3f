#!/usr/bin/env python3
"""The planner's step time against the simulator's (docs/planning.md, "Step time").

Runs fsc-train with --plan (which calibrates this machine's cpu device in the same process just before training)
on 22 layouts of the default GPT over a simulated network (two with offload's copies over a simulated PCIe link), and prints for each the measured ms a step (--json's
ms_per_step: the mean of the steps after the first), the predicted one (predicted.ms_per_step) and the error,
then the median and the worst error. Then the search: fsc-plan --search on world 4 over the same network ranks
every layout; its three fastest are run with fsc-train and measured, and the script says whether the one
predicted fastest is the fastest measured of the three. Both on --sim-clock virtual by default (each rank's time
its own thread's CPU time and the modelled network: the numbers do not depend on how many cores the machine has
or what else runs on it). Python's standard library only.

    python3 bench/plan_accuracy.py [BUILD_DIR] [--steps N] [--bandwidth GBPS] [--latency US] [--clock C]
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
    ("zero1, offload optim, PCIe 0.2 GB/s", "--world 2 --parallel zero1 --offload optim --sim-copy-bandwidth 0.2"),
    ("fsdp, offload all, PCIe 1 GB/s", "--world 2 --parallel fsdp --offload all --sim-copy-bandwidth 1"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--bandwidth", default="0.2")
    ap.add_argument("--latency", default="50")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the search's three fastest")
    ap.add_argument("--clock", default="virtual", choices=["virtual", "wall"],
                    help="the simulated cluster's clock (fsc-train --sim-clock): virtual, each rank's own thread's "
                         "CPU time and the modelled network, or wall, the machine's, shared by the ranks")
    a = ap.parse_args()
    trainer = os.path.join(a.build, "fsc-train")
    errors = []
    print("%-36s %10s %10s %8s" % ("layout", "measured", "predicted", "error"))
    for name, opts in LAYOUTS:
        cmd = [trainer, "--plan", "--json", "--peak-tflops", "1", "--steps", str(a.steps), "--sim-bandwidth",
               a.bandwidth, "--sim-latency", a.latency, "--sim-clock", a.clock] + opts.split()
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print("%-36s failed: %s" % (name, out.stderr.strip().splitlines()[-1:]))
            continue
        d = json.loads(out.stdout.strip().splitlines()[-1])
        measured, predicted = d["ms_per_step"], d["predicted"]["ms_per_step"]
        err = predicted / measured - 1
        errors.append(err)
        print("%-36s %10.2f %10.2f %+7.0f%%" % (name, measured, predicted, 100 * err))
    if errors:
        worst = max(errors, key=abs)
        print("%d layouts: median error %+.0f%%, worst %+.0f%%, within 15%%: %d" %
              (len(errors), 100 * statistics.median(errors), 100 * worst, sum(abs(e) <= 0.15 for e in errors)))
    return top_three(a)


def top_three(a):
    """fsc-plan --search's three fastest layouts of world 4, each measured with fsc-train."""
    net = ["--sim-bandwidth", a.bandwidth, "--sim-latency", a.latency, "--sim-clock", a.clock]
    out = subprocess.run([os.path.join(a.build, "fsc-plan"), "--world", "4", "--search", "--json"] + net,
                         capture_output=True, text=True)
    if out.returncode != 0:
        print("fsc-plan --search failed: %s" % out.stderr.strip().splitlines()[-1:])
        return 1
    top = json.loads(out.stdout.strip().splitlines()[-1])["search"][:3]
    print("\nfsc-plan --search, world 4: the three fastest predicted, each measured in %d alternating rounds (median)"
          % a.rounds)
    print("%-44s %10s %10s" % ("layout", "predicted", "measured"))
    runs = [[] for _ in top]
    for _ in range(a.rounds):
        for i, c in enumerate(top):
            ms = measure(a, net, c)
            if ms is None:
                return 1
            runs[i].append(ms)
    measured = [statistics.median(r) for r in runs]
    for c, ms in zip(top, measured):
        name = "%s%s tp %d pp %d accum %d rec %d %s" % (c["parallel"], " %s %s" % (c["shard"], c.get("wrap", "block"))
                                                          if c["parallel"] == "fsdp" else "", c["tp"], c["pp"],
                                                          c["accum"], c["recompute"],
                                                          c["schedule"] if c["pp"] > 1 else "")
        print("%-44s %10.2f %10.2f" % (name, c["ms_per_step"], ms))
    best = min(range(len(measured)), key=lambda i: measured[i])
    print("predicted fastest is the measured fastest of the three: %s" % ("yes" if best == 0 else "no (#%d)" % (best + 1)))
    return 0


def measure(a, net, c):
    """fsc-train's ms a step of search candidate c (None after printing why it failed)."""
    opts = ["--world", "4", "--parallel", c["parallel"], "--tp", str(c["tp"]), "--pp", str(c["pp"]), "--accum",
            str(c["accum"]), "--recompute", str(c["recompute"]), "--offload", c["offload"], "--precision",
            c["precision"]]
    if c["parallel"] == "fsdp":
        opts += ["--shard", c["shard"], "--wrap", c.get("wrap", "block")]
    if c.get("ep", 1) > 1:
        opts += ["--ep", str(c["ep"])]
    if c["pp"] > 1:
        opts += ["--schedule", c["schedule"]]
        if c.get("virtual_stages", 1) > 1:
            opts += ["--virtual-stages", str(c["virtual_stages"])]
    run = subprocess.run([os.path.join(a.build, "fsc-train"), "--json", "--steps", str(a.steps)] + net + opts,
                         capture_output=True, text=True)
    if run.returncode != 0:
        print("%s: failed: %s" % (" ".join(opts), run.stderr.strip().splitlines()[-1:]))
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])["ms_per_step"]


if __name__ == "__main__":
    sys.exit(main())
