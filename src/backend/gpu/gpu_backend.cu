// The GPU backend (CUDA, and AMD through HIP from the same source): owns the device, one
// stream, the matrix library's handle and the fixed workspaces (matrix library, split-K
// attention partials, sampling), and routes each op of the Backend interface to its kernel
// file. Everything runs on the one stream, in order. Copies to the host wait for it; copies
// to the device up to 8 MiB are staged in pinned memory and only ordered on it, larger ones
// wait for it, so host buffers may be reused on return either way.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/gpu/common.h"
#include "core/random_bits.h"
#include "core/thread_pool.h"

#ifndef QWENRT_CUDA_ARCHS
#define QWENRT_CUDA_ARCHS "unknown"
#endif

namespace qwenrt {
namespace cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;     // Hopper's recommendation
constexpr size_t kAttentionWorkspaceBytes = size_t{32} << 20;  // split-K partials
constexpr size_t kMiB = size_t{1} << 20;

// Probes whether this binary carries code for the current device.
__global__ void probe_kernel() {}

// Synthetic weights: a counter-based hash of (seed, index), so any element is computed
// independently (the host default iterates one generator and differs in values, not in
// distribution). Uniform in [offset - scale, offset + scale].
template <typename T>
__global__ void fill_random_kernel(T* data, size_t count, uint64_t seed, float scale, float offset) {
  const uint64_t key = splitmix64(seed);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const float unit = unit_float(splitmix64(key ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)));
    data[i] = gpu::from_f32<T>(offset + scale * (2.f * unit - 1.f));
  }
}

// Device time between two events recorded on the backend's stream.
class EventTimer final : public DeviceTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    QWENRT_CUDA_CALL(cudaEventCreate(&start_), "timer", "");
    QWENRT_CUDA_CALL(cudaEventCreate(&stop_), "timer", "");
  }
  ~EventTimer() override {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  void start() override { QWENRT_CUDA_CALL(cudaEventRecord(start_, stream_), "timer", "start"); }
  void stop() override { QWENRT_CUDA_CALL(cudaEventRecord(stop_, stream_), "timer", "stop"); }
  double seconds() override {
    QWENRT_CUDA_CALL(cudaEventSynchronize(stop_), "timer", "waiting for the timed work");
    float ms = 0.f;
    QWENRT_CUDA_CALL(cudaEventElapsedTime(&ms, start_, stop_), "timer", "");
    return ms * 1e-3;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

void release_device_memory(void* p) { (void)cudaFree(p); }

class DeviceGraph final : public RecordedOps {
 public:
  DeviceGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~DeviceGraph() override { (void)cudaGraphExecDestroy(exec_); }
  void replay() override { QWENRT_CUDA_CALL(cudaGraphLaunch(exec_, stream_), "graph replay", ""); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// Backend::set_chained_launches, one for the process (read by chained_mode()).
std::atomic<ChainedLaunches> chained_setting{ChainedLaunches::kOff};

// The setting in force: QWENRT_CHAINED_LAUNCHES (off or 0, deep or 1, shallow; other
// values are ignored) over the backend's, and off where the device, driver or build cannot chain.
ChainedLaunches chained_mode() {
#if defined(QWENRT_GPU_HIP)
  return ChainedLaunches::kOff;
#else
  static const std::optional<ChainedLaunches> forced = [] {
    const char* setting = std::getenv("QWENRT_CHAINED_LAUNCHES");
    return setting == nullptr ? std::nullopt : parse_chained_launches(setting);
  }();
  // The device places chained kernels early (sm_90 and later), the driver records them into
  // graphs (12.3 and later), and the kernels that run carry the wait (code built for sm_90
  // or later: a build from older PTX, JIT-compiled for this device, has none).
  static const bool capable = [] {
    int device = 0, major = 0, driver = 0;
    cudaFuncAttributes probe{};
    const bool known = cudaGetDevice(&device) == cudaSuccess &&
                       cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                       cudaDriverGetVersion(&driver) == cudaSuccess &&
                       cudaFuncGetAttributes(&probe, probe_kernel) == cudaSuccess;
    if (!known) (void)cudaGetLastError();
    return known && major >= 9 && driver >= 12030 && probe.ptxVersion >= 90;
  }();
  if (!capable) return ChainedLaunches::kOff;
  return forced ? *forced : chained_setting.load(std::memory_order_relaxed);
#endif
}

}  // namespace

bool chained_launches() { return chained_mode() != ChainedLaunches::kOff; }

gpu::NextGrid next_grid_point() {
  return chained_mode() == ChainedLaunches::kShallow ? gpu::NextGrid::kAfterWait : gpu::NextGrid::kAtStart;
}

gpu::NextGrid next_grid_point_for_product(size_t weight_bytes) {
  constexpr size_t kShortProductBytes = size_t{8} << 20;
  return chained_mode() == ChainedLaunches::kShallow && weight_bytes >= kShortProductBytes
             ? gpu::NextGrid::kAfterStream
             : gpu::NextGrid::kAtStart;
}

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* op,
                                   const std::string& detail) {
  const ErrorCategory category =
      status == cudaErrorMemoryAllocation ? ErrorCategory::kOutOfMemory : ErrorCategory::kDevice;
  throw Error(category, std::string(op) + ": " + call + " failed: " + cudaGetErrorName(status) +
                            " (" + cudaGetErrorString(status) + ")" +
                            (detail.empty() ? "" : " [" + detail + "]"));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(DType dtype, int device_index) : dtype_(dtype), device_index_(device_index) {
    if (dtype != DType::kBF16 && dtype != DType::kF16) {
      throw Error(ErrorCategory::kUnsupported,
                  std::string("the CUDA backend computes in bf16 or fp16, not ") + dtype_name(dtype));
    }
    int count = 0;
    const cudaError_t count_status = cudaGetDeviceCount(&count);
    if (count_status != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      // No driver at all reads as "driver version is insufficient" from the runtime: the
      // device query names it as doctor does.
      const GpuRuntimeInfo runtime = query_gpus();
      throw Error(ErrorCategory::kDevice,
                  !runtime.error.empty() ? runtime.error
                                         : std::string("no CUDA device is usable: ") +
                                               (count_status != cudaSuccess ? cudaGetErrorString(count_status)
                                                                            : "none found"));
    }
    if (device_index < 0 || device_index >= count) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "CUDA device " + std::to_string(device_index) + " does not exist (" +
                      std::to_string(count) + " found)");
    }
    QWENRT_CUDA_CALL(cudaSetDevice(device_index), "init", "device " + std::to_string(device_index));
    cudaDeviceProp prop{};
    QWENRT_CUDA_CALL(cudaGetDeviceProperties(&prop, device_index), "init", "");
    device_name_ = prop.name;
    multiprocessors_ = prop.multiProcessorCount;
    const cudaError_t probe = gpu::probe_kernel_image(probe_kernel);
    if (probe != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls are not confused
#if defined(QWENRT_GPU_HIP)
      const std::string arch = prop.gcnArchName;
      throw Error(ErrorCategory::kUnsupported,
                  "GPU " + std::to_string(device_index) + " (" + device_name_ + ") is " + arch +
                      " but this qwenrt build has kernels for " + QWENRT_CUDA_ARCHS + " only (" +
                      cudaGetErrorString(probe) + "); rebuild with -DQWENRT_HIP_ARCHITECTURES=" +
                      arch.substr(0, arch.find(':')));
#else
      throw Error(ErrorCategory::kUnsupported,
                  "GPU " + std::to_string(device_index) + " (" + device_name_ +
                      ") has compute capability " + std::to_string(prop.major) + "." +
                      std::to_string(prop.minor) + " but this qwenrt build has kernels for " +
                      "CUDA architectures " + QWENRT_CUDA_ARCHS + " only (" +
                      cudaGetErrorString(probe) + "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" +
                      std::to_string(prop.major * 10 + prop.minor));
#endif
    }
    // The opt-in limit where the device has one (NVIDIA), else the plain per-block limit.
    int optin_shared = 0;
    if (cudaDeviceGetAttribute(&optin_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device_index) != cudaSuccess) {
      (void)cudaGetLastError();
      optin_shared = 0;
    }
    max_shared_bytes_ = std::max(static_cast<size_t>(std::max(optin_shared, 0)), prop.sharedMemPerBlock);
    QWENRT_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "init", "");
    cublas_workspace_ = allocate(kCublasWorkspaceBytes, "matmul workspace");
    attention_workspace_ = allocate(kAttentionWorkspaceBytes, "attention workspace");
    status_buffer_ = allocate(sizeof(int32_t), "sampling status");
    matmul_ = std::make_unique<Matmul>(cublas_workspace_.data(), kCublasWorkspaceBytes, multiprocessors_);
  }

  ~CudaBackend() override {
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    for (Stage& stage : stages_) {
      if (stage.buffer != nullptr) (void)cudaFreeHost(stage.buffer);
      if (stage.done != nullptr) (void)cudaEventDestroy(stage.done);
    }
    for (DrawRecord& record : draws_) {
      if (record.host != nullptr) (void)cudaFreeHost(record.host);
      if (record.done != nullptr) (void)cudaEventDestroy(record.done);
    }
    if (ring_ != nullptr) (void)cudaFreeHost(ring_);
    for (cudaEvent_t done : ring_done_) {
      if (done != nullptr) (void)cudaEventDestroy(done);
    }
  }

  std::string name() const override {
#if defined(QWENRT_GPU_HIP)
    return "gpu:" + std::to_string(device_index_) + " (" + device_name_ + ")";
#else
    return "cuda:" + std::to_string(device_index_) + " (" + device_name_ + ")";
#endif
  }
  DType activation_dtype() const override { return dtype_; }
  bool uses_host_memory() const override { return false; }

  size_t workspace_bytes() const override {
    return cublas_workspace_.bytes() + attention_workspace_.bytes() + status_buffer_.bytes() +
           penalty_logits_.bytes() + penalty_counts_.bytes() + sampling_histogram_.bytes() +
           greedy_scratch_.bytes() + score_workspace_.bytes();
  }

  DeviceMemoryInfo memory_info() const override {
    DeviceMemoryInfo info;
    QWENRT_CUDA_CALL(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "memory_info", "");
    return info;
  }

  DeviceBuffer allocate(size_t bytes, const char* what) override {
    if (bytes == 0) return DeviceBuffer();
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, bytes);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      throw Error(status == cudaErrorMemoryAllocation ? ErrorCategory::kOutOfMemory
                                                      : ErrorCategory::kDevice,
                  std::string("allocating ") + what + " (" + std::to_string(bytes / kMiB) +
                      " MiB) on " + name() + " failed: " + cudaGetErrorString(status) + "; " +
                      std::to_string(free_bytes / kMiB) + " MiB free of " +
                      std::to_string(total_bytes / kMiB));
    }
    return DeviceBuffer(data, bytes, release_device_memory);
  }

  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    // A recording would keep the ring's address and replay whatever it holds then.
    QWENRT_CHECK(!recording_, "copy_to_device while recording ops");
    if (bytes <= kUploadHalfBytes) {
      upload_through_ring(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
      return;
    }
    staged_copy_to_device(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  }

  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    QWENRT_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
                     "copy_to_host", std::to_string(bytes) + " bytes");
    QWENRT_CUDA_CALL(cudaStreamSynchronize(stream_), "copy_to_host", std::to_string(bytes) + " bytes");
  }

  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    QWENRT_CHECK(!recording_, "copy_on_device while recording ops");
    QWENRT_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy_on_device",
                     std::to_string(bytes) + " bytes");
  }

  void upload_converted(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                        size_t count) override {
    if (dst_dtype == src_dtype) {
      copy_to_device(dst, src, count * dtype_size(dst_dtype));
      return;
    }
    QWENRT_CHECK(dst_dtype != DType::kI32 && src_dtype != DType::kI32,
                 "upload_converted: int32 converts to nothing else");
    // Converted on the host in chunks (load time only), staged through one buffer.
    constexpr size_t kChunk = size_t{1} << 22;
    std::vector<float> wide(std::min(count, kChunk));
    std::vector<char> narrow(std::min(count, kChunk) * dtype_size(dst_dtype));
    for (size_t first = 0; first < count; first += kChunk) {
      const size_t n = std::min(kChunk, count - first);
      convert_to_f32(static_cast<const char*>(src) + first * dtype_size(src_dtype), src_dtype,
                     wide.data(), n);
      convert_from_f32(wide.data(), narrow.data(), dst_dtype, n);
      copy_to_device(static_cast<char*>(dst) + first * dtype_size(dst_dtype), narrow.data(),
                     n * dtype_size(dst_dtype));
    }
  }

  void synchronize() override {
    QWENRT_CUDA_CALL(cudaStreamSynchronize(stream_), "synchronize",
                     "a kernel issued since the last synchronization failed");
  }

  DeviceInfo device_info() const override {
    DeviceInfo info{name(), 0, 0};
    // Ceilings measured on these card types (docs/PERFORMANCE.md, scripts/device_ceilings.py):
    // a large device-to-device copy and a large random-data bf16 GEMM. Other cards report
    // unknown (0): a GH200, an H100 of another form (PCIe, NVL) have other memory.
    if (device_name_.find("H200") != std::string::npos && device_name_.find("GH200") == std::string::npos) {
      info.peak_bandwidth = 4.3e12;
      info.peak_matmul_flops = 790e12;
    } else if (device_name_.find("H100 80GB HBM3") != std::string::npos) {
      info.peak_bandwidth = 3.04e12;
      info.peak_matmul_flops = 784e12;
    }
    // Every card states its memory's rated figure: `bench` measures decode against it where no
    // ceiling was measured (a copy reaches ≈ 90% of it on these cards).
    info.rated_bandwidth = rated_memory_bandwidth(device_index_);
    return info;
  }

  std::unique_ptr<DeviceTimer> make_timer() override { return std::make_unique<EventTimer>(stream_); }

  // HIP: not yet, as nothing could check it on AMD hardware (rocBLAS allocates its own
  // workspace, which a graph capture does not allow); decode steps run op by op there.
#if defined(QWENRT_GPU_HIP)
  bool can_record() const override { return false; }
#else
  bool can_record() const override { return true; }
#endif

  void begin_recording() override {
    QWENRT_CUDA_CALL(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "recording", "begin");
    recording_ = true;
  }

  std::unique_ptr<RecordedOps> end_recording() override {
    recording_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (ended != cudaSuccess || graph == nullptr) {
      (void)cudaGetLastError();
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      return nullptr;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = gpu::graph_instantiate(&exec, graph);
    (void)cudaGraphDestroy(graph);
    QWENRT_CUDA_CALL(made, "recording", "instantiating the graph");
    return std::make_unique<DeviceGraph>(exec, stream_);
  }

  void fill_random(Tensor tensor, uint64_t seed, float scale, float offset) override {
    const size_t count = static_cast<size_t>(tensor.numel());
    if (count == 0) return;
    const unsigned blocks = std::min<unsigned>(ceil_div(static_cast<long long>(count), 256), 8192u);
    switch (tensor.dtype) {
      case DType::kF32:
        fill_random_kernel<float><<<blocks, 256, 0, stream_>>>(tensor.as<float>(), count, seed, scale, offset);
        break;
      case DType::kBF16:
        fill_random_kernel<gpu::bf16><<<blocks, 256, 0, stream_>>>(tensor.as<gpu::bf16>(), count, seed, scale, offset);
        break;
      case DType::kF16:
        fill_random_kernel<gpu::f16><<<blocks, 256, 0, stream_>>>(tensor.as<gpu::f16>(), count, seed, scale, offset);
        break;
      default:
        throw Error(ErrorCategory::kUnsupported, "fill_random: int32 tensors");
    }
    QWENRT_CUDA_LAUNCHED("fill_random", shape_string(tensor));
    synchronize();
  }

  void embed(const BatchView& batch, const Tensor& table, Tensor out) override {
    launch_embed(batch, table, out, stream_);
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    launch_rmsnorm(x, weight, eps, out, stream_);
  }

  void add_rmsnorm(Tensor residual, const Tensor& delta, const Tensor& weight, float eps,
                   Tensor out) override {
    launch_add_rmsnorm(residual, delta, weight, eps, out, stream_);
  }

  void matmul(const Tensor& x, const Tensor& w, Tensor out) override {
    if (launch_small_matmul(x, w, out, stream_)) return;
    if (launch_gemv(x, w, out, stream_)) return;
    matmul_->run(x, w, out, stream_);
  }

  void qkv_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                        const QkvEpilogue& epilogue, Tensor q, Tensor k, Tensor v,
                        const KvGeometry& geometry, KvLayer cache) override {
    launch_qkv_rope_kvwrite(batch, attn, epilogue, q, k, v, geometry, cache, stream_);
  }

  bool fuses_qkv_epilogue() const override { return true; }
  void set_chained_launches(ChainedLaunches mode) override {
    chained_setting.store(mode, std::memory_order_relaxed);
  }

  void qkv_fused_rope_kvwrite(const BatchView& batch, const AttentionParams& attn, const QkvEpilogue& epilogue,
                              const Tensor& qkv, Tensor q_out, const KvGeometry& geometry, KvLayer cache) override {
    launch_qkv_fused_rope_kvwrite(batch, attn, epilogue, qkv, q_out, geometry, cache, stream_);
  }

  void attention(const BatchView& batch, const AttentionParams& attn, const Tensor& q,
                 const KvGeometry& geometry, KvLayer cache, Tensor out) override {
    QWENRT_CHECK(attn.n_kv_heads > 0 && attn.n_heads % attn.n_kv_heads == 0 &&
                     q.rows == batch.n_tokens && out.rows == batch.n_tokens &&
                     q.cols == static_cast<int64_t>(attn.n_heads) * attn.head_dim &&
                     out.cols == q.cols && q.dtype == dtype_ && out.dtype == dtype_ &&
                     geometry.dtype == dtype_ && geometry.n_kv_heads == attn.n_kv_heads &&
                     geometry.head_dim == attn.head_dim,
                 "attention: q " + shape_string(q) + ", out " + shape_string(out) +
                     " do not match the heads/geometry");
    // The tiled kernels read 16-byte vectors and have head_dim-specialised code.
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool tiled = aligned(q.data) && aligned(out.data) && aligned(cache.k) &&
                       aligned(cache.v) &&
                       (attn.head_dim == 64 || attn.head_dim == 128 || attn.head_dim == 256) &&
                       attn.n_heads / attn.n_kv_heads <= kMaxTiledGroup;
    if (!tiled) {
      launch_attention_generic(batch, attn, q, geometry, cache, out, stream_);
      return;
    }
    // Decode batches (one new token per sequence, any number of sequences) take the split
    // decode kernels; prompt chunks the prompt kernels. A mixed batch's leading decode rows
    // go to the decode kernels and its prompt chunks to the prompt kernels: in the prompt
    // kernels a one-token sequence fills a sixty-fourth of its block's rows, and its
    // sequence slot in the grid spans as many tiles as the longest chunk.
    const auto decode_attention = [&](const BatchView& view, bool token_rows = false) {
      return launch_attention_decode(view, attn, q, geometry, cache, out,
                                     static_cast<float*>(attention_workspace_.data()), kAttentionWorkspaceBytes,
                                     multiprocessors_, max_shared_bytes_, stream_, token_rows);
    };
    // A few new tokens in all (a short prompt after a cached prefix, alone or beside decode
    // rows): each token a decode row of its own, its context split over the device, where
    // the prompt kernels walk each context in one block per head and query tile.
    if (batch.max_new_tokens > 1 && batch.n_tokens <= kTokenRowsMaxTokens && decode_attention(batch, true)) return;
    const int decode_seqs = batch.leading_decode_seqs;
    if (batch.max_new_tokens > 1 && decode_seqs > 0 && decode_seqs < batch.n_seqs) {
      BatchView decode = batch;
      decode.n_seqs = decode_seqs;
      decode.n_tokens = decode_seqs;
      decode.max_new_tokens = 1;
      decode.max_context_len = batch.leading_decode_max_context;
      if (decode_attention(decode)) {
        // The rest as a batch of their own: their tokens keep their rows in q and out. The
        // view's sequence arrays start at its first sequence, its token arrays do not (the
        // prompt kernels reach tokens through seq_starts only; the generic kernel, which
        // walks tokens, takes the whole batch below).
        BatchView prompt = batch;
        prompt.n_seqs = batch.n_seqs - decode_seqs;
        prompt.n_tokens = batch.n_tokens - decode_seqs;
        prompt.seq_starts += decode_seqs;
        prompt.context_lens += decode_seqs;
        prompt.block_tables += static_cast<ptrdiff_t>(decode_seqs) * batch.max_blocks_per_seq;
        if (prompt.rope_rows != nullptr) prompt.rope_rows += decode_seqs;
        prompt.leading_decode_seqs = 0;
        prompt.leading_decode_max_context = 0;
        if (!tiled_prefill_attention(prompt, attn, q, geometry, cache, out)) {
          // The generic kernel reads sequences by index: it takes the whole batch again.
          launch_attention_generic(batch, attn, q, geometry, cache, out, stream_);
        }
        return;
      }
    }
    if (decode_attention(batch)) return;
    if (!tiled_prefill_attention(batch, attn, q, geometry, cache, out))
      launch_attention_generic(batch, attn, q, geometry, cache, out, stream_);
  }

  // The tiled prompt kernels (tensor cores where built, else the portable tiles); false
  // when neither takes the batch.
  bool tiled_prefill_attention(const BatchView& batch, const AttentionParams& attn, const Tensor& q,
                               const KvGeometry& geometry, KvLayer cache, Tensor out) {
    return launch_attention_prefill_mma(batch, attn, q, geometry, cache, out, stream_) ||
           launch_attention_prefill(batch, attn, q, geometry, cache, out, max_shared_bytes_, stream_);
  }

  void add_bias(Tensor x, const Tensor& bias) override { launch_add_bias(x, bias, stream_); }

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) override {
    launch_silu_mul(gate, up, out, stream_);
  }

  bool matmul_qkv_rope_kvwrite(const Tensor& x, const Tensor& qkv, const BatchView& batch, const AttentionParams& attn,
                               const QkvEpilogue& epilogue, Tensor q_out, const KvGeometry& geometry,
                               KvLayer cache) override {
    return launch_gemv_qkv_rope_kvwrite(x, qkv, batch, attn, epilogue, q_out, geometry, cache, stream_);
  }

  bool matmul_silu_mul(const Tensor& x, const Tensor& gate_up, Tensor out) override {
#if defined(QWENRT_GATED_PRODUCT_SM90)
    if (launch_gated_product_sm90(x, gate_up, out, stream_)) return true;
#endif
    return launch_gemv_silu_mul(x, gate_up, out, stream_);
  }

  void gather_rows(const Tensor& x, const int32_t* rows, Tensor out) override {
    launch_gather_rows(x, rows, out, stream_);
  }

  void sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
              const int32_t* history, const int32_t* history_lens, int history_stride,
              int32_t* out_ids, int32_t* host_ids) override {
    DrawRecord& record = draws_[kSyncDraw];
    issue_draw(logits, params, step, history, history_lens, history_stride, out_ids, record);
    complete_draw(record, host_ids);
  }

  int begin_sample(const Tensor& logits, const SamplingParams& params, uint64_t step, const int32_t* history,
                   const int32_t* history_lens, int history_stride, int32_t* out_ids, int32_t* host_ids) override {
    const int ticket = next_ticket_;
    next_ticket_ = (next_ticket_ + 1) & 0x3fffffff;  // stays non-negative
    DrawRecord& record = draws_[ticket % kAsyncDraws];
    if (record.pending) wait_for(record);  // the oldest of three: its ids are dropped
    issue_draw(logits, params, step, history, history_lens, history_stride, out_ids, record);
    record.ticket = ticket;
    record.host_ids = host_ids;
    return ticket;
  }

  void finish_sample(int ticket) override {
    DrawRecord& record = in_flight(ticket, "finish_sample");
    complete_draw(record, record.host_ids);
  }

  void drop_sample(int ticket) override { wait_for(in_flight(ticket, "drop_sample")); }

  void adjust_logits(Tensor logits, const int32_t* entries, int n) override {
    launch_adjust_logits(logits, entries, n, stream_);
  }

  void score_rows(const Tensor& logits, const int32_t* targets, const int32_t* target_rows, int top_k, float* logprobs,
                  int32_t* ids) override {
    const size_t bytes = score_workspace_bytes(logits.rows, logits.cols, top_k);
    if (bytes > score_workspace_.bytes()) {
      // At least 2 MiB: 256 rows' top 20 over 152k ids in one allocation.
      synchronize();
      score_workspace_.reset();
      score_workspace_ = allocate(std::max(bytes, size_t{2} << 20), "score_rows workspace");
    }
    launch_score_rows(logits, targets, target_rows, top_k, logprobs, ids, score_workspace_.data(), stream_);
  }
  void mask_logits(Tensor logits, const int32_t* rows, const uint32_t* masks, int n) override {
    launch_mask_logits(logits, rows, masks, n, stream_);
  }

  void sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                   const int32_t* history_lens, int history_stride, int32_t* out_ids) override {
    begin_sample_rows(logits, rows, history, history_lens, history_stride, out_ids);
    complete_draw(draws_[kSyncDraw], nullptr);
  }

  void begin_sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                         const int32_t* history_lens, int history_stride, int32_t* out_ids) override {
    DrawRecord& record = draws_[kSyncDraw];
    reserve_record(record, static_cast<size_t>(logits.rows));
    const SamplingWorkspace ws = sampling_workspace(logits, history != nullptr && history_lens != nullptr);
    launch_sample_rows(logits, rows, history, history_lens, history_stride, out_ids, ws, stream_);
    read_back(record, ws, out_ids, logits.rows);
  }

  // Nothing runs between the halves (the interface's contract), so the record holds the ids
  // of out_ids.
  void finish_sample_rows(const Tensor&, const int32_t*, int32_t* host_ids) override {
    complete_draw(draws_[kSyncDraw], host_ids);
  }

 private:
  // Where a draw's status word and ids come back: pinned host memory the device also
  // writes (a greedy draw's kernel stores into it; other draws copy into it), and the
  // event after the draw. Records kSyncDraw serves the draws the host waits for at once,
  // the others the tickets of begin_sample.
  struct DrawRecord {
    int32_t* host = nullptr;    // [1 + capacity]: status, then the ids
    int32_t* device = nullptr;  // the same memory, as the device addresses it
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
    bool pending = false;  // issued, not completed
    int64_t rows = 0;
    int ticket = -1;
    int32_t* host_ids = nullptr;  // begin_sample's destination
  };
  static constexpr int kAsyncDraws = 2;
  static constexpr int kSyncDraw = kAsyncDraws;

  // The draw of sample(): greedy without penalties in one kernel that leaves the ids and
  // the status in the record; otherwise the sampling kernels and two copies into it.
  void issue_draw(const Tensor& logits, const SamplingParams& params, uint64_t step, const int32_t* history,
                  const int32_t* history_lens, int history_stride, int32_t* out_ids, DrawRecord& record) {
    const bool penalise = params.has_penalties() && history != nullptr && history_lens != nullptr;
    reserve_record(record, static_cast<size_t>(logits.rows));
    if (logits.rows == 0) {  // no kernel writes the status word
      record.host[0] = 0;
      mark_issued(record, 0);
      return;
    }
    if (params.temperature <= 0.f && !penalise) {
      launch_greedy_draw(logits, out_ids, record.device, greedy_scratch(static_cast<size_t>(logits.rows)), stream_);
      mark_issued(record, logits.rows);
      return;
    }
    const SamplingWorkspace ws = sampling_workspace(logits, penalise);
    launch_sample(logits, params, step, history, history_lens, history_stride, out_ids, ws, stream_);
    read_back(record, ws, out_ids, logits.rows);
  }

  // The status word and the ids into the record (reserved for `rows`; pinned: plain DMA,
  // one wait for both).
  void read_back(DrawRecord& record, const SamplingWorkspace& ws, const int32_t* out_ids, int64_t rows) {
    QWENRT_CUDA_CALL(cudaMemcpyAsync(record.host, ws.status, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
                     "sample", "status read-back");
    QWENRT_CUDA_CALL(cudaMemcpyAsync(record.host + 1, out_ids, static_cast<size_t>(rows) * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_),
                     "sample", "ids read-back");
    mark_issued(record, rows);
  }

  void mark_issued(DrawRecord& record, int64_t rows) {
    QWENRT_CUDA_CALL(cudaEventRecord(record.done, stream_), "sample", "");
    record.pending = true;
    record.rows = rows;
  }

  DrawRecord& in_flight(int ticket, const char* op) {
    DrawRecord& record = draws_[static_cast<size_t>(ticket >= 0 ? ticket : 0) % kAsyncDraws];
    QWENRT_CHECK(ticket >= 0 && record.pending && record.ticket == ticket,
                 std::string(op) + ": ticket " + std::to_string(ticket) + " is not in flight");
    return record;
  }

  void wait_for(DrawRecord& record) {
    QWENRT_CUDA_CALL(cudaEventSynchronize(record.done), "sample", std::to_string(record.rows) + " rows");
    record.pending = false;
  }

  // Waits for the record's draw, raises a non-finite logit, and copies its ids to host_ids
  // (when not null).
  void complete_draw(DrawRecord& record, int32_t* host_ids) {
    QWENRT_CHECK(record.pending, "sample: no draw in flight");
    wait_for(record);
    const int32_t status = record.host[0];
    if (status != 0) {
      throw Error(ErrorCategory::kDevice,
                  non_finite_logits_message("row " + std::to_string(status - 1) + " of " + std::to_string(record.rows),
                                            dtype_));
    }
    if (host_ids != nullptr) std::memcpy(host_ids, record.host + 1, static_cast<size_t>(record.rows) * sizeof(int32_t));
  }

  void reserve_record(DrawRecord& record, size_t rows) {
    if (record.done == nullptr) {
      QWENRT_CUDA_CALL(cudaEventCreateWithFlags(&record.done, cudaEventDisableTiming), "sample", "");
    }
    if (rows <= record.capacity) return;
    if (record.host != nullptr) {
      synchronize();
      (void)cudaFreeHost(record.host);
      record = DrawRecord{nullptr, nullptr, 0, record.done};
    }
    const size_t capacity = std::max<size_t>(rows, 64);
    void* pinned = nullptr;
    QWENRT_CUDA_CALL(cudaHostAlloc(&pinned, (1 + capacity) * sizeof(int32_t), cudaHostAllocMapped), "sample",
                     "pinned draw record");
    void* device = nullptr;
    QWENRT_CUDA_CALL(cudaHostGetDevicePointer(&device, pinned, 0), "sample", "pinned draw record");
    record.host = static_cast<int32_t*>(pinned);
    record.device = static_cast<int32_t*>(device);
    record.capacity = capacity;
  }

  // Zeroed once when it grows; the greedy kernel leaves it zero.
  GreedyScratch* greedy_scratch(size_t rows) {
    if (rows > greedy_rows_) {
      synchronize();
      greedy_scratch_.reset();
      greedy_rows_ = 0;  // none, should the allocation fail
      const size_t bytes = (rows + 1) * sizeof(GreedyScratch);
      greedy_scratch_ = allocate(bytes, "greedy draw scratch");
      QWENRT_CUDA_CALL(cudaMemsetAsync(greedy_scratch_.data(), 0, bytes, stream_), "sample", "greedy scratch");
      greedy_rows_ = rows;
    }
    return static_cast<GreedyScratch*>(greedy_scratch_.data());
  }

  SamplingWorkspace sampling_workspace(const Tensor& logits, bool penalise) {
    if (penalise) reserve_penalty_workspace(static_cast<size_t>(logits.rows), static_cast<size_t>(logits.cols));
    const auto rows = static_cast<size_t>(logits.rows);
    if (rows > histogram_rows_) {
      synchronize();
      sampling_histogram_.reset();
      histogram_rows_ = 0;  // none, should the allocation fail
      sampling_histogram_ = allocate(sampling_histogram_bytes(rows), "sampling histogram");
      // The counts are cleared before each draw; the masses after it, by the kernel that reads them.
      QWENRT_CUDA_CALL(cudaMemsetAsync(sampling_histogram_.data(), 0, sampling_histogram_bytes(rows), stream_),
                       "sample", "zeroing the sampling histogram");
      histogram_rows_ = rows;
    }
    SamplingWorkspace ws;
    ws.histogram = static_cast<int32_t*>(sampling_histogram_.data());
    ws.histogram_rows = histogram_rows_;
    ws.logits = static_cast<float*>(penalty_logits_.data());
    ws.counts = static_cast<int32_t*>(penalty_counts_.data());
    ws.status = static_cast<int32_t*>(status_buffer_.data());
    ws.rows = penalty_rows_;
    ws.vocab = penalty_vocab_;
    return ws;
  }

  // The penalty copy and counts grow to the largest batch seen (the first step at the
  // planned batch size), then stay: no allocation on later steps.
  void reserve_penalty_workspace(size_t rows, size_t vocab) {
    if (rows <= penalty_rows_ && vocab <= penalty_vocab_) return;
    rows = std::max(rows, penalty_rows_);
    vocab = std::max(vocab, penalty_vocab_);
    synchronize();
    penalty_logits_.reset();
    penalty_counts_.reset();
    penalty_logits_ = allocate(rows * vocab * sizeof(float), "sampling penalty logits");
    penalty_counts_ = allocate(rows * vocab * sizeof(int32_t), "sampling penalty counts");
    QWENRT_CUDA_CALL(cudaMemsetAsync(penalty_counts_.data(), 0, rows * vocab * sizeof(int32_t), stream_),
                     "sample", "zeroing penalty counts");
    penalty_rows_ = rows;
    penalty_vocab_ = vocab;
  }

  // Large uploads (weights at load) from pageable memory, e.g. a mapped checkpoint: host
  // threads copy chunks into pinned staging buffers while the copy engine moves the
  // previous ones, so file pages, host copies and the bus work at once (a plain pageable
  // copy does one at a time, through the driver's small bounce buffer).
  void staged_copy_to_device(char* dst, const char* src, size_t bytes) {
    if (stages_[0].buffer == nullptr) {
      for (Stage& stage : stages_) {
        QWENRT_CUDA_CALL(cudaHostAlloc(reinterpret_cast<void**>(&stage.buffer), kStageBytes, cudaHostAllocDefault),
                         "copy_to_device", "pinned staging buffer");
        QWENRT_CUDA_CALL(cudaEventCreateWithFlags(&stage.done, cudaEventDisableTiming), "copy_to_device", "");
      }
      copy_threads_ = std::make_unique<ThreadPool>(std::min(8, static_cast<int>(std::thread::hardware_concurrency())));
    }
    size_t index = 0;
    for (size_t offset = 0; offset < bytes; offset += kStageBytes, ++index) {
      Stage& stage = stages_[index % stages_.size()];
      const size_t count = std::min(kStageBytes, bytes - offset);
      if (stage.used) QWENRT_CUDA_CALL(cudaEventSynchronize(stage.done), "copy_to_device", "staging");
      copy_threads_->parallel_for(static_cast<int64_t>(count), int64_t{1} << 20, [&](int64_t begin, int64_t end) {
        std::memcpy(stage.buffer + begin, src + offset + static_cast<size_t>(begin), static_cast<size_t>(end - begin));
      });
      QWENRT_CUDA_CALL(cudaMemcpyAsync(dst + offset, stage.buffer, count, cudaMemcpyHostToDevice, stream_),
                       "copy_to_device", std::to_string(count) + " bytes");
      QWENRT_CUDA_CALL(cudaEventRecord(stage.done, stream_), "copy_to_device", "");
      stage.used = true;
    }
    QWENRT_CUDA_CALL(cudaStreamSynchronize(stream_), "copy_to_device", std::to_string(bytes) + " bytes");
  }

  // Per-step uploads (a step's batch arrays, its sampling rows): the source goes into a
  // pinned ring and the copy is issued without waiting, so the host goes on to launch the
  // step while the copy engine moves it (a wait here left the device idle for a round trip
  // per upload, several a decode step). The ring has two halves; a half is refilled only
  // after the copies from it are done (its event), which they almost always are by then.
  void upload_through_ring(char* dst, const char* src, size_t bytes) {
    if (ring_ == nullptr) {
      void* pinned = nullptr;
      QWENRT_CUDA_CALL(cudaHostAlloc(&pinned, 2 * kUploadHalfBytes, cudaHostAllocDefault), "copy_to_device",
                       "pinned upload ring");
      ring_ = static_cast<char*>(pinned);
      for (cudaEvent_t& done : ring_done_) {
        QWENRT_CUDA_CALL(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "copy_to_device", "");
      }
    }
    const size_t aligned = (bytes + 255) / 256 * 256;
    if (ring_offset_ + aligned > kUploadHalfBytes) {
      ring_half_ = 1 - ring_half_;
      ring_offset_ = 0;
      if (ring_used_[ring_half_]) {
        QWENRT_CUDA_CALL(cudaEventSynchronize(ring_done_[ring_half_]), "copy_to_device", "upload ring");
      }
    }
    char* slot = ring_ + ring_half_ * kUploadHalfBytes + ring_offset_;
    std::memcpy(slot, src, bytes);
    QWENRT_CUDA_CALL(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream_), "copy_to_device",
                     std::to_string(bytes) + " bytes");
    QWENRT_CUDA_CALL(cudaEventRecord(ring_done_[ring_half_], stream_), "copy_to_device", "upload ring");
    ring_used_[ring_half_] = true;
    ring_offset_ += aligned;
  }

  // A half holds a step's largest upload: the grammar masks of 256 rows of a 152k-id
  // vocabulary are 4.9 MB (at 2 MiB, more than 110 rows went through a blocking copy that
  // waited for the forward pass the masks are filled beside).
  static constexpr size_t kUploadHalfBytes = size_t{8} << 20;
  char* ring_ = nullptr;  // pinned, two halves
  std::array<cudaEvent_t, 2> ring_done_{};
  std::array<bool, 2> ring_used_{};
  int ring_half_ = 0;
  size_t ring_offset_ = 0;

  static constexpr size_t kStageBytes = size_t{16} << 20;
  struct Stage {
    char* buffer = nullptr;  // pinned
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  std::array<Stage, 4> stages_;
  std::unique_ptr<ThreadPool> copy_threads_;

  DType dtype_;
  int device_index_;
  std::string device_name_;
  int multiprocessors_ = 0;
  size_t max_shared_bytes_ = 0;  // per block
  cudaStream_t stream_ = nullptr;
  DeviceBuffer cublas_workspace_;
  DeviceBuffer attention_workspace_;
  DeviceBuffer status_buffer_;
  DeviceBuffer penalty_logits_;
  DeviceBuffer penalty_counts_;
  size_t penalty_rows_ = 0;
  size_t penalty_vocab_ = 0;
  DeviceBuffer sampling_histogram_;
  size_t histogram_rows_ = 0;
  DeviceBuffer score_workspace_;  // score_rows' slices, grown to the largest call
  DeviceBuffer greedy_scratch_;
  size_t greedy_rows_ = 0;
  std::array<DrawRecord, kAsyncDraws + 1> draws_{};
  int next_ticket_ = 0;
  bool recording_ = false;
  std::unique_ptr<Matmul> matmul_;
};

}  // namespace cuda

bool gpu_backend_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

std::unique_ptr<Backend> make_gpu_backend(DType dtype, int device_index) {
  return std::make_unique<cuda::CudaBackend>(dtype, device_index);
}

}  // namespace qwenrt
