#!/usr/bin/env python3
"""Writes the tiny Qwen checkpoints the model tests use, with transformers' own fp32
log-probabilities and greedy tokens as the reference.

Needs torch and transformers (run it where they are installed):
    python3 scripts/gen_model_fixtures.py --out tests/data/models

Each fixture folder holds config.json, generation_config.json, *.safetensors written by
transformers' save_pretrained, and reference.json. The reference is computed from the model
*reloaded from the folder* in fp32 with eager attention, so it describes exactly the files
committed. Weights are drawn wider than the usual 0.02 init so next-token distributions are
peaked: near-uniform logits would hide bugs.
"""
import argparse
import json
import math
import os
import shutil

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig


def fixture_specs():
    """name -> (architecture, config kwargs, options)."""
    return {
        # Qwen2 with GQA (4 query heads share 2 KV heads), q/k/v biases, untied, bf16, sharded.
        "qwen2_gqa": ("qwen2", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                    rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=512,
                                    tie_word_embeddings=False),
                      dict(dtype=torch.bfloat16, shard="60KB", eos=[7], legacy_rope=True)),
        # Qwen2 with tied embeddings, GQA ratio 6, head_dim 8, fp16 weights, eps 1e-5.
        "qwen2_tied": ("qwen2", dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                                     num_attention_heads=6, num_key_value_heads=1, vocab_size=200,
                                     rms_norm_eps=1e-5, rope_theta=1000000.0, max_position_embeddings=512,
                                     tie_word_embeddings=True),
                       dict(dtype=torch.float16, eos=[3, 9], legacy_rope=False)),
        # Qwen3: head_dim 24 != hidden/heads (16), per-head q/k RMSNorm, no bias, bf16.
        "qwen3_qknorm": ("qwen3", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                                       vocab_size=300, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                       max_position_embeddings=512, tie_word_embeddings=False,
                                       attention_bias=False),
                         dict(dtype=torch.bfloat16, eos=[11], legacy_rope=False)),
        # Qwen3 with YaRN (factor 4 over an original 64-token context), tied, fp32 weights,
        # written in the older rope_theta/rope_scaling spelling.
        "qwen3_yarn": ("qwen3", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                                     vocab_size=160, rms_norm_eps=1e-6, rope_theta=10000.0,
                                     max_position_embeddings=256, tie_word_embeddings=True,
                                     rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 64}),
                       dict(dtype=torch.float32, eos=[2], legacy_rope=True)),
        # Qwen2 with YaRN in the newer rope_parameters spelling, bf16.
        "qwen2_yarn": ("qwen2", dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=8, num_key_value_heads=2, vocab_size=128,
                                     rms_norm_eps=1e-6, max_position_embeddings=512,
                                     tie_word_embeddings=False,
                                     rope_parameters={"rope_type": "yarn", "rope_theta": 100000.0,
                                                      "factor": 2.0,
                                                      "original_max_position_embeddings": 128}),
                       dict(dtype=torch.bfloat16, eos=[1], legacy_rope=False)),
    }


def make_config(arch, kwargs):
    kwargs = dict(kwargs)
    if "rope_scaling" in kwargs and transformers.__version__ >= "5":
        scaling = kwargs.pop("rope_scaling")
        kwargs["rope_parameters"] = dict(scaling, rope_theta=kwargs.pop("rope_theta"))
    if "rope_parameters" not in kwargs and transformers.__version__ >= "5":
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": kwargs.pop("rope_theta")}
    cls = transformers.Qwen2Config if arch == "qwen2" else transformers.Qwen3Config
    config = cls(**kwargs)
    config.architectures = ["Qwen2ForCausalLM" if arch == "qwen2" else "Qwen3ForCausalLM"]
    return config


@torch.no_grad()
def widen_weights(model, generator):
    """Re-draws every parameter so that logits are far from uniform."""
    for name, param in model.named_parameters():
        device = param.device  # the generator's device (scripts/check_full_size.py draws on the GPU)
        if name.endswith("norm.weight"):
            param.copy_(0.6 + 0.8 * torch.rand(param.shape, generator=generator, device=device))
        elif name.endswith(".bias"):
            param.copy_(0.5 * torch.randn(param.shape, generator=generator, device=device))
        elif "embed_tokens" in name:
            param.copy_(torch.randn(param.shape, generator=generator, device=device))
        else:  # [out, in] projections
            fan_in = param.shape[1]
            param.copy_(torch.randn(param.shape, generator=generator, device=device) * (1.6 / math.sqrt(fan_in)))


def rewrite_rope_legacy(folder):
    """Rewrites config.json's rope_parameters into the older rope_theta/rope_scaling spelling."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    params = config.pop("rope_parameters", None)
    if params is None:
        return
    params = dict(params)
    config["rope_theta"] = params.pop("rope_theta")
    if params.get("rope_type", "default") == "default":
        config["rope_scaling"] = None
    else:
        params["type"] = params.pop("rope_type")
        config["rope_scaling"] = params
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


@torch.no_grad()
def reference(folder, vocab, eos, generator):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    # Score: a sequence spanning several 16-token KV blocks and the 128-row logits chunk.
    score_ids = torch.randint(0, vocab, (1, 150), generator=generator)
    logits = model(score_ids).logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)[0, :-1].gather(-1, score_ids[0, 1:, None])[:, 0]
    probs = torch.softmax(logits[0], dim=-1)
    peak = probs.max(dim=-1).values.mean().item()
    # Greedy continuation of a short prompt and of one longer than a KV block.
    greedy = []
    for prompt_len, new_tokens in ((5, 24), (37, 16)):
        prompt = torch.randint(0, vocab, (1, prompt_len), generator=generator)
        out = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[0], output_scores=True, return_dict_in_generate=True)
        generated = out.sequences[0, prompt_len:].tolist()
        margins = []
        for step_scores in out.scores:
            top2 = torch.topk(step_scores[0].float(), 2).values
            margins.append((top2[0] - top2[1]).item())
        greedy.append({"prompt": prompt[0].tolist(), "max_new_tokens": new_tokens,
                       "generated": generated, "min_top2_margin": min(margins)})
    return {"score_ids": score_ids[0].tolist(), "logprobs": logprobs.tolist(),
            "nll_mean": float(-logprobs.mean()), "mean_top_prob": peak, "greedy": greedy,
            "transformers_version": transformers.__version__, "torch_version": torch.__version__}


def write_fixture(out_dir, name, arch, kwargs, options, seed):
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    config = make_config(arch, kwargs)
    model_cls = transformers.Qwen2ForCausalLM if arch == "qwen2" else transformers.Qwen3ForCausalLM
    model = model_cls(config).eval()
    widen_weights(model, generator)
    model = model.to(options["dtype"])
    folder = os.path.join(out_dir, name)
    shutil.rmtree(folder, ignore_errors=True)
    save_kwargs = {}
    if options.get("shard"):
        save_kwargs["max_shard_size"] = options["shard"]
    model.save_pretrained(folder, **save_kwargs)
    GenerationConfig(eos_token_id=options["eos"], bos_token_id=None, do_sample=False).save_pretrained(folder)
    if options.get("legacy_rope"):
        rewrite_rope_legacy(folder)
    ref = reference(folder, kwargs["vocab_size"], options["eos"], generator)
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f)
    margins = [g["min_top2_margin"] for g in ref["greedy"]]
    print(f"{name}: mean top prob {ref['mean_top_prob']:.3f}, nll {ref['nll_mean']:.3f}, "
          f"greedy {[g['generated'] for g in ref['greedy']]}, min top-2 margin {min(margins):.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder (one subfolder per fixture)")
    parser.add_argument("--only", nargs="*", help="fixture names to write (default: all)")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    for index, (name, (arch, kwargs, options)) in enumerate(fixture_specs().items()):
        if args.only and name not in args.only:
            continue
        write_fixture(args.out, name, arch, kwargs, options, seed=1000 + index)


if __name__ == "__main__":
    main()
