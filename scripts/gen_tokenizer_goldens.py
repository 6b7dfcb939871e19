#!/usr/bin/env python3
"""Golden token ids from Hugging Face `tokenizers` (the reference), and a check of qwenrt
against them.

gen: reads a corpus and writes one JSON line per case:
  encode cases {"tag", "text", "ids", "ids_no_special", "decoded", "decoded_skip"}
    ids            tokenizer.encode(text).ids  (special-token strings in the text are recognised)
    ids_no_special the same with tokenizer.encode_special_tokens = True (transformers'
                   split_special_tokens=True): tokens flagged special are encoded as plain text
    decoded        tokenizer.decode(ids), decoded_skip: tokenizer.decode(ids, skip_special_tokens=True)
  decode cases {"tag", "ids", "decoded", "decoded_skip"}
ids_no_special is left out when it equals ids, decoded_skip when it equals decoded.
The first line is {"meta": {...}} (library versions, checksum of tokenizer.json).
The corpus is a JSONL file of {"text": ...} / {"ids": [...]} rows (scripts/gen_tokenizer_corpus.py)
or, with --text-file, any UTF-8 text file: each non-empty line is a case and so is the whole file.

  python3 scripts/gen_tokenizer_goldens.py gen --tokenizer-dir DIR --corpus C.jsonl --out G.jsonl
  python3 scripts/gen_tokenizer_goldens.py gen --tokenizer-dir DIR --text-file held_out.txt --out G.jsonl

check: runs `qwenrt tokenize --jsonl` on the golden texts (both modes) and reports mismatches;
needs only the Python standard library and a built qwenrt.

  python3 scripts/gen_tokenizer_goldens.py check --goldens G.jsonl --qwenrt build/cpu/qwenrt -m DIR

The full comparison (decode too) is the C++ test: QWENRT_TOKENIZER_GOLDENS=G.jsonl
build/cpu/qwenrt_tokenizer_tests adds the file's cases to the committed ones.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile


def read_corpus(args):
    rows = []
    if args.text_file:
        with open(args.text_file, encoding="utf-8", newline="") as f:
            whole = f.read()
        for line in whole.splitlines(keepends=True):
            if line.strip():
                rows.append({"tag": "line", "text": line})
        rows.append({"tag": "file", "text": whole})
    else:
        with open(args.corpus, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if "text" not in row and "ids" not in row:
                    sys.exit("%s:%d: a row needs \"text\" or \"ids\"" % (args.corpus, n))
                rows.append(row)
    return rows


def transformers_report(tokenizer_dir, cases):
    # transformers' tokenizer must agree with the plain `tokenizers` one on these files; any
    # difference is reported, not hidden.
    report = {"checked": 0, "mismatches": []}
    try:
        import transformers
        from transformers import AutoTokenizer
        report["transformers_version"] = transformers.__version__
        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        for case in cases:
            if "text" not in case:
                continue
            report["checked"] += 1
            ids = tok(case["text"], add_special_tokens=True)["input_ids"]
            ids_ns = tok(case["text"], add_special_tokens=True, split_special_tokens=True)["input_ids"]
            dec = tok.decode(case["ids"], skip_special_tokens=False)
            dec_skip = tok.decode(case["ids"], skip_special_tokens=True)
            got = {"ids": ids, "ids_no_special": ids_ns, "decoded": dec, "decoded_skip": dec_skip}
            for key, value in got.items():
                if value != case[key] and len(report["mismatches"]) < 50:  # before compaction
                    report["mismatches"].append({"text": case["text"], "what": key,
                                                 "transformers": value, "tokenizers": case[key]})
    except Exception as e:  # report, never lose the goldens
        report["error"] = "%s: %s" % (type(e).__name__, e)
    return report


def gen(args):
    import tokenizers
    from tokenizers import Tokenizer

    path = os.path.join(args.tokenizer_dir, "tokenizer.json")
    tok = Tokenizer.from_file(path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    out = []
    for row in read_corpus(args):
        case = {"tag": row.get("tag", "")}
        if "text" in row:
            text = row["text"]
            case["text"] = text
            tok.encode_special_tokens = False
            case["ids"] = tok.encode(text).ids
            tok.encode_special_tokens = True
            case["ids_no_special"] = tok.encode(text).ids
            tok.encode_special_tokens = False
            ids = case["ids"]
        else:
            ids = row["ids"]
            case["ids"] = ids
        # Ids a tokenizer does not know are skipped by HF's decode; negative ones cannot be
        # passed to it at all, so decode cases leave them out.
        ids = [i for i in ids if i >= 0]
        case["decoded"] = tok.decode(ids, skip_special_tokens=False)
        case["decoded_skip"] = tok.decode(ids, skip_special_tokens=True)
        if "text" not in row:
            case["ids"] = ids
        out.append(case)
    meta = {"tokenizers_version": tokenizers.__version__, "tokenizer_json_sha256": digest,
            "cases": len(out)}
    if args.transformers_report:
        report = transformers_report(args.tokenizer_dir, out)
        meta["transformers_checked"] = report["checked"]
        meta["transformers_mismatches"] = len(report["mismatches"])
        with open(args.transformers_report, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
    meta["compact"] = "ids_no_special is left out when equal to ids, decoded_skip when equal to decoded"
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for case in out:
            if "text" in case and case["ids_no_special"] == case["ids"]:
                del case["ids_no_special"]
            if case["decoded_skip"] == case["decoded"]:
                del case["decoded_skip"]
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print("wrote %d cases to %s (%s)" % (len(out), args.out, json.dumps(meta)))


def check(args):
    cases = []
    with open(args.goldens, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if "text" in row:
                cases.append(row)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for case in cases:
                f.write(json.dumps({"text": case["text"]}) + "\n")
        for key, extra in (("ids", []), ("ids_no_special", ["--no-special"])):
            cmd = [args.qwenrt, "tokenize", "-m", args.model_dir, "--jsonl", inp] + extra
            res = subprocess.run(cmd, capture_output=True, check=True)
            got = [json.loads(l) for l in res.stdout.decode("utf-8").splitlines()]
            if len(got) != len(cases):
                sys.exit("%s: %d results for %d cases" % (key, len(got), len(cases)))
            for case, ids in zip(cases, got):
                want = case.get(key, case["ids"])
                if ids != want:
                    failures += 1
                    if failures <= 20:
                        print("MISMATCH %s %r\n  want %s\n  got  %s" % (key, case["text"][:200],
                                                                        want[:40], ids[:40]))
    total = 2 * len(cases)
    print("%d of %d encodings match" % (total - failures, total))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    g = sub.add_parser("gen", help="write goldens with Hugging Face tokenizers")
    g.add_argument("--tokenizer-dir", required=True, help="folder with tokenizer.json")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", help="JSONL corpus of {\"text\"} / {\"ids\"} rows")
    src.add_argument("--text-file", help="plain UTF-8 text: each non-empty line and the whole file")
    g.add_argument("--out", required=True)
    g.add_argument("--transformers-report", help="also compare transformers' AutoTokenizer; write a report here")
    c = sub.add_parser("check", help="compare qwenrt's encodings with a golden file")
    c.add_argument("--goldens", required=True)
    c.add_argument("--qwenrt", required=True, help="path of the qwenrt executable")
    c.add_argument("-m", "--model-dir", required=True, help="folder with tokenizer.json")
    args = ap.parse_args()
    if args.mode == "gen":
        gen(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
