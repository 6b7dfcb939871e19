#!/usr/bin/env python3
"""Chat-template goldens from Hugging Face transformers (the reference qwenrt must match).

Every string is rendered by `tokenizer.apply_chat_template(..., tokenize=False)` with the
template loaded from the committed file, so the goldens carry transformers' exact jinja2
environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, its own tojson,
raise_exception, strftime_now, loop controls, the generation tag) and its variables
(messages, tools, documents=None, add_generation_prompt, special tokens, extra kwargs).

Modes:
  goldens   (default) render tests/data/chat_template/conversations.json against both Qwen
            templates and snippets.json (small templates probing jinja2 semantics) into one
            JSON file:  gen_template_goldens.py --out goldens.json
  random    seeded random conversations (a check on inputs no test was written for):
            gen_template_goldens.py --random 60 --seed 1 --out random.json
  held-out  render arbitrary conversation files with one template, for later comparison
            with `qwenrt template`:
            gen_template_goldens.py --template T.jinja --held-out a.json b.json --out out.json
            A conversation file is a JSON list of messages or an object
            {"messages": [...], "tools": [...], "add_generation_prompt": bool, "vars": {...}}.

Needs: transformers (and its tokenizers dependency). No network access, no model download.
"""
import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "tests", "data")

# What transformers passes for Qwen's tokenizer_config.json (bos_token is null there, so it
# is not defined in the template at all).
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"


def make_tokenizer():
    """A tokenizer object whose only role is to run apply_chat_template.

    Rendering with tokenize=False never touches the vocabulary, so a one-word vocabulary
    keeps the script free of model downloads while using transformers' own code path.
    """
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    try:
        backend = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
        return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    except Exception as e:  # a transformers without this constructor: use its renderer directly
        print(f"note: no tokenizer object ({type(e).__name__}: {e}); using render_jinja_template", file=sys.stderr)
        return None


def render(tokenizer, template, messages, tools, add_generation_prompt, variables):
    """Returns {"expected": text} or {"error": "ExceptionType: message"}."""
    try:
        if tokenizer is None:
            # transformers' own renderer, called with what apply_chat_template would pass.
            from transformers.utils.chat_template_utils import render_jinja_template

            rendered, _ = render_jinja_template(
                conversations=[messages], tools=tools, documents=None, chat_template=template,
                add_generation_prompt=add_generation_prompt, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, **variables)
            return {"expected": rendered[0]}
        tokenizer.chat_template = template
        text = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **variables,
        )
        return {"expected": text}
    except Exception as e:  # the template's own errors are goldens too
        return {"error": f"{type(e).__name__}: {e}"}


def load_templates(template_dir):
    templates = {}
    for name in ("qwen3", "qwen2.5-instruct"):
        with open(os.path.join(template_dir, name + ".jinja"), encoding="utf-8", newline="") as f:
            templates[name] = f.read()
    return templates


def meta(tokenizer):
    import jinja2
    import transformers

    return {
        "renderer": "render_jinja_template" if tokenizer is None else "apply_chat_template",
        "generator": "scripts/gen_template_goldens.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "python": sys.version.split()[0],
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
    }


def goldens(args):
    data = args.data
    templates = load_templates(os.path.join(data, "templates"))
    with open(os.path.join(data, "chat_template", "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    with open(os.path.join(data, "chat_template", "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    tokenizer = make_tokenizer()
    out = {"meta": meta(tokenizer), "conversations": [], "snippets": []}
    for case in conversations:
        for template_name in case["templates"]:
            result = render(tokenizer, templates[template_name], case["messages"], case["tools"],
                            case["add_generation_prompt"], case["vars"])
            out["conversations"].append({"name": case["name"], "template": template_name, **result})
    # Snippets run through the same path; the dummy conversation is never referenced by them.
    dummy = [{"role": "user", "content": "unused"}]
    for snippet in snippets:
        result = render(tokenizer, snippet["template"], dummy, None, False, snippet["vars"])
        out["snippets"].append({"name": snippet["name"], **result})
    return out


# ---- random conversations ----

CONTENTS = [
    "Hello!", "", " ", "\n", "Plain text.", "  padded  ", "line one\nline two", "Ünïcødé 你好 🙂",
    "quotes ' and \" and \\ backslash", "<think>\nhidden\n</think>\n\nvisible", "<think>x</think>y",
    "no think close </think> here", "<tool_response>\nr\n</tool_response>", "<|im_start|>user\nfake",
    "{\"json\": [1, 2]}", "tab\there", "trailing newline\n", "\n\nleading newlines", "multi </think> a </think> b",
]
REASONING = [None, "", "Let me think.", "\nstep 1\nstep 2\n", "思考"]
ARG_VALUES = ["text", 1, -2, 0.5, 1e21, 3.0, True, False, None, [1, "a"], {"k": {"n": [None]}}, "é\"\n"]


def random_tool(rng, i):
    props = {f"p{j}": {"type": rng.choice(["string", "number", "boolean"]), "description": rng.choice(CONTENTS)}
             for j in range(rng.randint(0, 3))}
    fn = {"name": f"tool_{i}", "description": rng.choice(CONTENTS),
          "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]}}
    return {"type": "function", "function": fn}


def random_tool_call(rng, tools):
    name = rng.choice(tools)["function"]["name"] if tools else "tool_x"
    args = {f"a{j}": rng.choice(ARG_VALUES) for j in range(rng.randint(0, 3))}
    if rng.random() < 0.4:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    call = {"name": name, "arguments": args}
    return call if rng.random() < 0.2 else {"id": f"c{rng.randint(0, 99)}", "type": "function", "function": call}


def random_conversation(rng):
    tools = [random_tool(rng, i) for i in range(rng.randint(1, 3))] if rng.random() < 0.4 else None
    messages = []
    if rng.random() < 0.6:
        messages.append({"role": "system", "content": rng.choice(CONTENTS)})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": rng.choice(CONTENTS)})
        if rng.random() < 0.2:
            break
        assistant = {"role": "assistant", "content": rng.choice(CONTENTS)}
        reasoning = rng.choice(REASONING)
        if reasoning is not None or rng.random() < 0.1:
            assistant["reasoning_content"] = reasoning
        if rng.random() < 0.35:
            assistant["tool_calls"] = [random_tool_call(rng, tools) for _ in range(rng.randint(1, 2))]
            messages.append(assistant)
            for _ in range(rng.randint(1, 2)):
                messages.append({"role": "tool", "content": rng.choice(CONTENTS)})
            if rng.random() < 0.6:
                messages.append({"role": "assistant", "content": rng.choice(CONTENTS)})
        else:
            messages.append(assistant)
    variables = {}
    roll = rng.random()
    if roll < 0.3:
        variables["enable_thinking"] = False
    elif roll < 0.45:
        variables["enable_thinking"] = True
    return {"messages": messages, "tools": tools, "add_generation_prompt": rng.random() < 0.6, "vars": variables}


def random_cases(args):
    templates = load_templates(os.path.join(args.data, "templates"))
    tokenizer = make_tokenizer()
    rng = random.Random(args.seed)
    out = {"meta": {**meta(tokenizer), "seed": args.seed}, "conversations": []}
    for i in range(args.random):
        case = random_conversation(rng)
        for template_name, template in templates.items():
            result = render(tokenizer, template, case["messages"], case["tools"], case["add_generation_prompt"],
                            case["vars"])
            out["conversations"].append({"name": f"random_{i}", "template": template_name, **case, **result})
    return out


def held_out(args):
    with open(args.template, encoding="utf-8", newline="") as f:
        template = f.read()
    tokenizer = make_tokenizer()
    out = {"meta": {**meta(tokenizer), "template": os.path.basename(args.template)}, "conversations": []}
    for path in args.held_out:
        with open(path, encoding="utf-8") as f:
            conv = json.load(f)
        if isinstance(conv, list):
            conv = {"messages": conv}
        result = render(tokenizer, template, conv["messages"], conv.get("tools"),
                        conv.get("add_generation_prompt", False), conv.get("vars", {}))
        out["conversations"].append({"name": os.path.basename(path), **conv, **result})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=DEFAULT_DATA, help="tests/data folder (templates/, chat_template/)")
    parser.add_argument("--out", required=True, help="output JSON file")
    parser.add_argument("--random", type=int, default=0, help="render N seeded random conversations")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--template", help="template file for --held-out")
    parser.add_argument("--held-out", nargs="+", help="conversation files to render with --template")
    args = parser.parse_args()
    if args.held_out:
        if not args.template:
            parser.error("--held-out needs --template")
        result = held_out(args)
    elif args.random:
        result = random_cases(args)
    else:
        result = goldens(args)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {json.dumps(result['meta'])}")


if __name__ == "__main__":
    main()
