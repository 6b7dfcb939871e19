#!/usr/bin/env bash
# End-to-end GPU timing on a random-weight checkpoint with a real model's shapes:
# writes it (scripts/make_synthetic_checkpoint.py), then runs `qwenrt generate` with a
# 512-token prompt and 128 new tokens, greedy and sampled, bf16 and fp16, and prints the
# engine's JSON timings (prompt tokens/s, time to first token, decode tokens/s).
#
# Usage: scripts/cuda-e2e-bench.sh QWENRT_BINARY [PRESET] [WORK_DIR]
set -uo pipefail
binary="$1"
preset="${2:-qwen2.5-7b}"
work="${3:-/tmp/qwenrt-synthetic}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

model="${work}/${preset}"
if [ ! -f "${model}/model.safetensors.index.json" ]; then
  python3 "${repo_root}/scripts/make_synthetic_checkpoint.py" --preset "${preset}" --out "${model}" || exit 1
fi
prompt="$(python3 -c 'import random; r = random.Random(1); print(" ".join(str(r.randrange(1000, 150000)) for _ in range(512)))')"

run() {
  local label="$1"
  shift
  echo "== ${preset} ${label}"
  "${binary}" generate --model "${model}" --device cuda --max-context 2048 --ids "${prompt}" \
    -n 128 --ignore-eos --format json "$@" 2>&1 | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        out = json.loads(line)
        out.pop("ids", None)
        print(json.dumps(out))
    except ValueError:
        print(line, end="")' 
}
run "bf16 greedy" --dtype bf16
run "bf16 greedy (again, warm page cache)" --dtype bf16
run "bf16 t0.7 k20 p0.8" --dtype bf16 --temperature 0.7 --top-k 20 --top-p 0.8 --seed 1
run "fp16 greedy" --dtype f16
