#!/usr/bin/env python3
# What log-probabilities cost a running `qwenrt serve`: generated tok/s of 1, 16 and 64
# streams of /v1/completions with no logprobs, `logprobs: 0` and `logprobs: 20`, and checks
# of what comes back (each token's log-probability at most 0 and finite, a greedy draw's
# the largest of the top ones). Standard library only.
#   scripts/logprobs_bench.py PORT [--tokens N]
import argparse, json, math, threading, time, urllib.request
ap = argparse.ArgumentParser()
ap.add_argument("port")
ap.add_argument("--tokens", type=int, default=128)
args = ap.parse_args()
URL = "http://127.0.0.1:%s/v1/completions" % args.port

def post(body):
    req = urllib.request.Request(URL, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())

def check(choice, logprobs, greedy):
    lp = choice["logprobs"]
    assert lp is not None and len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert value <= 1e-4 and math.isfinite(value), value
        # The drawn token and the `logprobs` most likely (OpenAI's legacy rule: up to logprobs + 1).
        assert token in top and len(top) <= logprobs + 1, (token, top)
        if logprobs > 0 and greedy: assert abs(max(top.values()) - value) < 1e-3, (token, value, top)

for conc in (1, 16, 64):
    for logprobs in (None, 0, 20):
        out = [None] * conc
        def work(i):
            body = {"prompt": [100 + i, 7, 8, 9], "max_tokens": args.tokens, "ignore_eos": True,
                    "temperature": 0 if i % 2 == 0 else 1, "seed": i}
            if logprobs is not None: body["logprobs"] = logprobs
            t = time.perf_counter()
            out[i] = (post(body), time.perf_counter() - t, i % 2 == 0)
        t0 = time.perf_counter()
        ts = [threading.Thread(target=work, args=(i,)) for i in range(conc)]
        [t.start() for t in ts]; [t.join() for t in ts]
        wall = time.perf_counter() - t0
        tokens = sum(o[0]["usage"]["completion_tokens"] for o in out)
        if logprobs is not None:
            for body, _, greedy in out: check(body["choices"][0], logprobs, greedy)
        name = "none" if logprobs is None else f"logprobs {logprobs}"
        print(f"{conc} streams, {name}: {tokens / wall:.0f} generated tok/s over {wall:.2f} s, "
              f"per stream median {sorted(o[0]['usage']['completion_tokens'] / o[1] for o in out)[conc // 2]:.1f}", flush=True)
