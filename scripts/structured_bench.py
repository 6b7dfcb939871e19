#!/usr/bin/env python3
# Structured output against a running `qwenrt serve`: the decode rate of one stream free and
# under grammars (json_object, json_schema), then 16 and 64 streams at once, and that every
# answer that ends parses (and fits its schema; `pattern` strings included). Standard library only.
#   scripts/structured_bench.py PORT [--streams 16,64] [--kinds free,json_schema,pattern] [--no-single]
import argparse, json, re, sys, time, threading, urllib.request
ap = argparse.ArgumentParser()
ap.add_argument("port")
ap.add_argument("--streams", default="16,64", help="concurrent stream counts, comma-separated")
ap.add_argument("--kinds", default="free,json_schema,pattern", help="what the concurrent streams ask for")
ap.add_argument("--no-single", action="store_true", help="skip the one-stream rates")
args = ap.parse_args()
URL = "http://127.0.0.1:%s/v1/completions" % args.port
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}, "ok": {"type": "boolean"}},
          "required": ["name", "age", "tags", "ok"]}
# Strings under `pattern`: the mask inside them walks each pattern's automaton (Python's re reads
# these patterns as JavaScript does).
PATTERNS = {"code": "^[A-Z]{3}-[0-9]{4}$", "email": "^[a-z0-9._]{1,20}@[a-z]{2,12}\\.(com|org|net)$",
            "note": "^[A-Za-z ,.]{0,80}$"}
PSCHEMA = {"type": "object", "properties": {k: {"type": "string", "pattern": v} for k, v in PATTERNS.items()},
           "required": list(PATTERNS)}
def stream(body):
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(URL, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter(); first = None; text = ""; finish = None; usage = None
    with urllib.request.urlopen(req) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]": continue
            d = json.loads(line[6:])
            if d.get("usage"): usage = d["usage"]
            for c in d["choices"]:
                if c.get("text"):
                    if first is None: first = time.perf_counter()
                    text += c["text"]
                if c.get("finish_reason"): finish = c["finish_reason"]
    end = time.perf_counter()
    n = usage["completion_tokens"]
    rate = (n - 1) / (end - first) if first and n > 1 else 0
    return rate, n, finish, text
base = {"prompt": "Describe a person as JSON:", "temperature": 1.0}
kinds = {"free": {"max_tokens": 256, "ignore_eos": True},
         "json_object": {"max_tokens": 256, "response_format": {"type": "json_object"}},
         "json_schema": {"max_tokens": 256, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
         "pattern": {"max_tokens": 256, "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": PSCHEMA}}}}
def check(kind, text):
    v = json.loads(text)
    if kind == "json_schema": assert list(v) == ["name", "age", "tags", "ok"] and isinstance(v["age"], int) and 0 <= v["age"] <= 120, text
    if kind == "pattern": assert list(v) == list(PATTERNS) and all(re.search(p, v[k]) for k, p in PATTERNS.items()), text
for kind, extra in kinds.items():
    if args.no_single: break
    rates = []; ok = 0; stops = 0; lengths = []
    for seed in range(5):
        rate, n, finish, text = stream({**base, **extra, "seed": seed})
        rates.append(rate); lengths.append(n)
        if finish == "stop":
            stops += 1
            check(kind, text); ok += 1
    rates.sort()
    print(f"one stream {kind}: decode tok/s median {rates[2]:.1f} (min {rates[0]:.1f}, max {rates[-1]:.1f}); tokens {sorted(lengths)}; stopped {stops}/5, parsed {ok}", flush=True)
for conc in [int(n) for n in args.streams.split(",")]:
    for kind in args.kinds.split(","):
        out = [None] * conc
        def work(i):
            out[i] = stream({**base, **kinds[kind], "seed": 100 + i, "max_tokens": 128})
        t0 = time.perf_counter()
        ts = [threading.Thread(target=work, args=(i,)) for i in range(conc)]
        [t.start() for t in ts]; [t.join() for t in ts]
        wall = time.perf_counter() - t0
        toks = sum(o[1] for o in out)
        bad = 0
        for o in out:
            if o[2] == "stop":
                try: check(kind, o[3])
                except Exception: bad += 1
        print(f"{conc} streams {kind}: {toks / wall:.0f} generated tok/s over {wall:.2f} s, per-stream median {sorted(o[0] for o in out)[conc // 2]:.1f}, stopped {sum(o[2] == 'stop' for o in out)}, unparsable {bad}", flush=True)
