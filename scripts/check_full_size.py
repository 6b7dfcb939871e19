#!/usr/bin/env python3
"""Full-size check on a GPU host: a checkpoint with Qwen2.5-7B's exact shapes (random
weights, bf16) written by transformers, then teacher-forced next-token top-1 agreement of
qwenrt (bf16, CUDA) with transformers in bf16 over N positions, and the mean absolute
log-prob difference against transformers in bf16 and in fp32.

    python3 scripts/check_full_size.py --qwenrt build/qwenrt --dir /tmp/qwen7b --positions 256
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import transformers


def seven_b_config():
    config = transformers.Qwen2Config(
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768, rms_norm_eps=1e-6,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    config.architectures = ["Qwen2ForCausalLM"]
    return config


@torch.no_grad()
def widen(model, generator):
    # As in gen_model_fixtures.py: wider than the 0.02 init so that top-1 is not a coin toss.
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.copy_(0.6 + 0.8 * torch.rand(param.shape, generator=generator, device=param.device))
        elif name.endswith(".bias"):
            param.copy_(0.5 * torch.randn(param.shape, generator=generator, device=param.device))
        elif "embed_tokens" in name:
            param.copy_(torch.randn(param.shape, generator=generator, device=param.device))
        else:
            param.copy_(torch.randn(param.shape, generator=generator, device=param.device) * (1.6 / math.sqrt(param.shape[1])))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qwenrt", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--positions", type=int, default=256)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    start = time.time()
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.Qwen2ForCausalLM(seven_b_config())
    torch.set_default_dtype(torch.float32)
    widen(model, generator)
    model.eval()
    model.save_pretrained(args.dir, max_shard_size="4GB")
    print(f"wrote {args.dir} in {time.time() - start:.0f} s", flush=True)
    ids = torch.randint(0, 152064, (1, args.positions + 1), generator=generator, device="cuda")
    logits_bf16 = model(ids).logits.float()[0, :-1]
    model = model.float()
    logits_fp32 = model(ids).logits.float()[0, :-1]
    del model
    targets = ids[0, 1:]
    lp_bf16 = torch.log_softmax(logits_bf16, -1).gather(-1, targets[:, None])[:, 0]
    lp_fp32 = torch.log_softmax(logits_fp32, -1).gather(-1, targets[:, None])[:, 0]
    top1_bf16 = logits_bf16.argmax(-1).tolist()
    top1_fp32 = logits_fp32.argmax(-1).tolist()
    out = subprocess.run([args.qwenrt, "score", "-m", args.dir, "--device", "cuda", "--dtype", "bf16",
                          "--format", "json", "--ids", " ".join(map(str, ids[0].tolist()))],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr)
        return 1
    ours = json.loads(out.stdout)
    ours_lp = torch.tensor(ours["logprobs"], device="cuda")
    n = args.positions
    agree_bf16 = sum(a == b for a, b in zip(ours["argmax"], top1_bf16)) / n
    agree_fp32 = sum(a == b for a, b in zip(ours["argmax"], top1_fp32)) / n
    hf_agree = sum(a == b for a, b in zip(top1_bf16, top1_fp32)) / n
    result = {
        "positions": n,
        "top1_agreement_vs_transformers_bf16": agree_bf16,
        "top1_agreement_vs_transformers_fp32": agree_fp32,
        "transformers_bf16_vs_fp32_top1_agreement": hf_agree,
        "mean_abs_logprob_diff_vs_bf16": (ours_lp - lp_bf16).abs().mean().item(),
        "mean_abs_logprob_diff_vs_fp32": (ours_lp - lp_fp32).abs().mean().item(),
        "transformers_bf16_vs_fp32_mean_abs_logprob_diff": (lp_bf16 - lp_fp32).abs().mean().item(),
        "mean_top_prob_fp32": torch.softmax(logits_fp32, -1).max(-1).values.mean().item(),
    }
    print(json.dumps(result, indent=1))
    return 0 if agree_bf16 >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
