// Device and runtime facts for `qwenrt doctor` and for picking a default device: driver and
// runtime versions, each GPU's compute capability and memory, and whether this build has
// machine code (or PTX that the driver can compile) for it.
#include <sstream>
#include <string>

#include "backend/backend.h"
#include "backend/common/gpu_advice.h"
#include "backend/gpu/common.h"
#include "backend/gpu/compat.h"

#ifndef QWENRT_CUDA_ARCHS
#define QWENRT_CUDA_ARCHS ""
#endif
#ifndef QWENRT_GPU_MATMUL
#define QWENRT_GPU_MATMUL ""
#endif

namespace qwenrt {
namespace {

#if defined(QWENRT_GPU_HIP)
constexpr const char* kPlatform = "HIP";
constexpr int kBuildRuntimeVersion = HIP_VERSION;
std::string version_string(int version) { return hip_version_string(version); }
#else
constexpr const char* kPlatform = "CUDA";
constexpr int kBuildRuntimeVersion = CUDART_VERSION;
std::string version_string(int version) { return cuda_version_string(version); }
#endif

// True when one of the build's architectures ("90", "90a", "80-real", "86-virtual") runs on
// compute capability major.minor: same major and not newer minor for machine code; any
// older-or-equal target for PTX.
[[maybe_unused]] bool build_supports(const std::string& archs, int major, int minor) {
  std::istringstream stream(archs);
  std::string arch;
  const int device = major * 10 + minor;
  while (stream >> arch) {
    bool ptx_only = arch.find("virtual") != std::string::npos;
    bool has_ptx = ptx_only || arch.find("real") == std::string::npos;  // plain "90" embeds both
    int value = 0;
    size_t i = 0;
    while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9') value = value * 10 + (arch[i++] - '0');
    if (value == 0) continue;
    bool arch_specific = i < arch.size() && arch[i] == 'a';  // sm_90a runs only on 9.0
    if (!ptx_only && value / 10 == major && value % 10 <= minor && (!arch_specific || value == device)) return true;
    if (has_ptx && !arch_specific && value <= device) return true;
  }
  return false;
}

}  // namespace

GpuRuntimeInfo query_gpus() {
  GpuRuntimeInfo info;
  info.built_with_gpu = true;
  info.platform = kPlatform;
  info.build_architectures = QWENRT_CUDA_ARCHS;
  info.matmul_library = QWENRT_GPU_MATMUL;
  info.build_runtime_version = version_string(kBuildRuntimeVersion);
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) info.driver_version = version_string(driver);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.runtime_version = version_string(runtime);
#if defined(QWENRT_GPU_HIP)
  // libamdhip64 is a shared library: the one found at run time may be older than the build's.
  // (CUDA links its runtime in, and a driver of the same major version runs it.)
  info.version_advice = version_advice("HIP runtime", info.runtime_version, info.build_runtime_version);
#endif
  if (info.driver_version.empty()) {
#if defined(QWENRT_GPU_HIP)
    info.error = "no ROCm driver found (no GPU, or amdgpu/ROCm is not installed): use --device cpu";
#else
    info.error = "no NVIDIA driver found (no GPU, or the driver is not installed): use --device cpu";
#endif
    return info;
  }
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    info.error = std::string("no usable ") + kPlatform + " device: " + cudaGetErrorString(status);
    (void)cudaGetLastError();
    return info;
  }
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, index) != cudaSuccess) continue;
    GpuDeviceInfo device;
    device.index = index;
    device.name = props.name;
    device.compute_major = props.major;
    device.compute_minor = props.minor;
    device.multiprocessors = props.multiProcessorCount;
    device.total_bytes = props.totalGlobalMem;
    device.memory_bandwidth = cuda::rated_memory_bandwidth(index);
#if defined(QWENRT_GPU_HIP)
    device.arch_name = props.gcnArchName;
    const GfxCoverage coverage = gfx_coverage(info.build_architectures, device.arch_name);
    device.supported_by_build = coverage.kind == GfxCoverage::Kind::kCovered;
    device.advice = coverage.advice;
#else
    device.supported_by_build = build_supports(info.build_architectures, props.major, props.minor);
#endif
    if (cudaSetDevice(index) == cudaSuccess) {
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        device.free_bytes = free_bytes;
        device.total_bytes = total_bytes;
      }
    }
    info.devices.push_back(device);
  }
  if (info.devices.empty()) info.error = std::string("the ") + kPlatform + " runtime reports no devices";
  return info;
}

namespace cuda {

double rated_memory_bandwidth(int device) {
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

}  // namespace cuda

}  // namespace qwenrt
