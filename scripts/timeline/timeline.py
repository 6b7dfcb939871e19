#!/usr/bin/env python3
"""Reads a trace from cupti_trace.cpp and reports the engine's steps on the device.

A step is the device activity between two idle stretches longer than --step-gap (the
engine's host work between forward passes); a stretch of copies alone joins the step after
it. Steps are grouped as decode (no prompt-attention kernel) or prompt (with one). For each
group: the median step span, kernel time, idle time inside the step and before it, and the
kernels by name (count and microseconds a step).

  scripts/timeline/timeline.py trace.csv [--step-gap-us 100] [--top 16]
"""
import argparse
import collections
import statistics


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--step-gap-us", type=float, default=100.0)
    parser.add_argument("--top", type=int, default=16)
    args = parser.parse_args()

    device = []
    with open(args.trace) as f:
        for line in f:
            parts = line.rstrip("\n").split(",", 3)
            if len(parts) == 4 and parts[0] in ("K", "M"):
                device.append((parts[0], int(parts[1]), int(parts[2]), parts[3]))
    device.sort(key=lambda r: r[1])
    if not device:
        raise SystemExit("timeline: no kernels or copies in the trace")

    gap_ns = args.step_gap_us * 1e3
    segments = [[device[0]]]
    for before, record in zip(device, device[1:]):
        if record[1] - before[2] > gap_ns:
            segments.append([])
        segments[-1].append(record)
    steps, pending = [], []
    for segment in segments:
        if any(r[0] == "K" for r in segment):
            steps.append(pending + segment)
            pending = []
        else:
            pending += segment
    steps = steps[1:-1]  # the window cuts the first and the last
    if not steps:
        raise SystemExit("timeline: fewer than three steps in the trace")

    groups = collections.defaultdict(list)
    for i, step in enumerate(steps):
        kind = "prompt" if any(r[0] == "K" and "prefill" in r[3] for r in step) else "decode"
        span = step[-1][2] - step[0][1]
        busy = sum(r[2] - r[1] for r in step if r[0] == "K")
        before = step[0][1] - steps[i - 1][-1][2] if i > 0 else None
        groups[kind].append((span, busy, before, step))

    window = steps[-1][-1][2] - steps[0][0][1]
    busy_all = sum(s[1] for g in groups.values() for s in g)
    print(f"{len(steps)} steps in {window / 1e6:.1f} ms; kernels busy {100 * busy_all / window:.1f}% of it")
    for kind, rows in groups.items():
        med = lambda values: statistics.median(values) / 1e3
        befores = [r[2] for r in rows if r[2] is not None]
        print(f"\n{kind}: {len(rows)} steps; median span {med([r[0] for r in rows]):.1f} us, kernels "
              f"{med([r[1] for r in rows]):.1f} us, idle inside {med([r[0] - r[1] for r in rows]):.1f} us, "
              f"idle before {med(befores) if befores else 0:.1f} us")
        by_name = collections.defaultdict(lambda: [0, 0.0])
        for row in rows:
            for r in row[3]:
                if r[0] == "K":
                    by_name[r[3][:90]][0] += 1
                    by_name[r[3][:90]][1] += (r[2] - r[1]) / 1e3
        for name, (count, total) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:args.top]:
            print(f"  {count / len(rows):6.1f} x {total / count:7.1f} us = {total / len(rows):8.1f} us  {name}")


if __name__ == "__main__":
    main()
