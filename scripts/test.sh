#!/usr/bin/env bash
# Installs what the build needs, builds qwenrt (with the CUDA backend when nvcc is present)
# and runs every test that needs no GPU, then the fuzz targets' regression replay and a short
# fuzzing slice. GPU tests (CTest label `gpu`) run with
#   ctest --test-dir build/default -L gpu
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset default
cmake --build --preset default -j "$(nproc)"
ctest --preset default -j "$(nproc)"
# AMD GPUs: the GPU backend's kernels compile with HIP for a wave64 and a wave32 target.
# A compile check only: nothing runs on an AMD GPU here (docs/AMD.md).
scripts/hip-compile-check.sh
# Fuzzing (docs/SECURITY.md): each libFuzzer target replays its seeds, its saved corpus and
# tests/fuzz/regressions/ under ASan/UBSan (a failure fails the run), then fuzzes for 30 s;
# a new find is reported and saved under build/fuzz/finds/, without failing the run.
scripts/fuzz.sh ci 30
