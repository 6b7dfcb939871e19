// Op-level timings on Qwen2.5-7B shapes (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='*Bench*'). Each number is the median
// over 7 batches of back-to-back launches after a warm-up, timed on the host around a
// stream synchronisation; inputs rotate over several copies larger than L2 where the
// op is memory-bound. Prints bytes/s or flop/s against the H200 ceilings
// (~4.3 TB/s copy, ~790 TFLOP/s bf16 GEMM).
#include <chrono>
#include <cstdio>

#include "gpu_test_util.h"

namespace qwenrt::test {
namespace {

template <typename Fn>
double median_seconds_per_call(Backend& gpu, int calls, Fn&& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  gpu.synchronize();
  std::vector<double> samples;
  for (int rep = 0; rep < 7; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn(i);
    gpu.synchronize();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

class CudaBench : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = gpu_backend(DType::kBF16).get();
  }
  Backend& gpu() { return *backend_; }
  Backend* backend_ = nullptr;
  std::mt19937 rng_{7};
};

TEST_F(CudaBench, DISABLED_MatmulShapes) {
  const DType dt = DType::kBF16;
  struct Shape {
    const char* name;
    int k, m;
  };
  // Qwen2.5-7B: fused-free projections as the forward pass issues them.
  const Shape shapes[] = {{"q_proj", 3584, 3584},   {"k_proj", 3584, 512},
                          {"o_proj", 3584, 3584},   {"gate_proj", 3584, 18944},
                          {"down_proj", 18944, 3584}, {"lm_head(f32)", 3584, 152064}};
  std::printf("%-14s %6s %10s %10s %12s\n", "matmul", "n", "us", "GB/s", "TFLOP/s");
  for (const Shape& s : shapes) {
    const size_t weight_bytes = static_cast<size_t>(s.k) * s.m * 2;
    const int copies = std::max<int>(1, static_cast<int>((size_t{256} << 20) / weight_bytes) + 1);
    std::vector<DeviceTensor> weights;
    for (int c = 0; c < copies; ++c)
      weights.push_back(DeviceTensor::from(gpu(), dt, s.m, s.k, random_values(rng_, static_cast<size_t>(s.k) * s.m, 0.02f, dt)));
    for (int n : {1, 8, 64, 512, 2048}) {
      auto x = DeviceTensor::from(gpu(), dt, n, s.k, random_values(rng_, static_cast<size_t>(n) * s.k, 1.f, dt));
      const bool f32 = std::string(s.name).find("f32") != std::string::npos;
      auto out = DeviceTensor(gpu(), f32 ? DType::kF32 : dt, n, s.m);
      const double t = median_seconds_per_call(gpu(), 20, [&](int i) {
        gpu().matmul(x.t, weights[static_cast<size_t>(i) % weights.size()].t, out.t);
      });
      const double bytes = static_cast<double>(weight_bytes) + x.t.bytes() + out.t.bytes();
      const double flops = 2.0 * n * s.k * s.m;
      std::printf("%-14s %6d %10.1f %10.0f %12.1f\n", s.name, n, t * 1e6, bytes / t / 1e9, flops / t / 1e12);
    }
  }
}

TEST_F(CudaBench, DISABLED_NormSiluEpilogue) {
  const DType dt = DType::kBF16;
  for (int n : {1, 512, 4096}) {
    auto x = DeviceTensor::from(gpu(), dt, n, 3584, random_values(rng_, static_cast<size_t>(n) * 3584, 1.f, dt));
    auto delta = DeviceTensor::from(gpu(), dt, n, 3584, random_values(rng_, static_cast<size_t>(n) * 3584, 1.f, dt));
    auto w = DeviceTensor::from(gpu(), dt, 1, 3584, random_values(rng_, 3584, 0.1f, dt, 1.f));
    auto out = DeviceTensor(gpu(), dt, n, 3584);
    const double t = median_seconds_per_call(gpu(), 50, [&](int) { gpu().add_rmsnorm(x.t, delta.t, w.t, 1e-6f, out.t); });
    std::printf("add_rmsnorm n=%-5d %8.2f us %8.0f GB/s (4 row passes)\n", n, t * 1e6, 4.0 * x.t.bytes() / t / 1e9);
    auto gate = DeviceTensor::from(gpu(), dt, n, 18944, random_values(rng_, static_cast<size_t>(n) * 18944, 1.f, dt));
    auto up = DeviceTensor::from(gpu(), dt, n, 18944, random_values(rng_, static_cast<size_t>(n) * 18944, 1.f, dt));
    auto act = DeviceTensor(gpu(), dt, n, 18944);
    const double ts = median_seconds_per_call(gpu(), 50, [&](int) { gpu().silu_mul(gate.t, up.t, act.t); });
    std::printf("silu_mul    n=%-5d %8.2f us %8.0f GB/s\n", n, ts * 1e6, 3.0 * gate.t.bytes() / ts / 1e9);
  }
}

// Decode attention over the paged cache: bytes = K and V of every context token.
TEST_F(CudaBench, DISABLED_AttentionDecodeAndPrefill) {
  const DType dt = DType::kBF16;
  const int hq = 28, hkv = 4, d = 128, block = 16;
  struct Run {
    int seqs, context, fresh;
  };
  const Run runs[] = {{1, 512, 1},   {1, 4096, 1},   {1, 32768, 1}, {32, 1024, 1},
                      {128, 2048, 1}, {1, 512, 512}, {1, 2048, 2048}, {4, 4096, 1024}};
  for (const Run& r : runs) {
    const int blocks_per_seq = (r.context + block - 1) / block;
    const int num_blocks = r.seqs * blocks_per_seq;
    std::vector<int32_t> tables(static_cast<size_t>(num_blocks));
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng_);
    std::vector<int32_t> positions, seq_starts{0}, ctx;
    for (int s = 0; s < r.seqs; ++s) {
      for (int p = r.context - r.fresh; p < r.context; ++p) positions.push_back(p);
      seq_starts.push_back(static_cast<int32_t>(positions.size()));
      ctx.push_back(r.context);
    }
    const int n = static_cast<int>(positions.size());
    auto d_tables = upload_ints(gpu(), tables);
    auto d_pos = upload_ints(gpu(), positions);
    auto d_starts = upload_ints(gpu(), seq_starts);
    auto d_ctx = upload_ints(gpu(), ctx);
    BatchView b;
    b.n_tokens = n;
    b.n_seqs = r.seqs;
    b.max_new_tokens = r.fresh;
    b.max_context_len = r.context;
    b.max_blocks_per_seq = blocks_per_seq;
    b.positions = static_cast<const int32_t*>(d_pos.data());
    b.seq_starts = static_cast<const int32_t*>(d_starts.data());
    b.context_lens = static_cast<const int32_t*>(d_ctx.data());
    b.block_tables = static_cast<const int32_t*>(d_tables.data());
    const int64_t slots = static_cast<int64_t>(num_blocks) * block;
    auto kc = DeviceTensor::from(gpu(), dt, slots, hkv * d, random_values(rng_, static_cast<size_t>(slots) * hkv * d, 1.f, dt));
    auto vc = DeviceTensor::from(gpu(), dt, slots, hkv * d, random_values(rng_, static_cast<size_t>(slots) * hkv * d, 1.f, dt));
    auto q = DeviceTensor::from(gpu(), dt, n, hq * d, random_values(rng_, static_cast<size_t>(n) * hq * d, 1.f, dt));
    auto out = DeviceTensor(gpu(), dt, n, hq * d);
    KvGeometry geo{num_blocks, block, hkv, d, dt};
    AttentionParams attn{hq, hkv, d, 1.f / std::sqrt(static_cast<float>(d)), 0};
    const double t = median_seconds_per_call(gpu(), 10, [&](int) {
      gpu().attention(b, attn, q.t, geo, KvLayer{kc.t.data, vc.t.data}, out.t);
    });
    const double kv_bytes = 2.0 * r.seqs * r.context * hkv * d * 2;
    // Causal flops: 4·d per (query head, visible key).
    double pairs = 0;
    for (int p = r.context - r.fresh; p < r.context; ++p) pairs += p + 1;
    const double flops = 4.0 * d * hq * pairs * r.seqs;
    std::printf("attention seqs=%-4d ctx=%-6d new=%-5d %9.1f us %8.0f GB/s(KV) %7.1f TFLOP/s\n", r.seqs,
                r.context, r.fresh, t * 1e6, kv_bytes / t / 1e9, flops / t / 1e12);
  }
}

TEST_F(CudaBench, DISABLED_Sampling) {
  const int vocab = 152064;
  for (int rows : {1, 32}) {
    auto logits = DeviceTensor::from(gpu(), DType::kF32, rows, vocab,
                                     random_values(rng_, static_cast<size_t>(rows) * vocab, 3.f, DType::kF32));
    auto ids = upload_ints(gpu(), std::vector<int32_t>(rows, 0));
    SamplingParams greedy;
    SamplingParams top;
    top.temperature = 0.7f;
    top.top_k = 20;
    top.top_p = 0.8f;
    SamplingParams nucleus;
    nucleus.temperature = 1.f;
    nucleus.top_p = 0.95f;
    for (const auto& [name, p] : {std::pair{"greedy", greedy}, std::pair{"t0.7 k20 p0.8", top},
                                  std::pair{"t1 p0.95", nucleus}}) {
      const double t = median_seconds_per_call(gpu(), 20, [&](int i) {
        gpu().sample(logits.t, p, static_cast<uint64_t>(i), nullptr, nullptr, 0, static_cast<int32_t*>(ids.data()));
      });
      std::printf("sample rows=%-3d %-14s %8.1f us (incl. status read-back)\n", rows, name, t * 1e6);
    }
  }
}

}  // namespace
}  // namespace qwenrt::test
