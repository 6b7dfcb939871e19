#!/usr/bin/env bash
# The benchmark matrix of docs/PERFORMANCE.md on a GPU machine: `qwenrt bench --format json`
# for decode at batch 1 (greedy and sampled, with and without recorded decode steps),
# prompts of 512/2048/8192 tokens and decode after long prompts. One JSON line per run,
# prefixed by its label, so that runs can be compared side by side.
#
# Usage: scripts/cuda-bench-matrix.sh QWENRT_BINARY [SET ...]
#   SET: decode-7b decode-small decode-large prompt long fp16 (default: all)
set -uo pipefail
binary="$1"
shift
sets=("$@")
[ "${#sets[@]}" -eq 0 ] && sets=(decode-7b decode-small decode-large prompt long fp16)

run() {
  local label="$1"
  shift
  local line
  line="$("${binary}" bench --device cuda --format json "$@" 2>&1 | tail -n 1)"
  echo "${label} ${line}"
}

sampled=(--temperature 0.7 --top-k 20 --top-p 0.8 --seed 1)
for set in "${sets[@]}"; do
  case "${set}" in
    decode-7b)
      run "7b-greedy" --synthetic qwen2.5-7b --repeat 5
      run "7b-greedy-no-graphs" --synthetic qwen2.5-7b --repeat 5 --no-graphs
      run "7b-sampled" --synthetic qwen2.5-7b --repeat 5 "${sampled[@]}"
      ;;
    decode-small)
      run "0.5b-greedy" --synthetic qwen2.5-0.5b --repeat 5
      run "0.5b-greedy-no-graphs" --synthetic qwen2.5-0.5b --repeat 5 --no-graphs
      ;;
    decode-large)
      run "qwen3-8b-greedy" --synthetic qwen3-8b --repeat 3
      run "32b-greedy" --synthetic qwen2.5-32b --repeat 3 --gen 64
      ;;
    prompt)
      for p in 512 2048 8192; do
        run "7b-prompt-${p}" --synthetic qwen2.5-7b --prompt "${p}" --gen 16 --repeat 3
      done
      run "7b-prompt-8192-chunk-2048" --synthetic qwen2.5-7b --prompt 8192 --gen 16 --repeat 3 --prefill-chunk 2048
      ;;
    long)
      run "7b-decode-after-8192" --synthetic qwen2.5-7b --prompt 8192 --gen 128 --repeat 3
      run "7b-decode-after-32768" --synthetic qwen2.5-7b --prompt 32768 --gen 128 --repeat 1 --warmup 1
      ;;
    fp16)
      run "7b-greedy-fp16" --synthetic qwen2.5-7b --repeat 5 --dtype f16
      run "7b-prompt-2048-fp16" --synthetic qwen2.5-7b --prompt 2048 --gen 16 --repeat 3 --dtype f16
      ;;
    *) echo "unknown set ${set}" >&2 ;;
  esac
done
