#!/usr/bin/env python3
"""Load generator for `qwenrt serve` (Python standard library only, so it runs on GPU hosts
without Node): N concurrent streams over loopback, each finished stream replaced at once.

Prompts are random token ids (a shared prefix optional) sent to /v1/completions with
ignore_eos, so every stream generates exactly its max_tokens. A share of the requests can be
disconnects (the client closes after a few tokens) and bad requests (each must get a 4xx
with an OpenAI-style error). Reports generated tok/s over the wall time (prefill included),
time to first token and inter-token latency percentiles, errors by kind, and checks through
/metrics that no KV block is held by a sequence once the server is idle (blocks kept by the
prefix cache are reported separately). It also reports the engine's forward passes over the
run from /metrics: their mean wall time, their time on the device and the engine thread's
time between passes. With --soak it also checks that the server's memory stays flat and
exits non-zero on any failure.

With --duration the run also reports a steady window apart: from the end of --warmup to the
end of --duration, while every finished stream is still replaced at once. The whole-run
figure includes the start (every stream's prompt at once) and the drain (the last streams
finishing without replacements); the window has neither. Its generated tok/s is the
engine's own count (/metrics), its latencies those of the tokens that arrive in it, and with
--gpu-energy it reads the card's energy counter over it (joules per generated token, mean
power, SM clock).

The streams are spread over several client processes (--processes; by default one per 32
streams, up to the machine's cores): one Python process cannot read 10,000+ stream chunks a
second, and its global interpreter lock would delay each thread's timestamps by whole
switch intervals, inflating the inter-token latencies it reports.

Examples:
  scripts/loadgen.py --url http://127.0.0.1:8080 --concurrency 256 --prompt-tokens 128 --max-tokens 128 --duration 60
  scripts/loadgen.py --spawn build/qwenrt --model M --concurrency 64 --shared-prefix 1024 --requests 64
"""
import argparse
import collections
import http.client
import json
import multiprocessing
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse


def parse_range(text):
    low, _, high = text.partition(":")
    return int(low), int(high or low)


def percentiles_ms(values):
    """percentiles() of seconds, in milliseconds rounded to 0.01."""
    return {k: (round(v * 1e3, 2) if v is not None else None) for k, v in percentiles(values).items()}


def percentiles(values):
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"p50": pick(0.50), "p90": pick(0.90), "p99": pick(0.99)}


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft, self.itl = [], []
        self.decode_rates = []  # per completed stream: (tokens - 1) / (last token - first token)
        self.generated = 0
        self.completed = 0
        self.disconnects = 0
        self.bad_ok = 0
        self.errors = {}
        # The steady window's share (see --warmup): by the arrival time of the token
        self.window_ttft, self.window_itl = [], []
        self.window_chunks = 0

    def error(self, kind):
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def export(self):
        return {"ttft": self.ttft, "itl": self.itl, "decode_rates": self.decode_rates, "generated": self.generated, "completed": self.completed,
                "disconnects": self.disconnects, "bad_ok": self.bad_ok, "errors": self.errors,
                "window_ttft": self.window_ttft, "window_itl": self.window_itl, "window_chunks": self.window_chunks}

    def merge(self, part):
        self.ttft.extend(part["ttft"])
        self.itl.extend(part["itl"])
        self.decode_rates.extend(part["decode_rates"])
        self.generated += part["generated"]
        self.completed += part["completed"]
        self.disconnects += part["disconnects"]
        self.bad_ok += part["bad_ok"]
        for kind, count in part["errors"].items():
            self.errors[kind] = self.errors.get(kind, 0) + count
        self.window_ttft.extend(part["window_ttft"])
        self.window_itl.extend(part["window_itl"])
        self.window_chunks += part["window_chunks"]


BAD_REQUESTS = [
    (b'{"prompt": [1, 2', "not JSON"),
    (b'\xff\xfe{}', "not UTF-8"),
    (json.dumps({"prompt": [1, 2], "max_tokens": 0}).encode(), "max_tokens 0"),
    (json.dumps({"prompt": [1, 2], "temperature": -1}).encode(), "temperature < 0"),
    (json.dumps({"prompt": [1, 2], "top_p": 0}).encode(), "top_p 0"),
    (json.dumps({"prompt": [-5]}).encode(), "negative token id"),
    (json.dumps({"prompt": [1], "model": "no-such-model"}).encode(), "unknown model"),
    (json.dumps({"prompt": [1], "stop": ["a"] * 50}).encode(), "too many stops"),
    (json.dumps({"prompt": "x", "max_tokens": 10 ** 9}).encode(), "max_tokens over the context"),
    (json.dumps({"prompt": [1], "stop_token_ids": [-1]}).encode(), "a stop token id outside the vocabulary"),
    (json.dumps({"prompt": [1], "prompt_logprobs": 1}).encode(), "a known field not supported"),
]


class Client:
    def __init__(self, args, stats, prefix, window=None):
        url = urllib.parse.urlparse(args.url)
        # (start, end) on time.perf_counter's clock, CLOCK_MONOTONIC on Linux and so the
        # same in every client process
        self.window = window
        self.host, self.port = url.hostname, url.port or 80
        self.args, self.stats, self.prefix = args, stats, prefix
        self.kept = threading.local()  # --keep-alive: each thread's open connection
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = "Bearer " + args.api_key

    def connection(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.args.timeout)

    def stream_connection(self):
        """A new connection, or with --keep-alive the one this thread's last stream left open."""
        if self.args.keep_alive and getattr(self.kept, "conn", None) is not None:
            conn, self.kept.conn = self.kept.conn, None
            return conn
        return self.connection()

    def bad_request(self, rng):
        body, kind = rng.choice(BAD_REQUESTS)
        conn = self.connection()
        try:
            conn.request("POST", "/v1/completions", body=body, headers=self.headers)
            response = conn.getresponse()
            payload = response.read()
            if 400 <= response.status < 500 and b'"error"' in payload:
                with self.stats.lock:
                    self.stats.bad_ok += 1
            else:
                self.stats.error(f"bad request '{kind}' got {response.status}")
        except Exception as error:  # the server must answer, not drop the connection
            self.stats.error(f"bad request '{kind}': {type(error).__name__}")
        finally:
            conn.close()

    def stream(self, rng, disconnect_after=None):
        args = self.args
        prompt = self.prefix + [rng.randrange(args.id_range) for _ in range(rng.randint(*args.prompt_tokens))]
        body = {"prompt": prompt, "max_tokens": rng.randint(*args.max_tokens), "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": args.temperature}
        if args.model_name:
            body["model"] = args.model_name
        conn = self.stream_connection()
        reusable = False
        start = time.perf_counter()
        last = None
        tokens_seen = 0
        usage = None
        phase = "sending"
        try:
            conn.request("POST", "/v1/completions", body=json.dumps(body).encode(), headers=self.headers)
            phase = "waiting for the response"
            response = conn.getresponse()
            phase = "reading the stream"
            if response.status != 200:
                self.stats.error(f"status {response.status}")
                response.read()
                return
            ttft, gaps = None, []
            window_ttft, window_gaps, window_chunks = None, [], 0
            in_window = (lambda t: self.window[0] <= t < self.window[1]) if self.window else (lambda t: False)
            while True:
                line = response.readline()
                if not line:
                    self.stats.error("stream ended without [DONE]")
                    return
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    response.read()  # the chunked body's end: the connection can take the next request
                    reusable = not response.will_close
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    self.stats.error("error event: " + chunk["error"].get("message", "")[:60])
                    return
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("choices"):
                    now = time.perf_counter()
                    if ttft is None:
                        ttft = now - start
                        if in_window(now):
                            window_ttft = ttft
                    elif last is not None:
                        gaps.append(now - last)
                        if in_window(now):
                            window_gaps.append(now - last)
                    if in_window(now):
                        window_chunks += 1
                    last = now
                    tokens_seen += 1
                    if disconnect_after is not None and tokens_seen >= disconnect_after:
                        with self.stats.lock:
                            self.stats.disconnects += 1
                        return  # closing the socket is the disconnect
            with self.stats.lock:
                self.stats.completed += 1
                if ttft is not None:
                    self.stats.ttft.append(ttft)
                self.stats.itl.extend(gaps)
                if len(gaps) > 0 and sum(gaps) > 0:
                    self.stats.decode_rates.append(len(gaps) / sum(gaps))
                self.stats.generated += usage["completion_tokens"] if usage else 0
                if window_ttft is not None:
                    self.stats.window_ttft.append(window_ttft)
                self.stats.window_itl.extend(window_gaps)
                self.stats.window_chunks += window_chunks
        except Exception as error:
            self.stats.error(f"{type(error).__name__} while {phase}")
            reusable = False
        finally:
            if reusable and self.args.keep_alive:
                self.kept.conn = conn
            else:
                conn.close()


def client_process(args, prefix, deadline, window, budget, indexes, results):
    """One client process: a thread per stream index, each starting streams until the
    deadline passes or the shared budget of requests runs out; sends its Stats back."""
    stats = Stats()
    client = Client(args, stats, prefix, window)

    def take():
        if deadline is not None:
            return time.perf_counter() < deadline
        with budget.get_lock():
            if budget.value <= 0:
                return False
            budget.value -= 1
            return True

    def worker(index):
        rng = random.Random(args.seed * 7919 + index)
        while take():
            roll = rng.random()
            if roll < args.bad_share:
                client.bad_request(rng)
            elif roll < args.bad_share + args.disconnect_share:
                client.stream(rng, disconnect_after=rng.randint(1, 4))
            else:
                client.stream(rng)

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in indexes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except BaseException as error:  # the parent waits for this process's report: always send one
        stats.error(f"client process: {type(error).__name__}")
    finally:
        results.put(stats.export())


def get(args, path):
    url = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
    headers = {"Authorization": "Bearer " + args.api_key} if args.api_key else {}
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def metric(text, name):
    match = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


STEP_HISTOGRAMS = {"wall": "qwenrt_engine_step_seconds", "device": "qwenrt_engine_step_device_seconds",
                   "gap": "qwenrt_engine_step_gap_seconds"}


def metrics_text(args):
    """The server's /metrics text now; None where it cannot be had."""
    try:
        status, text = get(args, "/metrics")
    except OSError:
        return None
    return text if status == 200 else None


def step_sums(text):
    """The step histograms' (sum, count) in a /metrics text; None where it lacks them."""
    if text is None:
        return None
    sums = {}
    for key, name in STEP_HISTOGRAMS.items():
        total, count = metric(text, name + "_sum"), metric(text, name + "_count")
        if total is None or count is None:
            return None
        sums[key] = (total, count)
    return sums


def step_means_ms(before, after):
    """Mean milliseconds of each step histogram over the run (between two step_sums)."""
    if before is None or after is None:
        return None
    means = {}
    for key in STEP_HISTOGRAMS:
        count = after[key][1] - before[key][1]
        means[key] = round(1e3 * (after[key][0] - before[key][0]) / count, 3) if count > 0 else None
    means["steps"] = int(after["wall"][1] - before["wall"][1])
    return means


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class GpuMeter:
    """The card's energy counter, power and clock through NVML (ctypes: the driver's own
    library, nothing to install), for --gpu-energy."""

    def __init__(self, index):
        import ctypes
        self.ctypes = ctypes
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as error:
            raise RuntimeError(f"cannot load NVML (libnvidia-ml.so.1): {error}") from None
        self.check(self.lib.nvmlInit_v2(), "nvmlInit")
        self.handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self.handle)),
                   f"no GPU {index}")
        self.energy_mj()  # cards without an energy counter fail here, not mid-run

    def check(self, code, what):
        if code != 0:
            raise RuntimeError(f"NVML: {what} (error {code})")

    def energy_mj(self):
        value = self.ctypes.c_ulonglong()
        self.check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, self.ctypes.byref(value)),
                   "total energy counter")
        return value.value

    def power_w_and_sm_mhz(self):
        power, clock = self.ctypes.c_uint(), self.ctypes.c_uint()
        self.check(self.lib.nvmlDeviceGetPowerUsage(self.handle, self.ctypes.byref(power)), "power")
        self.check(self.lib.nvmlDeviceGetClockInfo(self.handle, 1, self.ctypes.byref(clock)), "SM clock")  # NVML_CLOCK_SM
        return power.value / 1e3, clock.value


def sleep_until(moment):
    delay = moment - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def window_sample(args, gpu):
    """What the steady window's ends record: the engine's counters (one /metrics read) and
    the card's energy."""
    sample = {"time": time.perf_counter(), "energy_mj": None}
    text = metrics_text(args)
    sample["generated"] = metric(text, "qwenrt_generation_tokens_total") if text is not None else None
    sample["step_sums"] = step_sums(text)
    if gpu:
        sample["energy_mj"] = gpu.energy_mj()
    return sample


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--spawn", help="start this qwenrt binary's `serve` (with --model) on a free port")
    parser.add_argument("--model", help="model folder for --spawn")
    parser.add_argument("--tokenizer", help="tokenizer folder for --spawn")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra argument for --spawn's serve")
    parser.add_argument("--model-name", default="", help="the 'model' field (default: none sent)")
    parser.add_argument("--api-key", default=os.environ.get("QWENRT_API_KEY", ""))
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=0, help="seconds of load (steady state)")
    parser.add_argument("--requests", type=int, default=0, help="or this many streams in all")
    parser.add_argument("--prompt-tokens", type=parse_range, default=(128, 128), help="N or LOW:HIGH")
    parser.add_argument("--max-tokens", type=parse_range, default=(128, 128), help="N or LOW:HIGH")
    parser.add_argument("--shared-prefix", type=int, default=0, help="tokens every prompt starts with")
    parser.add_argument("--id-range", type=int, default=256, help="prompt token ids are drawn from [0, N)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--disconnect-share", type=float, default=0.0)
    parser.add_argument("--bad-share", type=float, default=0.0)
    parser.add_argument("--prime", action="store_true",
                        help="send one request alone first and report its TTFT apart (prefix-cache check)")
    parser.add_argument("--processes", type=int, default=0,
                        help="client processes the streams are spread over (default: one per 32 streams, "
                             "at most the number of cores)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="with --duration: seconds before the steady window, which runs to the end of "
                             "--duration and is reported apart (default: a quarter of --duration, at most 5)")
    parser.add_argument("--gpu-energy", type=int, nargs="?", const=0, default=None, metavar="INDEX",
                        help="read this GPU's energy counter, power and SM clock (NVML; index as nvidia-smi "
                             "numbers them, default 0) over the steady window: joules per generated token")
    parser.add_argument("--keep-alive", action="store_true",
                        help="each stream's next request reuses its connection (as SDK clients do); "
                             "by default every request opens its own")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--soak", action="store_true", help="fail on any error, leaked block or memory growth")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    args = parser.parse_args()
    if not args.duration and not args.requests:
        args.requests = args.concurrency
    if args.warmup is None:
        args.warmup = min(5.0, args.duration / 4)
    if args.duration and not 0 <= args.warmup < args.duration:
        parser.error(f"--warmup {args.warmup} must be at least 0 and below --duration {args.duration}")
    gpu = None
    if args.gpu_energy is not None:
        if not args.duration:
            parser.error("--gpu-energy measures the steady window: it needs --duration")
        try:
            gpu = GpuMeter(args.gpu_energy)
        except RuntimeError as error:
            parser.error(f"--gpu-energy: {error}")

    server = None
    if args.spawn:
        command = [args.spawn, "serve", "-m", args.model, "--port", "0"] + args.serve_arg
        if args.tokenizer:
            command += ["--tokenizer", args.tokenizer]
        server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        # The server's log is kept (its last lines) and shown when a check fails.
        server_log = collections.deque(maxlen=200)
        for line in server.stderr:
            server_log.append(line)
            match = re.search(r"on http://([^:]+):(\d+)", line)
            if match:
                args.url = f"http://{match.group(1)}:{match.group(2)}"
                break
        else:
            sys.exit("loadgen: the server did not start:\n" + "".join("  | " + line for line in server_log))
        log_reader = threading.Thread(target=lambda: server_log.extend(server.stderr), daemon=True)
        log_reader.start()

    rng_master = random.Random(args.seed)
    prefix = [rng_master.randrange(args.id_range) for _ in range(args.shared_prefix)]
    stats = Stats()
    first_ttft = None
    if args.prime:
        primer = Stats()
        Client(args, primer, prefix).stream(random.Random(args.seed))
        first_ttft = primer.ttft[0] if primer.ttft else None
        for kind, count in primer.errors.items():
            stats.errors[kind] = stats.errors.get(kind, 0) + count

    processes = args.processes or max(1, min(os.cpu_count() or 1, (args.concurrency + 31) // 32))
    processes = max(1, min(processes, args.concurrency))
    context = multiprocessing.get_context("fork")
    budget = context.Value("q", args.requests)  # streams left to start (--requests)
    results = context.Queue()
    rss_start = None
    steps_before = step_sums(metrics_text(args))
    started = time.perf_counter()
    deadline = started + args.duration if args.duration else None
    # The steady window: from the warm-up's end (every stream started, the first prompts
    # prefilled) to the deadline, before the streams still running drain without
    # replacements. Its counts come from the server (/metrics) and the card, and the
    # latencies of the tokens that arrive inside it.
    window = (started + args.warmup, deadline) if deadline else None
    workers = [list(range(p, args.concurrency, processes)) for p in range(processes)]
    children = [context.Process(target=client_process, args=(args, prefix, deadline, window, budget, indexes, results))
                for indexes in workers]
    for child in children:
        child.start()
    window_start = window_end = None
    gpu_samples = []
    if window:
        # The soak's memory baseline after a warm-up of its own (min(5 s, D/4), whatever
        # --warmup says): allocations that grow once (thread stacks, staging buffers) are
        # not a leak.
        rss_at = started + min(5.0, args.duration / 4) if server and args.soak else None
        try:
            while time.perf_counter() < window[1]:
                now = time.perf_counter()
                if rss_at is not None and rss_start is None and now >= rss_at:
                    rss_start = rss_kib(server.pid)
                if window_start is None and now >= window[0]:
                    window_start = window_sample(args, gpu)
                elif window_start is not None and gpu:
                    gpu_samples.append(gpu.power_w_and_sm_mhz())
                wake = min(window[1], now + 0.2, *(t for t in (window[0], rss_at) if t is not None and t > now))
                sleep_until(wake)
            window_end = window_sample(args, gpu)
        except RuntimeError as error:  # NVML failing mid-run: the run goes on without the window
            stats.error(f"steady window: {error}")
            window_start = window_end = None
    # One report per child; a child that died without sending one (killed) is an error,
    # not a wait forever.
    reports = 0
    while reports < len(children):
        try:
            stats.merge(results.get(timeout=1.0))
            reports += 1
        except queue.Empty:
            if not any(child.is_alive() for child in children) and results.empty():
                stats.error(f"{len(children) - reports} client process(es) ended without a report")
                break
    for child in children:
        child.join()
        if child.exitcode != 0:
            stats.error(f"client process exited with {child.exitcode}")
    wall = time.perf_counter() - started
    steps = step_means_ms(steps_before, step_sums(metrics_text(args)))

    # Idle: every sequence ends within a step of its stream ending or being dropped.
    leaked = None
    cached = None
    for _ in range(100):
        status, text = get(args, "/metrics")
        if status == 200 and metric(text, "qwenrt_requests_active") == 0:
            leaked = metric(text, "qwenrt_kv_blocks_used")
            cached = metric(text, "qwenrt_kv_blocks_cached")
            if leaked == 0:
                break
        time.sleep(0.1)
    rss_end = rss_kib(server.pid) if server else None

    report = {
        "concurrency": args.concurrency, "wall_s": round(wall, 3), "completed_streams": stats.completed,
        "generated_tokens": stats.generated, "generated_tok_per_s": round(stats.generated / wall, 1),
        "ttft_ms": percentiles_ms(stats.ttft),
        "itl_ms": percentiles_ms(stats.itl),
        "stream_decode_tok_per_s": (round(percentiles(stats.decode_rates)["p50"], 1) if stats.decode_rates else None),
        "disconnects": stats.disconnects, "bad_requests_answered": stats.bad_ok, "errors": stats.errors,
        "kv_blocks_held_when_idle": leaked, "kv_blocks_cached_when_idle": cached,
        # The engine's forward passes that sampled, over the run (/metrics): mean wall time,
        # time on the device, and the engine thread's time between consecutive passes.
        "engine_step_ms": steps,
    }
    if window_start and window_end:
        seconds = window_end["time"] - window_start["time"]
        delta = lambda key: (window_end[key] - window_start[key]
                             if window_end[key] is not None and window_start[key] is not None else None)
        generated, energy = delta("generated"), delta("energy_mj")
        steady = {
            "window_s": round(seconds, 3),
            # the engine's generated tokens (/metrics) over the window: every stream's, the
            # disconnected ones' too
            "generated_tok_per_s": round(generated / seconds, 1) if generated is not None else None,
            # stream chunks the completed streams received in the window (a chunk is a token
            # unless text was held back for an incomplete character or a stop string)
            "chunks_per_s": round(stats.window_chunks / seconds, 1),
            # the window's passes that sampled: mean wall, device and between-pass times
            "engine_step_ms": step_means_ms(window_start["step_sums"], window_end["step_sums"]),
            "ttft_ms": percentiles_ms(stats.window_ttft), "itl_ms": percentiles_ms(stats.window_itl),
        }
        if gpu:
            powers = [p for p, _ in gpu_samples]
            clocks = [c for _, c in gpu_samples]
            steady["gpu"] = {
                "energy_j": round(energy / 1e3, 1),
                "mean_power_w": round(energy / 1e3 / seconds, 1),
                "mj_per_generated_token": round(energy / generated, 3) if generated else None,
                "power_w": {k: round(v, 1) if v is not None else None for k, v in percentiles(powers).items()},
                "sm_clock_mhz": percentiles(clocks), "samples": len(gpu_samples),
            }
        report["steady"] = steady
    if first_ttft is not None:
        report["first_request_ttft_ms"] = round(first_ttft * 1e3, 2)
    if rss_start is not None:
        report["server_rss_mib"] = {"after_warmup": round(rss_start / 1024, 1), "end": round(rss_end / 1024, 1)}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"loadgen: {args.concurrency} concurrent streams, {wall:.1f} s")
        print(f"  generated      {stats.generated} tokens, {report['generated_tok_per_s']} tok/s (wall, prefill included)")
        print(f"  streams        {stats.completed} completed, {stats.disconnects} disconnected on purpose")
        print(f"  TTFT ms        p50 {report['ttft_ms']['p50']}  p90 {report['ttft_ms']['p90']}  p99 {report['ttft_ms']['p99']}")
        print(f"  inter-token ms p50 {report['itl_ms']['p50']}  p90 {report['itl_ms']['p90']}  p99 {report['itl_ms']['p99']}")
        print(f"  one stream     {report['stream_decode_tok_per_s']} tok/s after its first token (median over streams)")
        if first_ttft is not None:
            print(f"  first request  TTFT {report['first_request_ttft_ms']} ms (sent alone, before the others)")
        print(f"  bad requests   {stats.bad_ok} answered with a 4xx error")
        print(f"  errors         {stats.errors or 'none'}")
        print(f"  KV when idle   {leaked} blocks held by sequences, {cached} kept by the prefix cache")
        if steps is not None:
            print(f"  engine steps   {steps['steps']} that sampled: {steps['wall']} ms mean wall, "
                  f"{steps['device']} ms on the device, {steps['gap']} ms between passes")
        if "steady" in report:
            steady = report["steady"]
            print(f"  steady window  {steady['window_s']} s after a {args.warmup} s warm-up, to the end of "
                  f"--duration: {steady['generated_tok_per_s']} generated tok/s (engine), "
                  f"{steady['chunks_per_s']} stream chunks/s received")
            print(f"                 TTFT ms p50 {steady['ttft_ms']['p50']}  p99 {steady['ttft_ms']['p99']}, "
                  f"inter-token ms p50 {steady['itl_ms']['p50']}  p99 {steady['itl_ms']['p99']}")
            window_steps = steady["engine_step_ms"]
            if window_steps is not None:
                print(f"                 {window_steps['steps']} engine steps that sampled: {window_steps['wall']} ms "
                      f"mean wall, {window_steps['device']} ms on the device, {window_steps['gap']} ms between passes")
            if "gpu" in steady:
                g = steady["gpu"]
                print(f"  GPU            {g['mean_power_w']} W mean, {g['mj_per_generated_token']} mJ a generated "
                      f"token; SM clock p50 {g['sm_clock_mhz']['p50']} MHz")
        if rss_start is not None:
            print(f"  server RSS     {report['server_rss_mib']['after_warmup']} MiB after warm-up, "
                  f"{report['server_rss_mib']['end']} MiB at the end")

    failures = []
    if leaked != 0:
        failures.append(f"KV blocks still held when idle: {leaked}")
    if args.soak:
        if stats.errors:
            failures.append(f"errors: {stats.errors}")
        if server and server.poll() is not None:
            failures.append(f"the server exited with {server.returncode}")
        if rss_start is not None and rss_end > rss_start * 1.25 + 32 * 1024:
            failures.append(f"server memory grew from {rss_start} KiB to {rss_end} KiB")
        if stats.completed == 0:
            failures.append("no stream completed")
    if server:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log_reader.join(timeout=5)
    for failure in failures:
        print("loadgen: FAIL: " + failure, file=sys.stderr)
    if server and failures:
        print(f"loadgen: the server's log, last {len(server_log)} lines:", file=sys.stderr)
        for line in list(server_log):
            print("  | " + line.rstrip("\n"), file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
