#!/usr/bin/env python3
"""Golden token ids for the original Qwen's tokenizer (qwen.tiktoken), from `tiktoken`.

The reference is tiktoken built from qwen.tiktoken, Qwen's split pattern and its specials,
called as Qwen's tokenization_qwen.py calls it:
    enc.encode(unicodedata.normalize("NFC", text), allowed_special="all", disallowed_special=())
and, for ids_no_special (special-token strings as plain text, for untrusted chat content):
    enc.encode(unicodedata.normalize("NFC", text), allowed_special=set(), disallowed_special=())

corpus: writes the texts of this script's own generator (fixed edge cases: empty text, long
digit runs, CJK, emoji, \\r\\n runs, special-token strings in text, combining marks next to
specials; then seeded random mixtures of those classes) as JSONL {"tag", "text"}.

    python3 scripts/gen_qwen1_tokenizer_goldens.py corpus --out tests/data/qwen1/tokenizer/corpus.jsonl

gen: encodes a corpus with Python's tiktoken and writes {"tag", "text", "ids",
"ids_no_special"} lines after a {"meta": ...} line naming the encoder. Where Python's tiktoken
is not installed, scripts/qwen1_tiktoken_goldens.cjs does the same with the npm `tiktoken`
package (a WebAssembly build of the same Rust core); both write the same format.

    python3 scripts/gen_qwen1_tokenizer_goldens.py gen --tiktoken tests/data/qwen1/tokenizer/qwen.tiktoken \\
        --corpus tests/data/qwen1/tokenizer/corpus.jsonl --out goldens.jsonl

compare: the ids of two golden files (e.g. Python's tiktoken against the committed npm ones)
case by case; exits 1 on any difference.

    python3 scripts/gen_qwen1_tokenizer_goldens.py compare goldens.jsonl tests/data/qwen1/tokenizer/goldens.jsonl
"""
import argparse
import base64
import hashlib
import json
import random
import sys
import unicodedata

PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
           r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + ["<|extra_%d|>" % i for i in range(205)]

FIXED = [
    ("empty", ""),
    ("digits", "1234567890" * 30),
    ("digits", "3.14159265358979323846264338327950288419716939937510 and 2^64 = 18446744073709551616"),
    ("digits", "٠١٢٣٤٥٦٧٨٩ ०१२३ 12,345.67 1e-9 0x1F"),
    ("cjk", "你好，世界！今天天气很好。我们一起去公园散步吧。"),
    ("cjk", "日本語のテキストと한국어 텍스트、そして繁體中文。"),
    ("emoji", "👋🌍 Hello 👨‍👩‍👧‍👦 family 🇩🇪🇯🇵 flags ❤️‍🔥 ok 🏳️‍🌈"),
    ("crlf", "line one\r\nline two\r\n\r\n\r\nline five\r\n"),
    ("crlf", "\r\n\r\n\r\n  \r\n\t\r\n \n\n\n   \r\r\r"),
    ("spaces", "a  b   c    d\t\te     \u00a0\u3000 end   "),
    ("special", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"),
    ("special", "text<|endoftext|>more<|extra_0|><|extra_204|><|extra_205|>"),
    ("special", "<|im_end|\u0338> and <|endoftext|>\u0338 and <|im_start|>\u0301x"),
    ("special", "<|im_start|<|im_end|>|>><|<|endoftext|>"),
    ("nfc", "e\u0301 a\u030a o\u0308 \u212b \u2126 \u1e9b\u0323 \uac00\u11a8 \u1100\u1161"),
    ("contractions", "I'm, you're, he'll, she'd, it's, we've, THEY'RE, Don'T"),
    ("code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"),
    ("punct", "!!!??? ... --- *** ((())) [[[]]] {{{}}} \"'`~ @#$%^&*"),
    ("mixed", "Qwen-7B（通义千问）is a 7B model; 训练于2.4万亿tokens。🚀"),
]

CLASSES = {
    "letters": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "digits": "0123456789",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
    "kana": "あいうえおかきくけこアイウエオカキクケコ",
    "hangul": "가나다라마바사아자차카타파하",
    "emoji": ["😀", "🎉", "👍🏽", "🇫🇷", "❤️", "👩‍💻", "🧠"],
    "space": [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000"],
    "punct": ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "combining": ["\u0301", "\u0308", "\u0323", "\u030a", "\u0338"],
    "special": SPECIALS[:5] + ["<|extra_99|>", "<|im_", "|>", "<|"],
    "accented": "àáâãäåçèéêëìíîïñòóôõöùúûüýÿ",
    "arabic": "مرحبا بالعالم",
    "cyrillic": "Привет мир",
}


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 40)):
        name = rng.choice(sorted(CLASSES))
        pool = CLASSES[name]
        run = rng.randint(1, 12) if name in ("letters", "digits", "cjk", "kana", "hangul", "accented") else 1
        parts.append("".join(rng.choice(pool) for _ in range(run)))
    return "".join(parts)


def corpus(args):
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="utf-8") as out:
        for tag, text in FIXED:
            out.write(json.dumps({"tag": tag, "text": text}, ensure_ascii=False) + "\n")
        for _ in range(args.random):
            out.write(json.dumps({"tag": "random", "text": random_text(rng)}, ensure_ascii=False) + "\n")


def gen(args):
    try:
        import tiktoken
    except ImportError:
        sys.exit("Python tiktoken is not installed; use scripts/qwen1_tiktoken_goldens.cjs (npm tiktoken)")
    with open(args.tiktoken, "rb") as f:
        raw = f.read()
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}
    enc = tiktoken.Encoding("Qwen", pat_str=PATTERN, mergeable_ranks=ranks,
                            special_tokens={s: len(ranks) + i for i, s in enumerate(SPECIALS)})
    with open(args.corpus, encoding="utf-8") as f, open(args.out, "w", encoding="utf-8") as out:
        meta = {"encoder": "python tiktoken " + tiktoken.__version__,
                "qwen_tiktoken_sha256": hashlib.sha256(raw).hexdigest(),
                "unicodedata": unicodedata.unidata_version}
        out.write(json.dumps({"meta": meta}) + "\n")
        for line in f:
            row = json.loads(line)
            text = unicodedata.normalize("NFC", row["text"])
            row["ids"] = enc.encode(text, allowed_special="all", disallowed_special=())
            row["ids_no_special"] = enc.encode(text, allowed_special=set(), disallowed_special=())
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def compare(args):
    def rows(path):
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip() and "meta" not in json.loads(line)]
    a, b = rows(args.a), rows(args.b)
    if len(a) != len(b):
        sys.exit("%d cases in %s, %d in %s" % (len(a), args.a, len(b), args.b))
    bad = 0
    for n, (x, y) in enumerate(zip(a, b), 2):
        for key in ("text", "ids", "ids_no_special"):
            if x[key] != y[key]:
                bad += 1
                print("case on line %d differs in %s: %s" % (n, key, json.dumps(x["text"], ensure_ascii=False)))
    print("%d cases, %d differences" % (len(a), bad))
    sys.exit(1 if bad else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--out", required=True)
    c.add_argument("--seed", type=int, default=12)
    c.add_argument("--random", type=int, default=300)
    g = sub.add_parser("gen")
    g.add_argument("--tiktoken", required=True)
    g.add_argument("--corpus", required=True)
    g.add_argument("--out", required=True)
    k = sub.add_parser("compare")
    k.add_argument("a")
    k.add_argument("b")
    args = parser.parse_args()
    {"corpus": corpus, "gen": gen, "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
