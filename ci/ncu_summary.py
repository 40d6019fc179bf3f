#!/usr/bin/env python3
"""ci/ncu_summary.py CSV [TOP]: the kernels of an `ncu --csv --page raw --metrics gpu__time_duration.sum` run,
summed per kernel name (template arguments and parameter lists dropped), the TOP largest with their share of
the total, one line each (ci/gpu_check.sh's profile step puts them in the summary)."""
import csv
import sys


def short(name):
    name = name.split("(")[0]
    if name.startswith("void "):
        name = name[5:]
    depth, out = 0, []
    for ch in name:  # drop <...>, nested
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or name


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
    if head is None:
        print("profile: no kernel rows in %s" % path)
        return 1
    h = rows[head]
    kn, tm = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
    scale = 1.0  # to microseconds, from the units row when there is one
    units = rows[head + 1] if head + 1 < len(rows) else []
    per_unit = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
                "s": 1e6}  # ncu 2025 writes "ns"; older ones "nsecond"
    if len(units) > tm and units[tm] in per_unit:
        scale = per_unit[units[tm]]
    total, per, count = 0.0, {}, {}
    for r in rows[head + 1:]:
        if len(r) <= max(kn, tm):
            continue
        try:
            t = float(r[tm].replace(",", "")) * scale
        except ValueError:
            continue
        k = short(r[kn])
        per[k] = per.get(k, 0.0) + t
        count[k] = count.get(k, 0) + 1
        total += t
    if not per:
        print("profile: no timed kernels in %s" % path)
        return 1
    print("profile: %d launches, %.1f ms of kernel time" % (sum(count.values()), total / 1e3))
    for k, t in sorted(per.items(), key=lambda kv: -kv[1])[:top]:
        print("  %5.1f%% %9.2f ms %6d x %s" % (100 * t / total, t / 1e3, count[k], k[:90]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
