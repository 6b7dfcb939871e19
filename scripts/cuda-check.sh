#!/usr/bin/env bash
# Builds the CUDA configuration, runs every test (the `gpu` label included), the op
# benchmarks and, when available, compute-sanitizer's memcheck over the kernel tests,
# in one go on a GPU machine. Logs land in LOG_DIR (default build-gpu/logs); the last
# lines printed are the summary.
#
# Usage: scripts/cuda-check.sh [LOG_DIR] [--no-bench] [--no-sanitizer] [--no-profile]
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
log_dir="build-gpu/logs"
bench=1
sanitizer=1
profile=1
for arg in "$@"; do
  case "${arg}" in
    --no-bench) bench=0 ;;
    --no-sanitizer) sanitizer=0 ;;
    --no-profile) profile=0 ;;
    *) log_dir="${arg}" ;;
  esac
done
mkdir -p "${log_dir}"
build_dir="build-gpu"
summary=()

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
  2>&1 | tee "${log_dir}/device.txt"

if ! { cmake -S . -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQWENRT_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" &&
       cmake --build "${build_dir}" -j "$(nproc)"; } >"${log_dir}/build.txt" 2>&1; then
  tail -40 "${log_dir}/build.txt"
  echo "SUMMARY build FAILED"
  exit 1
fi
summary+=("build ok")

# CPU tiers through ctest; the gpu-labelled kernel tests in one process (their output,
# model-level numbers included, goes to the log).
timeout "${CTEST_SECONDS:-200}" ctest --test-dir "${build_dir}" -LE gpu --output-on-failure \
  --timeout 120 -j "$(nproc)" >"${log_dir}/ctest.txt" 2>&1
ctest_rc=$?
grep -E "tests passed|\*\*\*Failed|Timeout" "${log_dir}/ctest.txt" | tail -20
summary+=("ctest (cpu tiers) rc=${ctest_rc}: $(grep -E 'tests passed' "${log_dir}/ctest.txt")")

gpu_tests="${build_dir}/tests/qwenrt_gpu_tests"
timeout "${GPU_TEST_SECONDS:-240}" "${gpu_tests}" >"${log_dir}/gpu-tests.txt" 2>&1
gpu_rc=$?
grep -E "^\[  FAILED|Failure|error:|log-prob|greedy:|^\[  PASSED|Expected|Which is|actual|relative error|elements off" \
  "${log_dir}/gpu-tests.txt" | head -80
summary+=("gpu tests rc=${gpu_rc}: $(grep -E '^\[  PASSED|tests, listed below' "${log_dir}/gpu-tests.txt" | tr '\n' ' ')")
if [ "${bench}" = 1 ]; then
  timeout "${BENCH_SECONDS:-150}" "${gpu_tests}" --gtest_also_run_disabled_tests --gtest_filter='CudaBench.*' \
    >"${log_dir}/bench.txt" 2>&1
  summary+=("bench rc=$?")
  grep -vE "^\[|^Running|^Note|^$" "${log_dir}/bench.txt"
fi

if [ "${sanitizer}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout "${SANITIZER_SECONDS:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 "${gpu_tests}" \
    --gtest_filter='Dtypes/CudaOps.*/bf16:CudaSampling.*' >"${log_dir}/memcheck.txt" 2>&1
  summary+=("memcheck rc=$?")
  grep -E "ERROR SUMMARY|Invalid|FAILED" "${log_dir}/memcheck.txt" | head -20
fi

# Device-side kernel durations (no host launch overhead) for a 7B decode step and the
# attention shapes, from Nsight Compute, when it is installed and allowed to read counters.
if [ "${profile}" = 1 ] && command -v ncu >/dev/null; then
  timeout "${PROFILE_SECONDS:-150}" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --log-file "${log_dir}/profile.csv" "${gpu_tests}" --gtest_also_run_disabled_tests \
    --gtest_filter='CudaProfile.*:CudaBench.DISABLED_AttentionForProfiler' >"${log_dir}/profile-run.txt" 2>&1
  summary+=("profile rc=$?")
  python3 - "${log_dir}/profile.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
name, grid, block, value = (head.index(c) for c in ("Kernel Name", "Grid Size", "Block Size", "Metric Value"))
for r in rows:
    print(f"{float(r[value].replace(',', '')) / 1000:9.2f} us  grid {r[grid]:>14} block {r[block]:>12}  {r[name][:90]}")
PY
fi

for line in "${summary[@]}"; do echo "SUMMARY ${line}"; done
[ "${ctest_rc}" = 0 ] && [ "${gpu_rc}" = 0 ]
