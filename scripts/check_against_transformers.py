#!/usr/bin/env python3
"""Held-out check: random Qwen2/Qwen3 checkpoints the tests never saw (other shapes, GQA
ratios, tied/untied, YaRN, both config spellings, bf16/fp16/fp32), written by transformers,
scored and greedily continued by both transformers (fp32, eager) and a qwenrt binary.

    python3 scripts/check_against_transformers.py --qwenrt build/cpu/qwenrt --count 12

Prints one line per checkpoint and exits non-zero if any log-prob differs by more than
--tolerance or any greedy token differs (where transformers' top-2 margin is not a near tie).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as fixtures  # noqa: E402


def random_spec(rng):
    arch = rng.choice(["qwen2", "qwen3"])
    kv_heads = rng.choice([1, 2, 3, 4])
    heads = kv_heads * rng.choice([1, 2, 3, 4, 8])
    if arch == "qwen3":
        head_dim = rng.choice([8, 16, 24, 32, 64])
        hidden = rng.choice([32, 48, 64, 96])
    else:
        head_dim = rng.choice([8, 16, 32])
        hidden = heads * head_dim
    kwargs = dict(hidden_size=hidden, intermediate_size=rng.choice([40, 64, 100, 136]),
                  num_hidden_layers=rng.choice([1, 2, 3]), num_attention_heads=heads,
                  num_key_value_heads=kv_heads, vocab_size=rng.choice([97, 128, 257, 384]),
                  rms_norm_eps=rng.choice([1e-5, 1e-6]), max_position_embeddings=512,
                  tie_word_embeddings=rng.random() < 0.5,
                  rope_theta=rng.choice([10000.0, 1000000.0, 50000.0]))
    if arch == "qwen3":
        kwargs["head_dim"] = head_dim
        kwargs["attention_bias"] = rng.random() < 0.3
    if rng.random() < 0.4:
        factor = rng.choice([2.0, 4.0, 8.0])
        kwargs["rope_scaling"] = {"rope_type": "yarn", "factor": factor,
                                  "original_max_position_embeddings": rng.choice([32, 64, 128])}
    dtype = rng.choice([torch.bfloat16, torch.float16, torch.float32])
    vocab = kwargs["vocab_size"]
    options = dict(dtype=dtype, eos=[rng.randrange(vocab)], legacy_rope=rng.random() < 0.5)
    return arch, kwargs, options


def run_json(command):
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qwenrt", required=True)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--seed", type=int, default=424242)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--keep", help="keep the checkpoints in this folder")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    torch.set_grad_enabled(False)
    failures = 0
    root = args.keep or tempfile.mkdtemp()
    os.makedirs(root, exist_ok=True)
    for index in range(args.count):
        arch, kwargs, options = random_spec(rng)
        name = f"heldout_{index}"
        fixtures.write_fixture(root, name, arch, kwargs, options, seed=args.seed + index)
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "reference.json")) as f:
            ref = json.load(f)
        base = [args.qwenrt]
        device = ["--device", args.device]
        scored = run_json(base + ["score", "-m", folder, "--format", "json", "--ids",
                                  " ".join(map(str, ref["score_ids"]))] + device)
        diff = max(abs(a - b) for a, b in zip(scored["logprobs"], ref["logprobs"]))
        greedy_ok = True
        for case in ref["greedy"]:
            out = run_json(base + ["generate", "-m", folder, "--format", "json", "-n",
                                   str(case["max_new_tokens"]), "--ids",
                                   " ".join(map(str, case["prompt"]))] + device)
            if out["ids"] != case["generated"]:
                near_tie = case["min_top2_margin"] < 1e-3
                greedy_ok = greedy_ok and near_tie
                print(f"  greedy differs: ours {out['ids']} vs {case['generated']}"
                      f" (min margin {case['min_top2_margin']:.2e}{', near tie' if near_tie else ''})")
        ok = diff <= args.tolerance and greedy_ok
        failures += not ok
        desc = (f"{arch} h{kwargs['hidden_size']} heads {kwargs['num_attention_heads']}/"
                f"{kwargs['num_key_value_heads']} hd {kwargs.get('head_dim', kwargs['hidden_size'] // kwargs['num_attention_heads'])}"
                f" L{kwargs['num_hidden_layers']} V{kwargs['vocab_size']} tied={kwargs['tie_word_embeddings']}"
                f" yarn={'rope_scaling' in kwargs} legacy={options['legacy_rope']} {str(options['dtype'])[6:]}")
        print(f"{'PASS' if ok else 'FAIL'} {name}: {desc}: max |dlogprob| {diff:.2e}, greedy {'same' if greedy_ok else 'DIFFERENT'}")
    print(f"{args.count - failures}/{args.count} held-out checkpoints match transformers")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
