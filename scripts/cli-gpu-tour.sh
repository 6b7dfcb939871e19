#!/usr/bin/env bash
# The user-facing commands on a GPU, on a random-weight checkpoint with Qwen3-8B's exact
# shapes next to Qwen's real tokenizer and chat template: doctor, chat (piped, two turns and
# /stats), generate --chat with the model's sampling defaults, and bench -m. The text is
# meaningless (random weights); speeds, memory and the flow are what a user of the real model
# sees. Needs torch and safetensors (scripts/make_synthetic_checkpoint.py); the tokenizer comes
# from scripts/fetch-qwen-tokenizer.sh (already in .cache/ on a machine without network).
#
# Usage: scripts/cli-gpu-tour.sh QWENRT_BINARY [WORK_DIR]
set -uo pipefail
binary="$1"
work="${2:-/tmp/qwenrt-tour}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${work}/qwen3-8b"
tokenizer="$("${repo_root}/scripts/fetch-qwen-tokenizer.sh" | tail -1)" || exit 1

if [ ! -f "${model}/model.safetensors.index.json" ]; then
  python3 "${repo_root}/scripts/make_synthetic_checkpoint.py" --preset qwen3-8b --out "${model}" || exit 1
fi
cp "${tokenizer}/tokenizer.json" "${tokenizer}/tokenizer_config.json" "${model}/"
# Qwen3's published generation defaults, so that chat and generate apply them.
cat >"${model}/generation_config.json" <<'JSON'
{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
 "temperature": 0.6, "top_k": 20, "top_p": 0.95}
JSON

step() { echo; echo "\$ $*"; "$@"; echo "[exit $?]"; }
step "${binary}" doctor -m "${model}"
echo; echo "\$ printf 'Hello! Who are you?\\n/stats\\nTell me more.\\n/stats\\n' | qwenrt chat -m ${model} --no-think -n 48"
printf 'Hello! Who are you?\n/stats\nTell me more.\n/stats\n' |
  "${binary}" chat -m "${model}" --device cuda --no-think -n 48
echo "[exit $?]"
step "${binary}" generate -m "${model}" --device cuda --chat "Write a haiku about GPUs." --verbose --stats \
  -n 64 --seed 7
step "${binary}" generate -m "${model}" --device cuda -p "The capital of France is" -n 16 --temperature 0 --stats
step "${binary}" bench -m "${model}" --device cuda --repeat 3
