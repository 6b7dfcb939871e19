#!/usr/bin/env python3
"""The two ceilings `qwenrt bench` measures a card against: a large device-to-device copy
(bytes read + written a second) and a large bf16 product on random data (TFLOP/s).

Each is timed with device events after a warm-up; the median of --repeat runs is printed,
with the card's name as the CUDA driver reports it (what the backend matches on).

  python3 scripts/device_ceilings.py
"""
import argparse
import json
import statistics

import torch


def timed(fn, repeat):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copy-gib", type=float, default=4.0, help="bytes copied in one run, GiB")
    ap.add_argument("--size", type=int, default=8192, help="M = N = K of the product")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    torch.manual_seed(0)
    n = int(args.copy_gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    copy_s = timed(lambda: dst.copy_(src), args.repeat)
    del src, dst

    s = args.size
    a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
    gemm_s = timed(lambda: torch.matmul(a, b, out=c), args.repeat)

    print(json.dumps({
        "device": torch.cuda.get_device_name(),
        "copy_bytes_per_s": 2 * n * 2 / copy_s,
        "bf16_matmul_flops_per_s": 2.0 * s * s * s / gemm_s,
    }))


if __name__ == "__main__":
    main()
