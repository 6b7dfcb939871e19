#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target from the fixtures in tests/data.

Usage: make_seeds.py OUT_DIR [TOKENIZER_DIR]
OUT_DIR/<target>/ gets one file per seed. Parts of multi-file inputs are joined with the
separator line of tests/fuzz/fuzz_util.h. TOKENIZER_DIR (Qwen's tokenizer, fetched by
scripts/fetch-qwen-tokenizer.sh) adds its tokenizer_config.json to the tokenizer seeds.
"""
import hashlib
import json
import pathlib
import struct
import sys

SEP = b"\n@@@@\n"
ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def write(out: pathlib.Path, target: str, data: bytes) -> None:
    folder = out / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def small_safetensors(path: pathlib.Path, keep: int) -> bytes:
    """The file's header with `keep` tensors shrunk to at most 8 elements, and their data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    sizes = {"F32": 4, "F16": 2, "BF16": 2}
    out, data = {}, b""
    for name, entry in header.items():
        if name == "__metadata__":
            out[name] = entry
            continue
        if len(out) > keep or entry["dtype"] not in sizes:
            continue
        shape = [min(d, 2) for d in entry["shape"]][:3]
        count = 1
        for d in shape:
            count *= d
        begin = entry["data_offsets"][0] + 8 + length
        chunk = raw[begin : begin + count * sizes[entry["dtype"]]]
        out[name] = {"dtype": entry["dtype"], "shape": shape,
                     "data_offsets": [len(data), len(data) + len(chunk)]}
        data += chunk
    text = json.dumps(out, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    tokenizer_dir = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else None

    for path in sorted(DATA.glob("models/*/*.safetensors")):
        for keep in (1, 4):
            write(out, "fuzz_safetensors", small_safetensors(path, keep))

    for folder in sorted(DATA.glob("models/*")):
        config = (folder / "config.json").read_bytes()
        write(out, "fuzz_config", config)
        generation = folder / "generation_config.json"
        if generation.exists():
            write(out, "fuzz_config", config + SEP + generation.read_bytes())

    def texts_of(path: pathlib.Path) -> list:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        return [row["text"] for row in rows if "text" in row]  # other rows are decode cases

    texts = texts_of(DATA / "tokenizer/variants/texts.jsonl")
    corpus = texts_of(DATA / "tokenizer/corpus.jsonl")
    configs = [b"", b'{"eos_token": "<|endoftext|>", "model_max_length": 32768}']
    if tokenizer_dir is not None and (tokenizer_dir / "tokenizer_config.json").exists():
        configs.append((tokenizer_dir / "tokenizer_config.json").read_bytes())
    for i, path in enumerate(sorted(DATA.glob("tokenizer/variants/*/tokenizer.json"))):
        for j, config in enumerate(configs):
            text = texts[(i * 7 + j) % len(texts)].encode()
            write(out, "fuzz_tokenizer", path.read_bytes() + SEP + config + SEP + text)

    for text in corpus[::3] + texts:
        write(out, "fuzz_roundtrip", text.encode())

    # The original Qwen's vocabulary: its first ranks (every single byte, then merges) keep a
    # seed small; texts from the tiktoken goldens' corpus.
    tiktoken_lines = (DATA / "qwen1/tokenizer/qwen.tiktoken").read_bytes().split(b"\n")
    v1_texts = texts_of(DATA / "qwen1/tokenizer/corpus.jsonl")
    for i, keep in enumerate((256, 1000, 4000)):
        vocabulary = b"\n".join(tiktoken_lines[:keep]) + b"\n"
        for text in v1_texts[i::40]:
            write(out, "fuzz_tiktoken", vocabulary + SEP + text.encode())

    # Request bodies for the server: chat and completion requests with most fields.
    requests = [
        {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
         "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.7, "top_p": 0.8,
         "top_k": 20, "seed": 3, "stop": ["\n\n"], "n": 2, "logprobs": True, "top_logprobs": 2},
        {"messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function":
         {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
         "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": False}},
        {"prompt": "Once upon a time", "max_tokens": 16, "presence_penalty": 0.5, "frequency_penalty": 0.2,
         "repetition_penalty": 1.1, "min_p": 0.05, "ignore_eos": True, "min_tokens": 4},
        {"prompt": [1, 2, 3, 4], "max_completion_tokens": 4, "logprobs": 3},
        {"prompt": "Once", "echo": True, "max_tokens": 0, "logprobs": 2, "suffix": "end"},
        {"prompt": ["Once", [1, 2], "upon"], "n": 2, "echo": True, "suffix": "x", "max_tokens": 3},
        {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": False,
         "reasoning_effort": "none", "tokens": [1, 2, 300]},
    ]
    for request in requests:
        write(out, "fuzz_request", json.dumps(request).encode())

    # Schemas with documents that fit them (the masks are checked at every prefix).
    structured = [
        ({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"}},
          "required": ["name"]}, r'{"name": "ab\u00e9", "age": 12}'),
        ({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "array", "items": {"type": "string"}},
                    {"type": "object", "additionalProperties": {"type": "number"}}]}, '{"k\u00e9": -0.5e3}'),
        ({"type": "array", "items": {"enum": ["red", "green", 3, None]}, "minItems": 1, "maxItems": 3},
         '["red", 3, null]'),
        ({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "boolean"},
                                                             "next": {"$ref": "#/$defs/node"}}}},
          "$ref": "#/$defs/node"}, '{"v": true, "next": {"next": {}}}'),
        ({"type": ["string", "null"], "minLength": 1}, r'"\ud83d\ude00 \u20ac caf' + '\u00e9"'),
        ({"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": -3, "exclusiveMaximum": 100},
                                               {"type": "number", "minimum": 0.25, "maximum": 0.5}]}},
         '[99, -3, 0.3125, 0.5, 7]'),
        ({"type": "object", "properties": {"phone": {"type": "string", "pattern": r"^(\([0-9]{3}\))?[0-9]{3}-[0-9]{4}$"},
                                           "tag": {"pattern": r"[a-z\u00e9]+\n?|\u0001", "maxLength": 6}},
          "required": ["phone", "tag"]}, r'{"phone": "(888)555-1212", "tag": "x\u0001\n' + '\u00e9"}'),
        ({"type": "array", "items": {"type": "integer", "multipleOf": 7}}, '[0, -14, 700, 7]'),
    ]
    for schema, document in structured:
        write(out, "fuzz_structured", json.dumps(schema).encode() + SEP + document.encode())

    conversations = json.loads((DATA / "chat_template/conversations.json").read_text())
    for path in sorted(DATA.glob("templates/*.jinja")):
        for conversation in conversations[:12]:
            body = {"messages": conversation["messages"], "tools": conversation.get("tools"),
                    "vars": conversation.get("vars") or {}}
            write(out, "fuzz_chat_template", path.read_bytes() + SEP + json.dumps(body).encode())
    for snippet in json.loads((DATA / "chat_template/snippets.json").read_text()):
        body = {"messages": [{"role": "user", "content": "hi"}], "vars": snippet.get("vars") or {}}
        write(out, "fuzz_chat_template", snippet["template"].encode() + SEP + json.dumps(body).encode())


if __name__ == "__main__":
    main()
