#!/usr/bin/env python3
"""Adversarial random texts and id sequences for a held-out tokenizer check: whitespace of every
kind and in runs (\x85, U+2028, U+3000, ZWSP, BOM), numbers of many scripts, contractions in any
case, special-token strings whole and cut, letters next to combining marks, NFD forms, astral
and private-use characters, noncharacters, long runs; and id sequences over the byte tokens,
the vocabulary and the added tokens. The texts are not committed: their ids come from the
reference (HF `tokenizers` through gen_tokenizer_goldens.py; tiktoken through
qwen1_tiktoken_goldens.cjs or gen_qwen1_tokenizer_goldens.py), then qwenrt is compared.

  python3 scripts/gen_tokenizer_stress.py [COUNT [SEED [FIRST_ADDED_ID]]] > stress.jsonl
"""
import json, random, sys, unicodedata

rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 99)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
WS = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\u00a0", "\u2028", "\u2029", "\u3000", "\u200b",
      "\x0b", "\x0c", "\x85", "\u1680", "\u2000", "\u202f", "\u205f", "\ufeff", " \n ", "\t\n"]
SPEC = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>",
        "<|vision_start|>", "<|fim_middle|>", "<|im_", "|>", "<|", "<tool_", "<|extra_0|>", "<|extra_204|>",
        "<|endoftext|", "<<|im_end|>>", "<|im_start|><|im_start|>"]
CONTR = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "\u2019s", "''s", "'", "'x"]
RANGES = [(0x41, 0x5a), (0x61, 0x7a), (0xc0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x530, 0x58f),
          (0x590, 0x5ff), (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x10a0, 0x10ff), (0x1100, 0x11ff),
          (0x3040, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0x300, 0x36f), (0x2000, 0x206f),
          (0x2100, 0x218f), (0x2460, 0x24ff), (0xff00, 0xffef), (0x1d400, 0x1d7ff), (0x1f300, 0x1f6ff),
          (0x1f900, 0x1f9ff), (0x20000, 0x2a6df), (0xf900, 0xfaff), (0xe000, 0xe0ff), (0x0, 0x1f), (0x7f, 0x9f),
          (0x21, 0x2f), (0x3a, 0x40), (0x5b, 0x60), (0x7b, 0x7e), (0x660, 0x669), (0xb2, 0xbe), (0x1f1e6, 0x1f1ff),
          (0xfe00, 0xfe0f), (0x10000, 0x1007f), (0xfff0, 0xffff), (0x1f3fb, 0x1f3ff)]
NUM = ["0", "123", "3.14", "1,000,000", "²³", "½", "Ⅻ", "①②", "٣٤٥", "１２３", "๓", "0x1F", "1e-9", "-42"]
WORDS = ["hello", "Hello", "HELLO", "world", "the", "The", " the", "don", "naïve", "Straße", "ﬁne", "İstanbul",
         "e\u0301", "cafe\u0301", "\u1100\u1161\u11a8", "Å", "\u212b", "\uf900", "ﾊﾟ", "👨‍👩‍👧‍👦", "👍🏽", "🇯🇵",
         "❤️", "中文", "日本語", "한국어", "العربية", "हिन्दी", "ไทย", "Ελληνικά", "Русский", "def", "return",
         "    ", "\t\t", "```", "==", "!=", "->", "...", "—", "…", "«»", "“quoted”", "\\n", "http://x.y/z?q=1",
         "a" * 50, "ab" * 40, "\ufffd", "\u0000", "\x7f", "\U0010fffd", "\ufffe"]

def rand_char():
    lo, hi = rng.choice(RANGES)
    while True:
        c = rng.randint(lo, hi)
        if not (0xd800 <= c <= 0xdfff):
            return chr(c)

def piece():
    r = rng.random()
    if r < 0.25: return rng.choice(WORDS)
    if r < 0.40: return rng.choice(WS) * rng.choice([1, 1, 1, 2, 3, 7])
    if r < 0.50: return rng.choice(NUM)
    if r < 0.58: return rng.choice(CONTR)
    if r < 0.64: return rng.choice(SPEC)
    if r < 0.95: return "".join(rand_char() for _ in range(rng.randint(1, 6)))
    return rng.choice(["x", " ", "1", "!", "\n", "中"]) * rng.randint(20, 400)

rows = []
for i in range(N):
    k = rng.choice([1, 2, 3, 5, 8, 13, 30])
    rows.append({"tag": "adv", "text": "".join(piece() for _ in range(k))})
# NFD-decomposed versions of some texts, and texts ending in a combining mark after a special.
for i in range(N // 20):
    t = rows[rng.randrange(N)]["text"]
    rows.append({"tag": "adv-nfd", "text": unicodedata.normalize("NFD", t)})
    rows.append({"tag": "adv-mark", "text": rng.choice(SPEC) + "\u0301" + t + rng.choice(SPEC) + "\u0308"})
VOCAB = int(sys.argv[3]) if len(sys.argv) > 3 else 151643
for i in range(N // 10):
    ids = []
    for _ in range(rng.randint(1, 40)):
        r = rng.random()
        if r < 0.5: ids.append(rng.randrange(VOCAB))
        elif r < 0.75: ids.append(rng.randrange(256))  # the byte tokens region (ranks of single bytes lie low)
        elif r < 0.9: ids.append(VOCAB + rng.randrange(22))
        else: ids.append(rng.randrange(100, 1000))
    rows.append({"tag": "adv-decode", "ids": ids})
for r in rows:
    print(json.dumps(r, ensure_ascii=False))
