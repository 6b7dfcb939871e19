#!/usr/bin/env python3
"""Writes a random-weight checkpoint with the exact shapes of a real Qwen model (config.json
plus sharded *.safetensors, no tokenizer), for benchmarking where the real weights are not
available. Speed depends only on shapes, so tokens/s measured on it hold for the real
model; its outputs are meaningless.

    python3 scripts/make_synthetic_checkpoint.py --preset qwen2.5-7b --out /tmp/q7b

Needs torch and safetensors. Weights are drawn on the GPU when one is present.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

PRESETS = {
    # name: (architecture, hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, tied)
    "qwen2.5-0.5b": ("Qwen2ForCausalLM", 896, 4864, 24, 14, 2, 64, 151936, True),
    "qwen2.5-1.5b": ("Qwen2ForCausalLM", 1536, 8960, 28, 12, 2, 128, 151936, True),
    "qwen2.5-7b": ("Qwen2ForCausalLM", 3584, 18944, 28, 28, 4, 128, 152064, False),
    "qwen2.5-14b": ("Qwen2ForCausalLM", 5120, 13824, 48, 40, 8, 128, 152064, False),
    "qwen3-8b": ("Qwen3ForCausalLM", 4096, 12288, 36, 32, 8, 128, 151936, False),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    arch, hidden, inter, layers, heads, kv_heads, head_dim, vocab, tied = PRESETS[args.preset]
    qwen3 = arch.startswith("Qwen3")
    dtype = getattr(torch, args.dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    config = {
        "architectures": [arch], "model_type": "qwen3" if qwen3 else "qwen2",
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
        "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": args.dtype,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers,
        "bos_token_id": 151643, "eos_token_id": 151643,
    }
    if qwen3:
        config["head_dim"] = head_dim
        config["attention_bias"] = False
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    def rand(*shape, scale):
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype).cpu()

    # Scales keep activations in a sane range through all layers (residual growth is mild).
    shards, index = [], {}
    def flush(tensors, number):
        name = f"model-{number:05d}.safetensors"
        save_file(tensors, os.path.join(args.out, name), metadata={"format": "pt"})
        for key in tensors:
            index[key] = name

    tensors = {"model.embed_tokens.weight": rand(vocab, hidden, scale=0.02),
               "model.norm.weight": torch.ones(hidden, dtype=dtype)}
    if not tied:
        tensors["lm_head.weight"] = rand(vocab, hidden, scale=0.02)
    flush(tensors, 1)
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    for layer in range(layers):
        p = f"model.layers.{layer}."
        t = {
            p + "input_layernorm.weight": torch.ones(hidden, dtype=dtype),
            p + "post_attention_layernorm.weight": torch.ones(hidden, dtype=dtype),
            p + "self_attn.q_proj.weight": rand(q_dim, hidden, scale=0.02),
            p + "self_attn.k_proj.weight": rand(kv_dim, hidden, scale=0.02),
            p + "self_attn.v_proj.weight": rand(kv_dim, hidden, scale=0.02),
            p + "self_attn.o_proj.weight": rand(hidden, q_dim, scale=0.02),
            p + "mlp.gate_proj.weight": rand(inter, hidden, scale=0.02),
            p + "mlp.up_proj.weight": rand(inter, hidden, scale=0.02),
            p + "mlp.down_proj.weight": rand(hidden, inter, scale=0.02),
        }
        if qwen3:
            t[p + "self_attn.q_norm.weight"] = torch.ones(head_dim, dtype=dtype)
            t[p + "self_attn.k_norm.weight"] = torch.ones(head_dim, dtype=dtype)
        else:
            t[p + "self_attn.q_proj.bias"] = rand(q_dim, scale=0.02)
            t[p + "self_attn.k_proj.bias"] = rand(kv_dim, scale=0.02)
            t[p + "self_attn.v_proj.bias"] = rand(kv_dim, scale=0.02)
        flush(t, layer + 2)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in set(index.values()))
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": index}, f)
    print(f"wrote {args.preset} ({total / 1e9:.2f} GB) to {args.out}")


if __name__ == "__main__":
    main()
