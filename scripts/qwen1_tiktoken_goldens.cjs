// Golden token ids for the original Qwen's tokenizer from the npm `tiktoken` package (the
// WebAssembly build of the Rust core that Python's tiktoken uses), for machines without
// Python's tiktoken. Same recipe and output as `gen_qwen1_tokenizer_goldens.py gen`:
// NFC over the whole text, then encode with all specials allowed (ids) and none (ids_no_special).
//
//   npm install tiktoken@1.0.22   (in any folder; set NODE_PATH to its node_modules)
//   node scripts/qwen1_tiktoken_goldens.cjs qwen.tiktoken corpus.jsonl goldens.jsonl
"use strict";
const fs = require("fs");
const crypto = require("crypto");
const { Tiktoken } = require("tiktoken");

const PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" +
  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const [rankFile, corpusFile, outFile] = process.argv.slice(2);
if (!outFile) {
  console.error("usage: node qwen1_tiktoken_goldens.cjs qwen.tiktoken corpus.jsonl goldens.jsonl");
  process.exit(2);
}
const raw = fs.readFileSync(rankFile);
const ranks = raw.toString("utf8");
const nRanks = ranks.split("\n").filter((line) => line.length > 0).length;
const specials = { "<|endoftext|>": nRanks, "<|im_start|>": nRanks + 1, "<|im_end|>": nRanks + 2 };
for (let i = 0; i < 205; i++) specials[`<|extra_${i}|>`] = nRanks + 3 + i;
const enc = new Tiktoken(ranks, specials, PATTERN);
// The package's exports hide package.json; find it beside the resolved entry point.
const path = require("path");
const version = JSON.parse(
  fs.readFileSync(path.join(path.dirname(require.resolve("tiktoken")), "package.json"), "utf8")).version;

const out = [JSON.stringify({
  meta: {
    encoder: `npm tiktoken ${version} (node ${process.version}, String.prototype.normalize for NFC)`,
    qwen_tiktoken_sha256: crypto.createHash("sha256").update(raw).digest("hex"),
  },
})];
for (const line of fs.readFileSync(corpusFile, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const row = JSON.parse(line);
  const text = row.text.normalize("NFC");
  row.ids = Array.from(enc.encode(text, "all", []));
  row.ids_no_special = Array.from(enc.encode(text, [], []));
  out.push(JSON.stringify(row));
}
fs.writeFileSync(outFile, out.join("\n") + "\n");
enc.free();
