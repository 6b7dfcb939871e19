#!/usr/bin/env python3
"""Writes tests/data/serve/: a byte-level BPE tokenizer (the 256 byte tokens, no merges, and
ChatML's added tokens) whose 263 ids fit the 300-token vocabulary of the tiny fixture models,
with a ChatML chat template, so `qwenrt serve` can be tested end to end on them."""
import json
import pathlib

from gen_tokenizer_variants import byte_alphabet  # GPT-2's byte alphabet


ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<think>", False),
         ("</think>", False), ("<tool_call>", False), ("</tool_call>", False)]

TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' or not loop.first %}"
    "<|im_start|>{{ message.role }}\n{{ message.content or '' }}<|im_end|>\n{% endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}"
)


def main():
    out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "serve"
    out.mkdir(parents=True, exist_ok=True)
    byte_chars = byte_alphabet()
    vocab = {byte_chars[b]: b for b in range(256)}
    added = [{"id": 256 + i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": special} for i, (text, special) in enumerate(ADDED)]
    regex = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n")
    config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": TEMPLATE,
              "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}}
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
