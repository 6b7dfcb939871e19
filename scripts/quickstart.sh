#!/usr/bin/env bash
# Installs the dependencies, builds qwenrt and runs it on the small Qwen3 checkpoint that
# ships with the repository (random weights written by transformers).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
echo "== qwenrt doctor"
build/default/qwenrt doctor
model=tests/data/models/qwen3_qknorm
echo "== qwenrt generate -m $model --ids \"1 2 3 4 5\" -n 16 --format json"
build/default/qwenrt generate -m "$model" --ids "1 2 3 4 5" -n 16 --format json
# The main job: the benchmark on the synthetic preset that suits this machine
# (GPU: Qwen2.5-7B's shape; CPU only: a short Qwen3-0.6B run).
echo "== qwenrt bench"
build/default/qwenrt bench
