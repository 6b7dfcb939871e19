// Op-level timings on Qwen2.5-7B shapes (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='*Bench*'). Each number is the median
// over 7 batches of back-to-back launches after a warm-up, timed on the host around a
// stream synchronisation; inputs rotate over several copies larger than L2 where the
// op is memory-bound. Prints bytes/s or flop/s against the H200 ceilings
// (~4.3 TB/s copy, ~790 TFLOP/s bf16 GEMM).
#include <chrono>
#include <cstdio>
#include <numeric>
#include <span>

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

class CudaBench : public GpuFixture<> {
 protected:
  std::mt19937 rng_{7};
};

struct MatmulShape {
  const char* name;  // "(f32)" in it: fp32 output
  int k, m;
};

// Each shape at each row count n: weights rotated over copies larger than L2 (cold, as a
// decode step reads them), `calls` launches back to back a sample.
void bench_matmuls(Backend& gpu, std::mt19937& rng, std::span<const MatmulShape> shapes, std::span<const int> ns,
                   int calls, int min_copies) {
  const DType dt = DType::kBF16;
  std::printf("%-14s %6s %10s %10s %12s\n", "matmul", "n", "us", "GB/s", "TFLOP/s");
  for (const MatmulShape& s : shapes) {
    const size_t weight_bytes = static_cast<size_t>(s.k) * s.m * 2;
    const int copies = std::max<int>(min_copies, static_cast<int>((size_t{256} << 20) / weight_bytes) + 1);
    std::vector<DeviceTensor> weights;
    for (int c = 0; c < copies; ++c)
      weights.push_back(DeviceTensor::from(gpu, dt, s.m, s.k, random_values(rng, static_cast<size_t>(s.k) * s.m, 0.02f, dt)));
    for (int n : ns) {
      auto x = DeviceTensor::from(gpu, dt, n, s.k, random_values(rng, static_cast<size_t>(n) * s.k, 1.f, dt));
      const bool f32 = std::string(s.name).find("f32") != std::string::npos;
      auto out = DeviceTensor(gpu, f32 ? DType::kF32 : dt, n, s.m);
      const double t = median_seconds_per_call(gpu, calls, [&](int i) {
        gpu.matmul(x.t, weights[static_cast<size_t>(i) % weights.size()].t, out.t);
      });
      const double bytes = static_cast<double>(weight_bytes) + x.t.bytes() + out.t.bytes();
      const double flops = 2.0 * n * s.k * s.m;
      std::printf("%-14s %6d %10.1f %10.0f %12.1f\n", s.name, n, t * 1e6, bytes / t / 1e9, flops / t / 1e12);
    }
  }
}

TEST_F(CudaBench, DISABLED_MatmulShapes) {
  // Qwen2.5-7B: fused-free projections as the forward pass issues them.
  const MatmulShape shapes[] = {{"q_proj", 3584, 3584},     {"k_proj", 3584, 512},
                                {"qkv_proj", 3584, 4608},   {"o_proj", 3584, 3584},
                                {"gate_proj", 3584, 18944}, {"gate_up_proj", 3584, 37888},
                                {"down_proj", 18944, 3584}, {"lm_head(f32)", 3584, 152064}};
  const int ns[] = {1, 2, 3, 4, 5, 8, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 2048};
  bench_matmuls(gpu(), rng_, shapes, ns, 20, 1);
}

// The 7B's gated MLP input at the row counts of the server's steps: gate and up as two
// products and silu_mul (the path without the fused kernel) against matmul_silu_mul (one
// kernel on compute capability 9.0, at every row count: QWENRT_GATED_PRODUCT=on). Weights
// rotated over two copies (543 MB, past L2).
TEST_F(CudaBench, DISABLED_GatedProduct) {
  const ScopedEnv every_shape("QWENRT_GATED_PRODUCT", "on");
  const DType dt = DType::kBF16;
  const int k = 3584, m = 18944;
  std::vector<DeviceTensor> weights;
  for (int c = 0; c < 2; ++c)
    weights.push_back(
        DeviceTensor::from(gpu(), dt, 2 * m, k, random_values(rng_, static_cast<size_t>(2 * m) * k, 0.02f, dt)));
  std::printf("%-6s %12s %10s %12s %10s %8s\n", "n", "two+silu us", "TFLOP/s", "fused us", "TFLOP/s", "ratio");
  for (int n : {17, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1280, 2048}) {
    auto x = DeviceTensor::from(gpu(), dt, n, k, random_values(rng_, static_cast<size_t>(n) * k, 1.f, dt));
    auto gate = DeviceTensor(gpu(), dt, n, m);
    auto up = DeviceTensor(gpu(), dt, n, m);
    auto act = DeviceTensor(gpu(), dt, n, m);
    const double two = median_seconds_per_call(gpu(), 20, [&](int i) {
      const Tensor& w = weights[static_cast<size_t>(i) % weights.size()].t;
      gpu().matmul(x.t, w.row_slice(0, m), gate.t);
      gpu().matmul(x.t, w.row_slice(m, m), up.t);
      gpu().silu_mul(gate.t, up.t, act.t);
    });
    bool fused = true;
    const double one = median_seconds_per_call(gpu(), 20, [&](int i) {
      fused = gpu().matmul_silu_mul(x.t, weights[static_cast<size_t>(i) % weights.size()].t, act.t) && fused;
    });
    const double flops = 2.0 * n * k * 2.0 * m;
    std::printf("%-6d %12.1f %10.1f %12.1f %10.1f %8.3f%s\n", n, two * 1e6, flops / two / 1e12, one * 1e6,
                flops / one / 1e12, one / two, fused ? "" : "  (not fused: no such kernel here)");
  }
}

// One row through the 7B's (and two of the 0.5B's) products as plain matrix products.
TEST_F(CudaBench, DISABLED_MatvecOneRow) {
  const MatmulShape shapes[] = {{"o_proj", 3584, 3584},       {"qkv_proj", 3584, 4608},
                                {"down_proj", 18944, 3584},   {"gate_up_proj", 3584, 37888},
                                {"0.5b_down", 4864, 896},     {"0.5b_gate_up", 896, 9728},
                                {"lm_head", 3584, 152064},    {"0.5b_lm_head", 896, 151936},
                                {"0.5b_qkv", 896, 1152},      {"0.5b_o", 896, 896}};
  const int ns[] = {1};
  bench_matmuls(gpu(), rng_, shapes, ns, 40, 2);
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

// A paged attention problem on Qwen2.5-7B heads: `seqs` sequences of `context` cached
// tokens, the last `fresh` of them new, blocks scattered over the pool.
struct AttentionProblem {
  int seqs, context, fresh;
  DeviceBuffer tables, positions, starts, lens, token_seq;
  DeviceTensor k_cache, v_cache, q, out;
  BatchView batch;
  KvGeometry geometry;
  AttentionParams attn;

  AttentionProblem(Backend& gpu, std::mt19937& rng, int n_seqs, int ctx, int new_tokens)
      : seqs(n_seqs), context(ctx), fresh(new_tokens) {
    const DType dt = DType::kBF16;
    const int hq = 28, hkv = 4, d = 128, block = 16;
    const int blocks_per_seq = (context + block - 1) / block;
    const int num_blocks = seqs * blocks_per_seq;
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int32_t> pos, seq_starts{0}, ctx_lens, owner;
    for (int s = 0; s < seqs; ++s) {
      for (int p = context - fresh; p < context; ++p) {
        pos.push_back(p);
        owner.push_back(s);
      }
      seq_starts.push_back(static_cast<int32_t>(pos.size()));
      ctx_lens.push_back(context);
    }
    const int n = static_cast<int>(pos.size());
    tables = upload_ints(gpu, table);
    positions = upload_ints(gpu, pos);
    starts = upload_ints(gpu, seq_starts);
    lens = upload_ints(gpu, ctx_lens);
    token_seq = upload_ints(gpu, owner);
    batch.n_tokens = n;
    batch.n_seqs = seqs;
    batch.max_new_tokens = fresh;
    batch.max_context_len = context;
    batch.max_blocks_per_seq = blocks_per_seq;
    batch.positions = static_cast<const int32_t*>(positions.data());
    batch.seq_starts = static_cast<const int32_t*>(starts.data());
    batch.context_lens = static_cast<const int32_t*>(lens.data());
    batch.token_seq = static_cast<const int32_t*>(token_seq.data());
    batch.block_tables = static_cast<const int32_t*>(tables.data());
    const int64_t slots = static_cast<int64_t>(num_blocks) * block;
    k_cache = DeviceTensor::from(gpu, dt, slots, hkv * d, random_values(rng, static_cast<size_t>(slots) * hkv * d, 1.f, dt));
    v_cache = DeviceTensor::from(gpu, dt, slots, hkv * d, random_values(rng, static_cast<size_t>(slots) * hkv * d, 1.f, dt));
    q = DeviceTensor::from(gpu, dt, n, hq * d, random_values(rng, static_cast<size_t>(n) * hq * d, 1.f, dt));
    out = DeviceTensor(gpu, dt, n, hq * d);
    geometry = KvGeometry{num_blocks, block, hkv, d, dt};
    attn = AttentionParams{hq, hkv, d, 1.f / std::sqrt(static_cast<float>(d)), 0};
  }
  void run(Backend& gpu) { gpu.attention(batch, attn, q.t, geometry, KvLayer{k_cache.t.data, v_cache.t.data}, out.t); }
  double kv_bytes() const { return 2.0 * seqs * context * geometry.n_kv_heads * geometry.head_dim * 2; }
  double flops() const {
    double pairs = 0;  // causal: 4·d flops per (query head, visible key)
    for (int p = context - fresh; p < context; ++p) pairs += p + 1;
    return 4.0 * attn.head_dim * attn.n_heads * pairs * seqs;
  }
};

struct AttentionShape {
  int seqs, context, fresh;
};
// Decode: one sequence at growing contexts, and batches as a server runs them (256 streams
// of 128-token prompts sit at 128 to 256 tokens), 1 x 8,200 as a decode after an
// 8,192-token prompt reads it (64 splits of 129 keys: three tiles each); then prompts.
const AttentionShape kAttentionShapes[] = {{1, 512, 1},     {1, 4096, 1},    {1, 8192, 1},   {1, 32768, 1},
                                           {32, 1024, 1},   {128, 2048, 1},  {256, 192, 1},  {256, 256, 1},
                                           {64, 512, 1},    {1, 1024, 1},    {1, 8200, 1},   {1, 512, 512},
                                           {1, 2048, 2048}, {4, 4096, 1024},
                                           // a few new tokens after a cached prefix
                                           {1, 64, 16},     {1, 1040, 4},    {1, 1040, 16},  {1, 1040, 32},
                                           {1, 1040, 64},   {1, 4096, 16},   {3, 1040, 5}};

TEST_F(CudaBench, DISABLED_AttentionDecodeAndPrefill) {
  for (const AttentionShape& shape : kAttentionShapes) {
    AttentionProblem problem(gpu(), rng_, shape.seqs, shape.context, shape.fresh);
    const double t = median_seconds_per_call(gpu(), 10, [&](int) { problem.run(gpu()); });
    std::printf("attention seqs=%-4d ctx=%-6d new=%-5d %9.1f us %8.0f GB/s(KV) %7.1f TFLOP/s\n",
                shape.seqs, shape.context, shape.fresh, t * 1e6, problem.kv_bytes() / t / 1e9,
                problem.flops() / t / 1e12);
  }
}

// Each attention shape twice, untimed, for a profiler that measures kernel durations on
// the device (host launch overhead excluded).
TEST_F(CudaBench, DISABLED_AttentionForProfiler) {
  for (const AttentionShape& shape : kAttentionShapes) {
    AttentionProblem problem(gpu(), rng_, shape.seqs, shape.context, shape.fresh);
    problem.run(gpu());
    problem.run(gpu());
    gpu().synchronize();
  }
}

TEST_F(CudaBench, DISABLED_Sampling) {
  const int vocab = 152064;
  for (int rows : {1, 32, 256}) {
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

namespace qwenrt::test {
namespace {

// One Qwen2.5-7B decode layer's ops at batch 1 (context 600), the lm_head and the samplers,
// each issued twice, untimed: the profiler's per-kernel device durations, summed, give
// the decode step's device time without host launch overhead.
TEST(CudaProfile, DISABLED_DecodeStepForProfiler) {
  QWENRT_REQUIRE_GPU();
  Backend& gpu = *gpu_backend(DType::kBF16);
  std::mt19937 rng(3);
  const DType dt = DType::kBF16;
  const int hidden = 3584, inter = 18944, hq = 28, hkv = 4, d = 128, vocab = 152064;
  auto weight = [&](int rows, int cols) {
    return DeviceTensor::from(gpu, dt, rows, cols, random_values(rng, static_cast<size_t>(rows) * cols, 0.02f, dt));
  };
  auto wq = weight(hq * d, hidden), wk = weight(hkv * d, hidden), wv = weight(hkv * d, hidden);
  auto wo = weight(hidden, hq * d), wg = weight(inter, hidden), wu = weight(inter, hidden);
  auto wd = weight(hidden, inter), lm = weight(vocab, hidden);
  auto x = DeviceTensor::from(gpu, dt, 1, hidden, random_values(rng, hidden, 1.f, dt));
  auto o = DeviceTensor::from(gpu, dt, 1, hidden, random_values(rng, hidden, 1.f, dt));
  auto norm = DeviceTensor::from(gpu, dt, 1, hidden, random_values(rng, hidden, 0.1f, dt, 1.f));
  auto h = DeviceTensor(gpu, dt, 1, hidden);
  auto q = DeviceTensor(gpu, dt, 1, hq * d), k = DeviceTensor(gpu, dt, 1, hkv * d), v = DeviceTensor(gpu, dt, 1, hkv * d);
  auto qb = DeviceTensor::from(gpu, dt, 1, hq * d, random_values(rng, hq * d, 0.1f, dt));
  auto kb = DeviceTensor::from(gpu, dt, 1, hkv * d, random_values(rng, hkv * d, 0.1f, dt));
  auto vb = DeviceTensor::from(gpu, dt, 1, hkv * d, random_values(rng, hkv * d, 0.1f, dt));
  auto gate = DeviceTensor(gpu, dt, 1, inter), up = DeviceTensor(gpu, dt, 1, inter);
  auto logits = DeviceTensor(gpu, DType::kF32, 1, vocab);
  std::vector<float> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(1e6f, -2.f * i / d);
  auto freq = DeviceTensor::from(gpu, DType::kF32, 1, d / 2, inv_freq);
  AttentionProblem attention(gpu, rng, 1, 600, 1);
  auto slot = upload_ints(gpu, std::vector<int32_t>{599});
  BatchView batch = attention.batch;
  batch.slot_mapping = static_cast<const int32_t*>(slot.data());
  QkvEpilogue epi;
  epi.q_bias = qb.t;
  epi.k_bias = kb.t;
  epi.v_bias = vb.t;
  epi.inv_freq = static_cast<const float*>(freq.t.data);
  auto ids = upload_ints(gpu, std::vector<int32_t>{0});
  SamplingParams greedy, top;
  top.temperature = 0.7f;
  top.top_k = 20;
  top.top_p = 0.8f;
  for (int rep = 0; rep < 2; ++rep) {
    gpu.add_rmsnorm(x.t, o.t, norm.t, 1e-6f, h.t);
    gpu.matmul(h.t, wq.t, q.t);
    gpu.matmul(h.t, wk.t, k.t);
    gpu.matmul(h.t, wv.t, v.t);
    gpu.qkv_rope_kvwrite(batch, attention.attn, epi, q.t, k.t, v.t, attention.geometry,
                         KvLayer{attention.k_cache.t.data, attention.v_cache.t.data});
    gpu.attention(batch, attention.attn, q.t, attention.geometry,
                  KvLayer{attention.k_cache.t.data, attention.v_cache.t.data}, attention.out.t);
    gpu.matmul(attention.out.t, wo.t, o.t);
    gpu.add_rmsnorm(x.t, o.t, norm.t, 1e-6f, h.t);
    gpu.matmul(h.t, wg.t, gate.t);
    gpu.matmul(h.t, wu.t, up.t);
    gpu.silu_mul(gate.t, up.t, gate.t);
    gpu.matmul(gate.t, wd.t, o.t);
    gpu.matmul(h.t, lm.t, logits.t);
    gpu.sample(logits.t, greedy, 0, nullptr, nullptr, 0, static_cast<int32_t*>(ids.data()));
    gpu.sample(logits.t, top, 0, nullptr, nullptr, 0, static_cast<int32_t*>(ids.data()));
  }
  gpu.synchronize();
}

}  // namespace
}  // namespace qwenrt::test
