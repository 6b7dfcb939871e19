#!/usr/bin/env python3
"""Writes the tokenizer test corpus: hand-picked cases plus seeded random strings.

Each output line is {"tag": ..., "text": ...} for encode cases or {"tag": ..., "ids": [...]}
for decode-only cases (id sequences that cut characters apart, hold special tokens, ...).
The output is committed (tests/data/tokenizer/corpus.jsonl); the golden ids for it are made
by scripts/gen_tokenizer_goldens.py with Hugging Face `tokenizers`.

  python3 scripts/gen_tokenizer_corpus.py --tokenizer-json T.json --out corpus.jsonl
  python3 scripts/gen_tokenizer_corpus.py --tokenizer-json T.json --random 20000 --seed 7 \
      --no-fixed --out fuzz.jsonl      # a larger held-out style corpus, not committed
"""
import argparse
import json
import random
import unicodedata

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_pad|>", "<|fim_prefix|>",
            "<tool_call>", "</tool_call>", "<think>", "</think>", "<|file_sep|>",
            "<tool_response>"]

FIXED = {
    "chinese": ["你好，世界！今天天气怎么样？", "机器学习是人工智能的一个分支。我们使用大型语言模型。",
                "《红楼梦》是中国古典四大名著之一，成书于清代。", "北京市海淀区中关村大街1号"],
    "japanese": ["こんにちは、世界。今日はいい天気ですね。", "東京スカイツリーは高さ634メートルです。",
                 "ｶﾀｶﾅ半角とカタカナ全角", "吾輩は猫である。名前はまだ無い。"],
    "korean": ["안녕하세요, 세계! 오늘 날씨가 좋네요.", "대한민국의 수도는 서울입니다.",
               "한국어 자모: ᄒ ᅡ ᆫ", "\u1112\u1161\u11ab\u1100\u1173\u11af"],
    "arabic": ["مرحبا بالعالم! كيف حالك اليوم؟", "اللغة العربية هي لغة رسمية في ٢٢ دولة.",
               "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ"],
    "hindi": ["नमस्ते दुनिया! आप कैसे हैं?", "भारत एक विशाल देश है। इसकी जनसंख्या १४० करोड़ है।",
              "क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़", "\u0915\u093c\u0916\u093c"],
    "cyrillic": ["Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
                 "Україна, Беларусь, Қазақстан, Србија"],
    "greek": ["Γειά σου Κόσμε! Τι κάνεις;", "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
              "ΆΈΉΊΌΎΏ ΐΰ ς σ Σ"],
    "other_scripts": ["שלום עולם", "สวัสดีชาวโลก", "Xin chào thế giới! Tiếng Việt có dấu.",
                      "გამარჯობა მსოფლიო", "Բարեւ աշխարհ", "ሰላም ለዓለም", "ཀུན་ལ་བཀྲ་ཤིས་བདེ་ལེགས།",
                      "வணக்கம் உலகம்", "ನಮಸ್ಕಾರ ಪ್ರಪಂಚ", "ආයුබෝවන් ලෝකය", "မင်္ဂလာပါ ကမ္ဘာ"],
    "code": [
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
        "for (let i = 0; i < arr.length; ++i) { console.log(`item ${i}: ${arr[i]}`); }",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%smith%';",
        "fn main() -> Result<(), Box<dyn Error>> { let x: u32 = \"42\".parse()?; Ok(()) }",
        "    x = {'a': [1, 2.5, -3e10], \"b\": None}  # comment\r\n",
        "<div class=\"row\"><a href='https://example.com/?q=1&x=%20'>link</a></div>",
        "$ git commit -m 'fix: off-by-one' && make -j8 2>&1 | tee log.txt",
        "if (a != b && c <= d || !e) {{ return a->b[c]; }}",
        "@@ -1,4 +1,5 @@\n-old line\n+new line\n \n",
        "matrix = [[0]*10 for _ in range(10)]\n\n\n\nprint(matrix)",
    ],
    "whitespace": [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n",
                   "\n ", " \n ", "a  b", "a   b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\r\nb",
                   "a \r\n b", "  leading", "trailing  ", "  both  ", "x \t \n y", "\n\n\n\n\n",
                   "end\n", "\t\n\t\n", "a" + " " * 40 + "b", " " * 100, "\u00a0nbsp\u00a0",
                   "\u3000全角空格\u3000", "a\u2003em\u2009thin\u200bzw", "\u2028line sep\u2029para",
                   "\x0b\x0cvt ff", "\u0085nel", "a\u180eb", "tab\t \tspace", "\r\r\n\n\r"],
    "numbers": ["0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-273.15",
                "1,000,000", "1e-10", "0x1F", "2024-06-01", "12:30:45", "+1 (555) 012-3456",
                "v1.2.3", "١٢٣٤٥", "१२३", "①②③", "½ ¾ ⅓", "Ⅻ", "𝟙𝟚𝟛", "100%", "$9.99", "€50",
                "x2", "2x", "a1b2c3", "ＡＢＣ１２３"],
    "emoji": ["😀", "Hello 👋 world 🌍!", "👨‍👩‍👧‍👦 family", "👍🏽", "🏳️‍🌈", "🇯🇵🇺🇸", "❤️",
              "1️⃣", "🧑🏻‍💻 coding", "😀😃😄😁😆😅", "✨🎉🎊", "👩‍❤️‍💋‍👨", "🫠🫶"],
    "contractions": [],  # filled below
    "special": [],  # filled below
    "fullwidth": ["ＨＥＬＬＯ　ｗｏｒｌｄ！", "（全角括号）", "！？。，、；：", "Ｑｗｅｎ２．５",
                  "ﾊﾝｶｸ", "＜｜im_start｜＞"],
    "nfc": ["e\u0301", "cafe\u0301", "Ame\u0301lie", "A\u030a", "n\u0303", "o\u0308\u0304",
            "\u1100\u1161", "\u1100\u1161\u11a8", "\u212b", "\u2126", "\u0344", "\u0958",
            "q\u0307\u0323", "a\u0323\u0302", "\u00e9\u0301", "x\u0301\u0301\u0301",
            "\u0301leading combining", "Ω Å K", "ﬁ ﬂ ﬀ", "e<|im_end|>\u0301", "e\u0301<think>\u0301"],
    "misc": ["Hello world", "Hello, world!", "HELLO WORLD", "hello", " hello", "  hello",
             "The quick brown fox jumps over the lazy dog.", "don't stop", "¿Qué tal?",
             "Ünïcödé", "naïve café résumé", "straße", "İstanbul ı I i", "ǅ ǈ ǋ",
             "...", "!!!", "?!?!", "—–-", "«»„“”‘’", "a.b.c", "e.g., i.e.,", "@user #tag",
             "email@example.com", "https://www.example.com/path?query=1#frag", "C:\\Windows\\System32",
             "~/.bashrc", "(((nested)))", "[[]]{{}}", "a_b_c", "__init__", "snake_case_name",
             "CamelCaseName", "ALLCAPS", "\u200d", "\ufeffBOM", "\ufffd", "\U0010ffff",
             "\u0000nul", "\x01\x02\x1f ctrl", "\x7f", "ſ ſt 'ſ", "''", "'", "' s", "\"quoted\"",
             "tab\tseparated\tvalues", "Ⓐⓑⓒ", "𝕳𝖊𝖑𝖑𝖔", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇"],
}

CONTRACTION_BASES = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]


def case_variants(s):
    # Every upper/lower combination of the letters of s.
    letters = [i for i, c in enumerate(s) if c.isalpha()]
    out = []
    for mask in range(1 << len(letters)):
        chars = list(s)
        for bit, i in enumerate(letters):
            if mask >> bit & 1:
                chars[i] = chars[i].upper()
        out.append("".join(chars))
    return out


def fixed_cases():
    cases = []
    for base in CONTRACTION_BASES:
        for v in case_variants(base):
            cases.append(("contractions", "it" + v + " here"))
            cases.append(("contractions", v))
    cases += [("contractions", t) for t in [
        "I'm sure we'll see they've gone, you're right, she'd know, it's John's.",
        "I'M SURE WE'LL SEE THEY'VE GONE, YOU'RE RIGHT", "rock'n'roll", "'sup", "o'clock",
        "don’t curly’s", "x'S'T'Re", "''s", "' 's", "1's 2'S", "'s's's", "it 's", "it ' s"]]
    for s in SPECIALS:
        cases += [("special", s), ("special", " " + s), ("special", s + " "),
                  ("special", " " + s + " "), ("special", "a" + s + "b"),
                  ("special", "\n" + s + "\n"), ("special", s + s)]
    cases += [("special", t) for t in [
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<think>\nreasoning here\n</think>\n\nThe answer is 42.",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        "<|im_start", "im_start|>", "<|im_start|", "<|IM_START|>", "< |im_start| >", "<<|im_end|>>",
        "<|endoftext|><|endoftext|>text<|endoftext|>", "<thinking>", "<think >", "</think",
        "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|unknown|>", "<|>", "<||>"]]
    for tag, texts in FIXED.items():
        cases += [(tag, t) for t in texts]
    return cases


def assigned_chars(rng):
    # A pool of characters per script/category, drawn from Unicode data.
    pools = {
        "latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "latin_ext": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿāăąćčďđēėęěğīįıłńňőœřśşšťūůűųźżžſǅ",
        "digits": "0123456789",
        "punct": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "space": " \t\n\r" + " " * 6,
        "cjk": "".join(chr(c) for c in range(0x4E00, 0x4E00 + 400)),
        "kana": "".join(chr(c) for c in range(0x3041, 0x3097)) + "".join(chr(c) for c in range(0x30A1, 0x30FB)),
        "hangul": "".join(chr(c) for c in range(0xAC00, 0xAC00 + 300)),
        "arabic": "".join(chr(c) for c in range(0x0621, 0x064B)) + "٠١٢٣٤٥٦٧٨٩",
        "devanagari": "".join(chr(c) for c in range(0x0905, 0x094E)) + "०१२३",
        "cyrillic": "".join(chr(c) for c in range(0x0410, 0x0450)),
        "greek": "".join(chr(c) for c in range(0x0391, 0x03CA) if unicodedata.category(chr(c)) != "Cn"),
        "thai": "".join(chr(c) for c in range(0x0E01, 0x0E3A)),
        "hebrew": "".join(chr(c) for c in range(0x05D0, 0x05EB)),
        "combining": "".join(chr(c) for c in range(0x0300, 0x0370)),
        "emoji": "😀😃😄🤔🙏👍👋🌍🔥✨🎉❤️🇺🇸🇫🇷\u200d🏽🏻",
        "symbols": "©®™°±×÷§¶†‡•…‰′″€£¥₹∞≈≠≤≥∑∏√∫←→↑↓★☆♠♣♥♦",
        "fullwidth": "".join(chr(c) for c in range(0xFF01, 0xFF5F)) + "\u3000、。",
        "odd_space": "\u00a0\u1680\u2000\u2002\u2009\u200a\u200b\u202f\u205f\u3000\u2028\u2029\u0085\u180e\x0b\x0c",
    }
    return pools


def random_text(rng, pools, fragments):
    names = list(pools)
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.55:
            pool = pools[rng.choice(names)]
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 10))))
        elif r < 0.85 and fragments:
            parts.append("".join(rng.choice(fragments) for _ in range(rng.randint(1, 6))))
        elif r < 0.93:
            parts.append(rng.choice(SPECIALS))
        else:
            parts.append(rng.choice(["'s", "'T", "'re", "'VE", "'m", "'Ll", "'d", "\r\n", "  ", "\n\n"]))
        if rng.random() < 0.4:
            parts.append(rng.choice([" ", " ", "\n", "\t", "  ", ""]))
    text = "".join(parts)
    return text


def vocab_fragments(tokenizer_json, rng, count):
    # Decoded vocabulary entries that are whole UTF-8 strings: realistic pieces of words in
    # many languages and of code.
    with open(tokenizer_json, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    out = []
    for token in vocab:
        try:
            out.append(bytes(byte_of[c] for c in token).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            continue
    rng.shuffle(out)
    return out[:count]


def random_id_sequences(rng, n):
    seqs = []
    for _ in range(n):
        seq = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.5:
                seq.append(rng.randint(0, 151642))
            elif r < 0.75:
                seq.append(rng.randint(0, 255))  # single bytes, often half a character
            else:
                seq.append(rng.randint(151643, 151668))
        seqs.append(seq)
    return seqs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-json", help="tokenizer.json whose vocabulary supplies text fragments")
    ap.add_argument("--random", type=int, default=400, help="number of random strings")
    ap.add_argument("--decode-cases", type=int, default=60, help="number of random id sequences")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--no-fixed", action="store_true", help="leave out the hand-picked cases")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    fragments = vocab_fragments(args.tokenizer_json, rng, 5000) if args.tokenizer_json else []
    pools = assigned_chars(rng)
    rows = []
    if not args.no_fixed:
        rows += [{"tag": tag, "text": text} for tag, text in fixed_cases()]
    rows += [{"tag": "random", "text": random_text(rng, pools, fragments)} for _ in range(args.random)]
    rows += [{"tag": "decode", "ids": ids} for ids in random_id_sequences(rng, args.decode_cases)]
    if not args.no_fixed:
        # Characters cut across tokens: the bytes of "€" (e2 82 ac) and of an emoji, one id each.
        rows += [{"tag": "decode", "ids": ids} for ids in [
            [158, 224, 224], [156], [156, 224], [242, 253, 246], [151644, 158, 151645],
            [9707, 151645, 151667, 9707, 151668], [], [999999, 9707, -1]]]
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
