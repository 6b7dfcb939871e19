#!/usr/bin/env bash
# What a HIP build holds, read from its files (nothing runs on a GPU): the gfx targets the
# qwenrt binary and the GPU test binary carry code for (fails when a requested target is
# missing), the gfx targets of the rocBLAS it links (from the Tensile library files rocBLAS
# loads kernels from; a requested target without them is reported, since its matrix
# products would fail at the first call), and `qwenrt doctor` on this machine.
# Usage: scripts/hip-build-report.sh BUILD_DIR "gfx1100;gfx942;gfx90a;gfx1030"
set -euo pipefail
build=${1:?usage: hip-build-report.sh BUILD_DIR TARGETS}
requested=${2:?usage: hip-build-report.sh BUILD_DIR TARGETS}
requested=${requested//;/ }

status=0
for binary in "$build/qwenrt" "$build/tests/qwenrt_gpu_tests"; do
  [ -f "$binary" ] || { echo "hip-build-report: $binary was not built" >&2; status=1; continue; }
  # Offload bundle entries are named hipv4-amdgcn-amd-amdhsa--<target>.
  carried=$(grep -aoE 'amdgcn-amd-amdhsa--gfx[0-9a-f]+(:[a-z]+[+-])*' "$binary" | sed 's/.*--//' | sort -u | xargs)
  echo "code objects in $(basename "$binary"): ${carried:-none}"
  for target in $requested; do
    if ! grep -qw -- "$target" <<<"$carried"; then
      echo "hip-build-report: $(basename "$binary") has no code for $target" >&2
      status=1
    fi
  done
done

rocblas=$(ldd "$build/qwenrt" | awk '/librocblas/ {print $3}')
if [ -n "$rocblas" ]; then
  libdir=$(dirname "$(readlink -f "$rocblas")")
  rocblas_targets=$(find "$libdir/rocblas" -name '*gfx*' 2>/dev/null | grep -oE 'gfx[0-9a-f]+' | sort -u | xargs)
  echo "rocBLAS $(basename "$(readlink -f "$rocblas")") has kernels for: ${rocblas_targets:-none}"
  for target in $requested; do
    if ! grep -qw -- "$target" <<<"$rocblas_targets"; then
      echo "  no rocBLAS kernels for $target: its matrix products fail with this rocBLAS" \
           "(use a ROCm with hipBLASLt or rocBLAS for it, or -DQWENRT_HIP_MATMUL=tiled)"
    fi
  done
else
  echo "the build does not link rocBLAS"
fi

echo "qwenrt doctor on this machine:"
"$build/qwenrt" doctor | sed 's/^/  /'
exit $status
