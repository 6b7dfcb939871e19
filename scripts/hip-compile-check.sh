#!/usr/bin/env bash
# Compile check of the GPU backend for AMD GPUs: every translation unit of the GPU backend
# (src/backend/gpu/*.cu) goes through hipcc for one wave64 target (gfx90a, CDNA2) and one
# wave32 target (gfx1030, RDNA2), warnings as errors. This compiles; it runs nothing
# (CI has no AMD GPU). Also checks that the warp width each target compiles with is the
# expected one and that no kernel spells a warp width or warp intrinsic itself.
#
# Debian 12's hipcc (ROCm 5.2) is used: it is what CI can install. Its device libraries
# cover gfx90a and gfx1030 but not gfx1100 or gfx942, the default targets of the `hip`
# preset on a real ROCm machine (docs/AMD.md). The BLAS wrappers are left out: hipBLASLt
# is not packaged there, rocBLAS's file is built with all four targets by
# scripts/container-check.sh, and cuBLASLt's file is CUDA-only.
#
# Usage: scripts/hip-compile-check.sh [--warp-only]   (installs hipcc with apt-get when missing)
#   --warp-only: only the warp-width assertions and the source check (for a build that
#                compiles the kernels itself: docker/rocm.Containerfile)
#   QWENRT_HIP_CHECK_TARGETS="gfx90a:64 gfx1030:32"  target:expected-warp-width pairs
set -euo pipefail
cd "$(dirname "$0")/.."
warp_only=0
if [ "${1:-}" = --warp-only ]; then warp_only=1; fi

if ! command -v hipcc >/dev/null 2>&1; then
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends hipcc libamdhip64-dev rocm-device-libs
fi
hipcc --version 2>/dev/null | head -n 2

# No kernel spells the warp width or a warp intrinsic: those live in compat.h, which
# picks them per target.
if grep -nE '__shfl|__ballot|__activemask|__match_any|__syncwarp|\bwarpSize\b|kFullWarpMask|[%/] *32\b|& *31\b' \
    src/backend/gpu/*.cu; then
  echo "hip-compile-check: a kernel uses a warp width or warp intrinsic directly (use compat.h)" >&2
  exit 1
fi

targets=(${QWENRT_HIP_CHECK_TARGETS:-gfx90a:64 gfx1030:32})
sources=()
for f in src/backend/gpu/*.cu; do
  case "$f" in
    */matmul_cublaslt.cu | */matmul_hipblaslt.cu | */matmul_rocblas.cu | *_sm90.cu) ;;
    *) sources+=("$f") ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-x hip -std=c++17 -O2 -Wall -Wextra -Wshadow -Werror -ffp-contract=on -Isrc -Iinclude)

jobs=()
for entry in "${targets[@]}"; do
  target=${entry%%:*}
  width=${entry#*:}
  # The warp width the kernels see on this target.
  printf '#include "backend/gpu/compat.h"\n#if defined(__HIP_DEVICE_COMPILE__)\nstatic_assert(qwenrt::gpu::kWarpSize == %s, "warp width");\n#endif\n' \
    "$width" >"$work/warp_$target.hip"
  jobs+=("$target $work/warp_$target.hip")
  if [ "$warp_only" = 1 ]; then continue; fi
  for f in "${sources[@]}"; do jobs+=("$target $f"); done
done

compile_one() {
  local target=$1 file=$2
  local object="$work/$(basename "$file").$target.o"
  if hipcc "${flags[@]}" --offload-arch="$target" -c "$file" -o "$object" 2>"$object.log"; then
    echo "ok    $target  $file"
  else
    echo "FAIL  $target  $file"
    cat "$object.log"
    return 1
  fi
}

start=$SECONDS
status=0
running=0
for job in "${jobs[@]}"; do
  if [ "$running" -ge "$(nproc)" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  compile_one $job &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
echo "hip-compile-check: ${#jobs[@]} compilations for ${targets[*]} in $((SECONDS - start)) s" \
     "(compiled only, not run)"
exit $status
