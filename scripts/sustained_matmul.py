#!/usr/bin/env python3
"""The bf16 (or fp16) matrix rate a card sustains on the products of a Qwen layer, second by second.

Runs the products of one transformer layer (q|k|v, o, gate, up, down) for M rows over and
over for --seconds, times each second with device events, and samples the card's SM clock,
power draw and throttle reasons with nvidia-smi. The first second is the rate a short
benchmark sees; the later ones are what a server under steady load gets.

  python3 scripts/sustained_matmul.py --rows 1024 --seconds 30
"""
import argparse
import json
import subprocess
import threading
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024, help="rows (tokens) of every product")
    ap.add_argument("--hidden", type=int, default=3584, help="hidden size (Qwen2.5-7B: 3584)")
    ap.add_argument("--qkv", type=int, default=4608, help="q|k|v outputs (Qwen2.5-7B: 4608)")
    ap.add_argument("--intermediate", type=int, default=18944, help="MLP width (Qwen2.5-7B: 18944)")
    ap.add_argument("--layers", type=int, default=28, help="distinct weight sets (keeps L2 honest)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--std", type=float, default=0.02, help="weights ~ N(0, std) as transformers initialises")
    ap.add_argument("--dtype", choices=["bf16", "f16"], default="bf16",
                    help="operand type (f16 keeps ten random mantissa bits a value, bf16 seven)")
    args = ap.parse_args()

    dev = torch.device("cuda")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    h, m = args.hidden, args.rows
    shapes = [(args.qkv, h), (h, h), (args.intermediate, h), (args.intermediate, h), (h, args.intermediate)]
    weights = [[(torch.randn(n, k, device=dev) * args.std).to(dtype) for n, k in shapes]
               for _ in range(args.layers)]
    x = {k: torch.randn(m, k, device=dev).to(dtype) for k in {h, args.intermediate}}
    flops_layer = sum(2 * m * n * k for n, k in shapes)

    samples = []
    stop = threading.Event()

    def sample():
        query = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
        while not stop.is_set():
            out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.strip().split(", ")
            samples.append((time.time(), out))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(1.0)  # an idle reading first

    seconds = []
    start = time.time()
    while time.time() - start < args.seconds:
        t0 = time.time()
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ev0.record()
        layers = 0
        while time.time() - t0 < 1.0:
            for layer in weights:
                for w in layer:
                    torch.matmul(x[w.shape[1]], w.t())
                layers += 1
            torch.cuda.synchronize()
        ev1.record()
        torch.cuda.synchronize()
        ms = ev0.elapsed_time(ev1)
        seconds.append({"t": round(t0 - start, 1), "tflops": round(flops_layer * layers / ms / 1e9, 1)})
    stop.set()
    sampler.join()
    for s in seconds:
        near = [o for t, o in samples if abs(t - (start + s["t"] + 0.5)) < 0.6]
        if near:
            s["sm_mhz"], s["power_w"], s["temp_c"], s["throttle"] = near[-1]
        print(json.dumps(s))
    idle = samples[0][1] if samples else None
    half = seconds[len(seconds) // 2:]
    rates = sorted(s["tflops"] for s in half)
    clocks = sorted(float(s["sm_mhz"]) for s in half if "sm_mhz" in s)
    print(json.dumps({"rows": m, "dtype": args.dtype, "idle": idle, "first_second_tflops": seconds[0]["tflops"],
                      "second_half_median_tflops": rates[len(rates) // 2],
                      "second_half_median_sm_mhz": clocks[len(clocks) // 2] if clocks else None}))


if __name__ == "__main__":
    main()
