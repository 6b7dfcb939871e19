#!/usr/bin/env python3
"""Writes small tokenizer.json variants that exercise what Qwen's file does not: added-token
flags (lstrip, rstrip, single_word, normalized), overlapping added tokens, the GPT-2 regex of
ByteLevel(use_regex=true), merges written as "a b" strings, ignore_merges, a String split
pattern. Each variant has the 256 byte tokens (byte b has id b) and a few merges.

  python3 scripts/gen_tokenizer_variants.py --out tests/data/tokenizer/variants

Golden ids for them come from Hugging Face `tokenizers`:
  python3 scripts/gen_tokenizer_goldens.py gen --tokenizer-dir tests/data/tokenizer/variants/NAME \\
      --corpus tests/data/tokenizer/variants/texts.jsonl --out tests/data/tokenizer/variants/NAME/goldens.jsonl
"""
import argparse
import json
import os

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    "hello", "hello hello", "help", "Hi <ls> there", "Hi <rs> there", "Hi <lrs> there", "Hi\t\u3000<lrs>\u2003x",
    "<ls><ls>", "  <lrs>  <lrs>  ", "a<mask>b", "a <mask> b", "<mask><mask>", "<m", "<ma", "<mas",
    "a<sw>b", "a <sw> b", "<sw>", "x<sw>", "<sw>x", "_<sw>", "\u00e9<sw>", "1<sw>", "-<sw>-", "a\u0301<sw>",
    "cafe\u0301", "caf\u00e9", "CAFE\u0301", "e\u0301", "two words", "a two words b", "two  words",
    "abcd", "xab", "ab", "abab", "abc", "xyz", "hello xyz", "xyzxyz", "hello-world-hello", "--",
    "it's He'll", " ?!", "\n\n hello\r\n", "Hello WORLD 123", "\u4f60\u597d\u4e16\u754c", "\U0001F600 x",
    "<|end|> done", "<|end|><|end|>", "x<|end|>y", "hello<think>hello</think>", "",
]
DECODE_IDS = [[300, 104, 305], [305], [306, 32, 104], [256, 257, 258, 259], [0xE2, 0x82], [265, 266],
              [302, 303, 304], [311, 310], [307, 305, 312]]


def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def added(id_, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def base():
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    extra = ["he", "ll", "hell", "hello", "\u0120h", "el", "lo", "ello", "\u0120hello", "xyz", "wor"]
    vocab.update({token: 256 + i for i, token in enumerate(extra)})
    merges = [["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], ["\u0120", "h"], ["e", "l"],
              ["l", "o"], ["el", "lo"], ["\u0120h", "ello"]]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            added(300, "<mask>", True), added(301, "<ls>", True, lstrip=True),
            added(302, "<rs>", True, rstrip=True), added(303, "<lrs>", True, lstrip=True, rstrip=True),
            added(304, "<sw>", False, single_word=True), added(305, "\u00e9", False, normalized=True),
            added(306, "two words", False), added(307, "e\u0301", False), added(308, "<m", False),
            added(309, "ab", True), added(310, "abc", False), added(311, "<|end|>", True),
            added(312, "<think>", False), added(313, "</think>", False)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def variants():
    out = {}
    out["flags"] = base()
    gpt2 = base()
    gpt2["normalizer"] = None
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    gpt2["model"]["merges"] = [" ".join(pair) for pair in gpt2["model"]["merges"]]
    out["gpt2_regex_string_merges"] = gpt2
    ignore = base()
    ignore["model"]["ignore_merges"] = True
    out["ignore_merges"] = ignore
    literal = base()
    literal["pre_tokenizer"]["pretokenizers"].insert(
        0, {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated", "invert": False})
    out["string_split"] = literal
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "texts.jsonl"), "w", encoding="utf-8") as f:
        for text in TEXTS:
            f.write(json.dumps({"tag": "variant", "text": text}, ensure_ascii=False) + "\n")
        for ids in DECODE_IDS:
            f.write(json.dumps({"tag": "decode", "ids": ids}) + "\n")
    for name, tokenizer in variants().items():
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        with open(os.path.join(args.out, name, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
