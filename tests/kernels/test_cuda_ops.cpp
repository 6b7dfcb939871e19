// CUDA ops against naive host formulas (double precision on the device's rounded inputs),
// on awkward sizes, with every output poisoned with NaN before the op runs.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

#include "gpu_test_util.h"

namespace qwenrt::test {
namespace {

class CudaOps : public GpuFixture<::testing::TestWithParam<DType>> {
 protected:
  DType gpu_dtype() const override { return GetParam(); }
  DType dtype() const { return GetParam(); }
  std::mt19937 rng_{1234};
};

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

// ---------------------------------------------------------------- matmul
TEST_P(CudaOps, MatmulMatchesNaiveProduct) {
  struct Shape {
    int n, k, m;
    bool f32_out;
  };
  const Shape shapes[] = {{1, 896, 4864, false}, {1, 64, 33, false},    {5, 136, 200, false},
                          {17, 1000, 513, false}, {64, 256, 1024, false}, {3, 130, 77, true},
                          {1, 896, 1519, true},   {33, 512, 300, true}, {1, 200, 2050, false},
                          {1, 64, 2051, true},    {2, 136, 2049, false},
                          // one row over many waves of blocks (an lm_head's shape, narrower k)
                          {1, 136, 40003, true},
                          // 5-16 rows on tensor cores (k a multiple of 64, w's rows of 16): one
                          // chunk of k, chunks not a multiple of the warps', the 7B's shapes
                          {5, 64, 16, false},     {8, 1216, 48, true},    {9, 3584, 512, false},
                          {16, 896, 4864, false}, {12, 18944, 64, true}, {16, 3584, 1040, true},
                          // 2-4 rows (tensor cores too), 17-64 (the matrix library)
                          {2, 3584, 512, false},  {3, 896, 64, true},    {4, 18944, 48, false},
                          {24, 1216, 80, false},  {32, 3584, 96, true},  {40, 640, 32, false},
                          {64, 896, 128, true}};
  for (const Shape& s : shapes) {
    const auto x = random_values(rng_, static_cast<size_t>(s.n) * s.k, 1.f, dtype());
    const auto w = random_values(rng_, static_cast<size_t>(s.m) * s.k, 0.05f, dtype());
    auto dx = DeviceTensor::from(gpu(), dtype(), s.n, s.k, x);
    auto dw = DeviceTensor::from(gpu(), dtype(), s.m, s.k, w);
    const DType out_dtype = s.f32_out ? DType::kF32 : dtype();
    auto out = DeviceTensor::poisoned(gpu(), out_dtype, s.n, s.m);
    gpu().matmul(dx.t, dw.t, out.t);
    std::vector<double> ref(static_cast<size_t>(s.n) * s.m);
    for (int i = 0; i < s.n; ++i)
      for (int j = 0; j < s.m; ++j) {
        double acc = 0;
        for (int kk = 0; kk < s.k; ++kk)
          acc += static_cast<double>(x[static_cast<size_t>(i) * s.k + kk]) * w[static_cast<size_t>(j) * s.k + kk];
        ref[static_cast<size_t>(i) * s.m + j] = acc;
      }
    const Tolerance tol = tolerance_for(out_dtype);
    expect_close(download(gpu(), out.t), ref, std::max(tol.rel_norm, 1e-4), tol.rel_elem, 1e-3,
                 "matmul n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                     " m=" + std::to_string(s.m));
  }
}

// A product whose x the op just before wrote, with no synchronisation between them, as the
// forward pass runs them: the small-row and matrix-vector kernels start their weight loads
// before the chained launch's wait, and must read x only after it. x is poisoned with NaN
// before the norm writes it, so a read ahead of the wait shows.
TEST_P(CudaOps, MatmulReadsTheXTheOpBeforeItWrote) {
  const int k = 3584, m = 4608;
  for (const int n : {1, 2, 3, 4, 5, 8, 16}) {
    const auto x = random_values(rng_, static_cast<size_t>(n) * k, 1.f, dtype());
    const auto w = random_values(rng_, static_cast<size_t>(m) * k, 0.05f, dtype());
    const auto g = random_values(rng_, k, 0.1f, dtype(), 1.f);
    auto dx = DeviceTensor::from(gpu(), dtype(), n, k, x);
    auto dw = DeviceTensor::from(gpu(), dtype(), m, k, w);
    auto dg = DeviceTensor::from(gpu(), dtype(), 1, k, g);
    auto normed = DeviceTensor::poisoned(gpu(), dtype(), n, k);
    auto out = DeviceTensor::poisoned(gpu(), dtype(), n, m);
    for (int round = 0; round < 3; ++round) {
      gpu().rmsnorm(dx.t, dg.t, 1e-6f, normed.t);
      gpu().matmul(normed.t, dw.t, out.t);
    }
    const std::vector<float> h = download(gpu(), normed.t);
    std::vector<double> ref(static_cast<size_t>(n) * m);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        double acc = 0;
        for (int kk = 0; kk < k; ++kk)
          acc += static_cast<double>(h[static_cast<size_t>(i) * k + kk]) * w[static_cast<size_t>(j) * k + kk];
        ref[static_cast<size_t>(i) * m + j] = acc;
      }
    const Tolerance tol = tolerance_for(dtype());
    expect_close(download(gpu(), out.t), ref, std::max(tol.rel_norm, 1e-4), tol.rel_elem, 1e-3,
                 "norm then matmul, n=" + std::to_string(n));
  }
}

// silu(x · gateᵀ) * (x · upᵀ) with gate_up = [gate; up], in double on the host.
std::vector<double> gated_ref(const std::vector<float>& x, const std::vector<float>& w, int n, int k, int m) {
  auto dot = [&](int r, int row) {
    double acc = 0;
    for (int c = 0; c < k; ++c)
      acc += static_cast<double>(x[static_cast<size_t>(r) * k + c]) * w[static_cast<size_t>(row) * k + c];
    return acc;
  };
  std::vector<double> ref(static_cast<size_t>(n) * m);
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < m; ++j) {
      const double gate = dot(r, j);
      ref[static_cast<size_t>(r) * m + j] = gate / (1 + std::exp(-gate)) * dot(r, m + j);
    }
  return ref;
}

// The gated MLP input of a decode step from one [gate; up] matrix against its formula.
TEST_P(CudaOps, GatedMatvecMatchesFormula) {
  for (int k : {896, 3584}) {
    const int m = k == 896 ? 137 : 136;  // an odd count leaves a pair block half empty
    const auto x = random_values(rng_, static_cast<size_t>(k), 1.f, dtype());
    const auto w = random_values(rng_, static_cast<size_t>(2 * m) * k, 0.05f, dtype());
    auto dx = DeviceTensor::from(gpu(), dtype(), 1, k, x);
    auto dw = DeviceTensor::from(gpu(), dtype(), 2 * m, k, w);
    auto out = DeviceTensor::poisoned(gpu(), dtype(), 1, m);
    ASSERT_TRUE(gpu().matmul_silu_mul(dx.t, dw.t, out.t));
    const Tolerance tol = tolerance_for(dtype());
    expect_close(download(gpu(), out.t), gated_ref(x, w, 1, k, m), std::max(tol.rel_norm, 1e-4), tol.rel_elem,
                 1e-3, "gated matvec k=" + std::to_string(k));
  }
}

// A compute capability 9.0 device and a build with code for it (the kernel is built for
// sm_90a where the build targets 90).
bool gated_kernel_device() {
  const GpuRuntimeInfo gpus = query_gpus();
  if (gpus.devices.empty() || gpus.devices[0].compute_major != 9 || gpus.devices[0].compute_minor != 0) return false;
  std::istringstream archs(gpus.build_architectures);
  std::string arch;
  while (archs >> arch)
    if (arch.rfind("90", 0) == 0) return true;
  return false;
}

// The same op for many rows (compute capability 9.0: one kernel, tiles of 128 rows by 64 or
// 128 columns with gate and up side by side), every shape it takes (QWENRT_GATED_PRODUCT=on):
// row counts that leave a tile part empty, one and several tiles of columns, k of one and
// many steps, and blocks that take several tiles each (twice the multiprocessors' count of
// tiles or more, with k steps not a multiple of the stages: the stage ring and the
// accumulators carried from tile to tile). A shape the kernel does not take
// (and every shape on other devices) is refused, and the caller's two products and
// silu_mul run instead.
TEST_P(CudaOps, GatedProductForManyRowsMatchesFormula) {
  const ScopedEnv every_shape("QWENRT_GATED_PRODUCT", "on");
  const bool hopper = gated_kernel_device();
  struct Shape {
    int n, k, m;
  };
  const Shape shapes[] = {{17, 64, 128},   {128, 128, 256},  {129, 192, 128},  {300, 256, 384},
                          {64, 3584, 512}, {256, 896, 1024}, {1000, 64, 128},  {40, 3584, 1152},
                          {77, 128, 192}, {200, 192, 16896}, {257, 320, 6144}};
  for (const Shape& s : shapes) {
    const auto x = random_values(rng_, static_cast<size_t>(s.n) * s.k, 1.f, dtype());
    const auto w = random_values(rng_, static_cast<size_t>(2 * s.m) * s.k, 0.05f, dtype());
    auto dx = DeviceTensor::from(gpu(), dtype(), s.n, s.k, x);
    auto dw = DeviceTensor::from(gpu(), dtype(), 2 * s.m, s.k, w);
    auto out = DeviceTensor::poisoned(gpu(), dtype(), s.n, s.m);
    const std::string what = "gated product n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                             " m=" + std::to_string(s.m);
    const bool ran = gpu().matmul_silu_mul(dx.t, dw.t, out.t);
    EXPECT_EQ(ran, hopper) << what;
    if (!ran) continue;
    // Twice over the same output: each run writes every element (no accumulation left over).
    ASSERT_TRUE(gpu().matmul_silu_mul(dx.t, dw.t, out.t));
    const Tolerance tol = tolerance_for(dtype());
    expect_close(download(gpu(), out.t), gated_ref(x, w, s.n, s.k, s.m), std::max(tol.rel_norm, 1e-4),
                 tol.rel_elem, 1e-3, what);
  }
  // Shapes it refuses: columns not a multiple of 64, k not a multiple of 64, 16 rows.
  for (const Shape& s : {Shape{64, 64, 136}, Shape{64, 96, 128}, Shape{16, 64, 128}}) {
    auto dx = DeviceTensor::from(gpu(), dtype(), s.n, s.k,
                                 random_values(rng_, static_cast<size_t>(s.n) * s.k, 1.f, dtype()));
    auto dw = DeviceTensor::from(gpu(), dtype(), 2 * s.m, s.k,
                                 random_values(rng_, static_cast<size_t>(2 * s.m) * s.k, 0.05f, dtype()));
    auto out = DeviceTensor::poisoned(gpu(), dtype(), s.n, s.m);
    EXPECT_FALSE(gpu().matmul_silu_mul(dx.t, dw.t, out.t)) << s.n << " x " << s.k << " -> " << s.m;
  }
}

// By default the kernel takes only the shapes where it measured faster (256-384 rows of a
// wide MLP): there its output matches the two products and silu_mul it replaces; a shape
// outside them is refused.
TEST_P(CudaOps, GatedProductByDefaultOnlyWhereItPays) {
  const ScopedEnv chosen("QWENRT_GATED_PRODUCT", "auto");
  const bool hopper = gated_kernel_device();
  {
    const int n = 64, k = 256, m = 1024;
    auto dx = DeviceTensor::from(gpu(), dtype(), n, k, random_values(rng_, static_cast<size_t>(n) * k, 1.f, dtype()));
    auto dw = DeviceTensor::from(gpu(), dtype(), 2 * m, k,
                                 random_values(rng_, static_cast<size_t>(2 * m) * k, 0.05f, dtype()));
    auto out = DeviceTensor::poisoned(gpu(), dtype(), n, m);
    EXPECT_FALSE(gpu().matmul_silu_mul(dx.t, dw.t, out.t));
  }
  const int n = 256, k = 2048, m = 8192;
  auto dx = DeviceTensor::from(gpu(), dtype(), n, k, random_values(rng_, static_cast<size_t>(n) * k, 1.f, dtype()));
  auto dw = DeviceTensor::from(gpu(), dtype(), 2 * m, k,
                               random_values(rng_, static_cast<size_t>(2 * m) * k, 0.02f, dtype()));
  auto out = DeviceTensor::poisoned(gpu(), dtype(), n, m);
  ASSERT_EQ(gpu().matmul_silu_mul(dx.t, dw.t, out.t), hopper);
  if (!hopper) return;
  auto gate = DeviceTensor::poisoned(gpu(), dtype(), n, m);
  auto up = DeviceTensor::poisoned(gpu(), dtype(), n, m);
  auto act = DeviceTensor::poisoned(gpu(), dtype(), n, m);
  gpu().matmul(dx.t, dw.t.row_slice(0, m), gate.t);
  gpu().matmul(dx.t, dw.t.row_slice(m, m), up.t);
  gpu().silu_mul(gate.t, up.t, act.t);
  const std::vector<float> two = download(gpu(), act.t);
  const std::vector<double> ref(two.begin(), two.end());
  // Both are within the dtype's tolerance of the formula (the test above, MatmulMatchesNaiveProduct
  // and the silu_mul test): twice that apart at most.
  const Tolerance tol = tolerance_for(dtype());
  expect_close(download(gpu(), out.t), ref, 2 * tol.rel_norm, 2 * tol.rel_elem, 1e-2,
               "gated product against two products and silu_mul");
}

// ---------------------------------------------------------------- norms
std::vector<double> rmsnorm_ref(const std::vector<float>& x, const std::vector<float>& w, int rows,
                                int cols, float eps) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int c = 0; c < cols; ++c) ss += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] * inv * w[c];
  }
  return out;
}

TEST_P(CudaOps, RmsnormAndAddRmsnorm) {
  // 1, 2 and 4 chunks a thread in registers, rows re-read in a second pass (8,200 and
  // 1,027 scalar elements), odd widths.
  const int shapes[][2] = {{1, 896}, {3, 3584}, {17, 1000}, {2, 7}, {5, 1027}, {2, 8200}, {1, 5120}};
  for (const auto& shape : shapes) {
    const int rows = shape[0], cols = shape[1];
    const float eps = 1e-6f;
    const auto x = random_values(rng_, static_cast<size_t>(rows) * cols, 2.f, dtype());
    const auto w = random_values(rng_, static_cast<size_t>(cols), 0.3f, dtype(), 1.f);
    const auto delta = random_values(rng_, static_cast<size_t>(rows) * cols, 1.f, dtype());
    auto dx = DeviceTensor::from(gpu(), dtype(), rows, cols, x);
    auto dw = DeviceTensor::from(gpu(), dtype(), 1, cols, w);
    auto out = DeviceTensor::poisoned(gpu(), dtype(), rows, cols);
    gpu().rmsnorm(dx.t, dw.t, eps, out.t);
    const Tolerance tol = tolerance_for(dtype());
    const std::string what = "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
    expect_close(download(gpu(), out.t), rmsnorm_ref(x, w, rows, cols, eps), tol.rel_norm,
                 tol.rel_elem, 1e-2, "rmsnorm " + what);

    auto dd = DeviceTensor::from(gpu(), dtype(), rows, cols, delta);
    auto out2 = DeviceTensor::poisoned(gpu(), dtype(), rows, cols);
    gpu().add_rmsnorm(dx.t, dd.t, dw.t, eps, out2.t);
    std::vector<float> sum(x.size());
    std::vector<double> sum_ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      sum[i] = round_to(dtype(), x[i] + delta[i]);
      sum_ref[i] = sum[i];
    }
    expect_close(download(gpu(), dx.t), sum_ref, 1e-6, 1e-6, 0, "add_rmsnorm residual " + what);
    expect_close(download(gpu(), out2.t), rmsnorm_ref(sum, w, rows, cols, eps), tol.rel_norm,
                 tol.rel_elem, 1e-2, "add_rmsnorm " + what);
  }
}

// ---------------------------------------------------------------- elementwise, rows
TEST_P(CudaOps, SiluMulEmbedGather) {
  for (const auto& shape : {std::pair{3, 4864}, std::pair{5, 77}, std::pair{1, 9}}) {
    const int rows = shape.first, cols = shape.second;
    const auto gate = random_values(rng_, static_cast<size_t>(rows) * cols, 3.f, dtype());
    const auto up = random_values(rng_, static_cast<size_t>(rows) * cols, 1.f, dtype());
    auto dg = DeviceTensor::from(gpu(), dtype(), rows, cols, gate);
    auto du = DeviceTensor::from(gpu(), dtype(), rows, cols, up);
    auto out = DeviceTensor::poisoned(gpu(), dtype(), rows, cols);
    gpu().silu_mul(dg.t, du.t, out.t);
    std::vector<double> ref(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) ref[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    const Tolerance tol = tolerance_for(dtype());
    expect_close(download(gpu(), out.t), ref, tol.rel_norm, tol.rel_elem, 1e-3, "silu_mul");
  }
  // add_bias: x += bias per row.
  {
    const int rows = 5, cols = 136;
    const auto x = random_values(rng_, static_cast<size_t>(rows) * cols, 1.f, dtype());
    const auto bias = random_values(rng_, cols, 1.f, dtype());
    auto dx = DeviceTensor::from(gpu(), dtype(), rows, cols, x);
    auto db = DeviceTensor::from(gpu(), dtype(), 1, cols, bias);
    gpu().add_bias(dx.t, db.t);
    std::vector<double> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = round_to(dtype(), x[i] + bias[i % cols]);
    expect_close(download(gpu(), dx.t), ref, 0, 0, 0, "add_bias");
  }
  // embed and gather_rows: exact copies.
  const int vocab = 301, hidden = 136;
  const auto table = random_values(rng_, static_cast<size_t>(vocab) * hidden, 1.f, dtype());
  auto dtable = DeviceTensor::from(gpu(), dtype(), vocab, hidden, table);
  const std::vector<int32_t> ids = {5, 0, 300, 17, 17, 299, 42};
  auto dids = upload_ints(gpu(), ids);
  BatchView batch;
  batch.n_tokens = static_cast<int>(ids.size());
  batch.token_ids = static_cast<const int32_t*>(dids.data());
  auto out = DeviceTensor::poisoned(gpu(), dtype(), batch.n_tokens, hidden);
  gpu().embed(batch, dtable.t, out.t);
  std::vector<double> ref;
  for (int32_t id : ids)
    for (int c = 0; c < hidden; ++c) ref.push_back(table[static_cast<size_t>(id) * hidden + c]);
  expect_close(download(gpu(), out.t), ref, 0, 0, 0, "embed");

  const std::vector<int32_t> rows = {6, 0, 3};
  auto drows = upload_ints(gpu(), rows);
  for (DType gather_dtype : {dtype(), DType::kF32}) {
    auto src = DeviceTensor::from(gpu(), gather_dtype, 7, 3, std::vector<float>{
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20});
    auto gathered = DeviceTensor::poisoned(gpu(), gather_dtype, 3, 3);
    gpu().gather_rows(src.t, static_cast<const int32_t*>(drows.data()), gathered.t);
    expect_close(download(gpu(), gathered.t), {18, 19, 20, 0, 1, 2, 9, 10, 11}, 0, 0, 0, "gather_rows");
  }
}

// ---------------------------------------------------------------- bench services
TEST_P(CudaOps, FillRandomAndDeviceTimer) {
  const int64_t rows = 37, cols = 1001;
  auto t = DeviceTensor::poisoned(gpu(), dtype(), rows, cols);
  auto timer = gpu().make_timer();
  timer->start();
  gpu().fill_random(t.t, 42, 0.5f, 1.f);
  timer->stop();
  EXPECT_GT(timer->seconds(), 0.0);
  const auto values = download(gpu(), t.t);
  double sum = 0;
  float lo = 10.f, hi = -10.f;
  for (float v : values) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, 0.5f - 1e-2f);
  EXPECT_LE(hi, 1.5f + 1e-2f);
  EXPECT_NEAR(sum / static_cast<double>(values.size()), 1.0, 0.01);  // uniform mean
  EXPECT_GT(hi - lo, 0.9f);                                          // spread over the range
  // Same seed, same values; another seed, other values.
  auto again = DeviceTensor(gpu(), dtype(), rows, cols);
  gpu().fill_random(again.t, 42, 0.5f, 1.f);
  EXPECT_EQ(download(gpu(), again.t), values);
  gpu().fill_random(again.t, 43, 0.5f, 1.f);
  EXPECT_NE(download(gpu(), again.t), values);
}

// ---------------------------------------------------------------- paged batches
// A ragged batch over a paged cache with randomly placed physical blocks.
struct PagedBatch {
  std::vector<int> context;   // per sequence, tokens cached after this step
  std::vector<int> new_tokens;
  int block_size = 16;
  int num_blocks = 0;
  int max_blocks = 0;
  std::vector<int32_t> positions, slots, token_seq, seq_starts, context_lens, block_tables;
  DeviceBuffer d_positions, d_slots, d_token_seq, d_seq_starts, d_context_lens, d_block_tables,
      d_token_ids;

  PagedBatch(Backend& backend, std::mt19937& rng, std::vector<int> ctx, std::vector<int> fresh,
             int block)
      : context(std::move(ctx)), new_tokens(std::move(fresh)), block_size(block) {
    const int n_seqs = static_cast<int>(context.size());
    for (int s = 0; s < n_seqs; ++s)
      max_blocks = std::max(max_blocks, (context[s] + block_size - 1) / block_size);
    num_blocks = n_seqs * max_blocks + 3;  // spare blocks that nobody owns
    std::vector<int32_t> physical(num_blocks);
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), rng);
    block_tables.assign(static_cast<size_t>(n_seqs) * max_blocks, -1);
    int next = 0;
    seq_starts.push_back(0);
    for (int s = 0; s < n_seqs; ++s) {
      const int blocks = (context[s] + block_size - 1) / block_size;
      for (int b = 0; b < blocks; ++b) block_tables[s * max_blocks + b] = physical[next++];
      for (int p = context[s] - new_tokens[s]; p < context[s]; ++p) {
        positions.push_back(p);
        slots.push_back(slot_of(s, p));
        token_seq.push_back(s);
      }
      seq_starts.push_back(static_cast<int32_t>(positions.size()));
      context_lens.push_back(context[s]);
    }
    d_positions = upload_ints(backend, positions);
    d_slots = upload_ints(backend, slots);
    d_token_seq = upload_ints(backend, token_seq);
    d_seq_starts = upload_ints(backend, seq_starts);
    d_context_lens = upload_ints(backend, context_lens);
    d_block_tables = upload_ints(backend, block_tables);
    d_token_ids = upload_ints(backend, std::vector<int32_t>(positions.size(), 0));
  }
  int32_t slot_of(int s, int p) const {
    return block_tables[s * max_blocks + p / block_size] * block_size + p % block_size;
  }
  BatchView view() const {
    BatchView b;
    b.n_tokens = static_cast<int>(positions.size());
    b.n_seqs = static_cast<int>(context.size());
    b.max_new_tokens = *std::max_element(new_tokens.begin(), new_tokens.end());
    b.max_context_len = *std::max_element(context.begin(), context.end());
    b.max_blocks_per_seq = max_blocks;
    b.token_ids = static_cast<const int32_t*>(d_token_ids.data());
    b.positions = static_cast<const int32_t*>(d_positions.data());
    b.slot_mapping = static_cast<const int32_t*>(d_slots.data());
    b.token_seq = static_cast<const int32_t*>(d_token_seq.data());
    b.seq_starts = static_cast<const int32_t*>(d_seq_starts.data());
    b.context_lens = static_cast<const int32_t*>(d_context_lens.data());
    b.block_tables = static_cast<const int32_t*>(d_block_tables.data());
    // As the model stages a batch: the leading one-token sequences are its decode rows.
    while (b.leading_decode_seqs < b.n_seqs && new_tokens[b.leading_decode_seqs] == 1) {
      b.leading_decode_max_context = std::max(b.leading_decode_max_context, context[b.leading_decode_seqs]);
      ++b.leading_decode_seqs;
    }
    return b;
  }
};

struct HeadConfig {
  int n_heads, n_kv_heads, head_dim;
  bool bias, qk_norm;
};

TEST_P(CudaOps, QkvRopeKvwrite) {
  // 64 and 128 take the vector kernel (4 pairs a thread), 80 the warp-per-head one.
  const HeadConfig configs[] = {{14, 2, 64, true, false}, {16, 8, 128, false, true}, {28, 4, 128, true, false},
                                {8, 8, 64, false, true},  {6, 2, 80, true, true},    {5, 1, 80, false, false}};
  for (const HeadConfig& hc : configs) {
    PagedBatch pb(gpu(), rng_, {37, 1, 70, 200}, {37, 1, 5, 1}, 16);
    const BatchView batch = pb.view();
    const int n = batch.n_tokens, d = hc.head_dim, half = d / 2;
    const int q_cols = hc.n_heads * d, kv_cols = hc.n_kv_heads * d;
    const auto q = random_values(rng_, static_cast<size_t>(n) * q_cols, 1.f, dtype());
    const auto k = random_values(rng_, static_cast<size_t>(n) * kv_cols, 1.f, dtype());
    const auto v = random_values(rng_, static_cast<size_t>(n) * kv_cols, 1.f, dtype());
    const auto qb = random_values(rng_, static_cast<size_t>(q_cols), 0.5f, dtype());
    const auto kb = random_values(rng_, static_cast<size_t>(kv_cols), 0.5f, dtype());
    const auto vb = random_values(rng_, static_cast<size_t>(kv_cols), 0.5f, dtype());
    const auto qn = random_values(rng_, static_cast<size_t>(d), 0.2f, dtype(), 1.f);
    const auto kn = random_values(rng_, static_cast<size_t>(d), 0.2f, dtype(), 1.f);
    std::vector<float> inv_freq(half);
    for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(1e6f, -2.f * i / d);
    const float rope_scaling = 1.1f;

    auto dq = DeviceTensor::from(gpu(), dtype(), n, q_cols, q);
    auto dk = DeviceTensor::from(gpu(), dtype(), n, kv_cols, k);
    auto dv = DeviceTensor::from(gpu(), dtype(), n, kv_cols, v);
    auto dqb = DeviceTensor::from(gpu(), dtype(), 1, q_cols, qb);
    auto dkb = DeviceTensor::from(gpu(), dtype(), 1, kv_cols, kb);
    auto dvb = DeviceTensor::from(gpu(), dtype(), 1, kv_cols, vb);
    auto dqn = DeviceTensor::from(gpu(), dtype(), 1, d, qn);
    auto dkn = DeviceTensor::from(gpu(), dtype(), 1, d, kn);
    auto dfreq = DeviceTensor::from(gpu(), DType::kF32, 1, half, inv_freq);
    KvGeometry geo{pb.num_blocks, pb.block_size, hc.n_kv_heads, d, dtype()};
    const int64_t pool = static_cast<int64_t>(pb.num_blocks) * pb.block_size * kv_cols;
    auto k_cache = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
    auto v_cache = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);

    AttentionParams attn{hc.n_heads, hc.n_kv_heads, d, 1.f / std::sqrt(float(d)), 0};
    QkvEpilogue epi;
    if (hc.bias) {
      epi.q_bias = dqb.t;
      epi.k_bias = dkb.t;
      epi.v_bias = dvb.t;
    }
    if (hc.qk_norm) {
      epi.q_norm = dqn.t;
      epi.k_norm = dkn.t;
    }
    epi.norm_eps = 1e-6f;
    epi.inv_freq = static_cast<const float*>(dfreq.t.data);
    epi.rope_scaling = rope_scaling;
    gpu().qkv_rope_kvwrite(batch, attn, epi, dq.t, dk.t, dv.t, geo, KvLayer{k_cache.t.data, v_cache.t.data});

    // Reference: bias → per-head norm → rope, per head.
    auto transform = [&](const std::vector<float>& x, const std::vector<float>& bias,
                         const std::vector<float>* norm, bool rope, int heads) {
      std::vector<double> out(x.size());
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < heads; ++h) {
          std::vector<double> e(d);
          for (int i = 0; i < d; ++i)
            e[i] = x[(static_cast<size_t>(t) * heads + h) * d + i] + (hc.bias ? bias[h * d + i] : 0.f);
          if (norm != nullptr) {
            double ss = 0;
            for (double y : e) ss += y * y;
            const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
            for (int i = 0; i < d; ++i) e[i] *= inv * (*norm)[i];
          }
          if (rope) {
            for (int i = 0; i < half; ++i) {
              const double angle = static_cast<double>(static_cast<float>(pb.positions[t]) * inv_freq[i]);
              const double c = std::cos(angle) * rope_scaling, s = std::sin(angle) * rope_scaling;
              const double a = e[i], b = e[i + half];
              e[i] = a * c - b * s;
              e[i + half] = b * c + a * s;
            }
          }
          for (int i = 0; i < d; ++i) out[(static_cast<size_t>(t) * heads + h) * d + i] = e[i];
        }
      return out;
    };
    const auto q_ref = transform(q, qb, hc.qk_norm ? &qn : nullptr, true, hc.n_heads);
    const auto k_ref = transform(k, kb, hc.qk_norm ? &kn : nullptr, true, hc.n_kv_heads);
    const auto v_ref = transform(v, vb, nullptr, false, hc.n_kv_heads);
    const Tolerance tol = tolerance_for(dtype());
    const std::string what = "heads " + std::to_string(hc.n_heads) + "/" +
                             std::to_string(hc.n_kv_heads) + " d=" + std::to_string(d);
    expect_close(download(gpu(), dq.t), q_ref, tol.rel_norm, tol.rel_elem, 1e-2, "q " + what);
    expect_close(download(gpu(), dk.t), k_ref, tol.rel_norm, tol.rel_elem, 1e-2, "k " + what);
    expect_close(download(gpu(), dv.t), v_ref, tol.rel_norm, tol.rel_elem, 1e-2, "v " + what);

    // The cache holds k and v at each token's slot; every other slot is untouched (NaN).
    const auto kc = download(gpu(), k_cache.t);
    const auto vc = download(gpu(), v_cache.t);
    std::vector<bool> written(static_cast<size_t>(pb.num_blocks) * pb.block_size, false);
    std::vector<float> k_at, v_at;
    std::vector<double> k_want, v_want;
    for (int t = 0; t < n; ++t) {
      written[pb.slots[t]] = true;
      for (int c = 0; c < kv_cols; ++c) {
        k_at.push_back(kc[static_cast<size_t>(pb.slots[t]) * kv_cols + c]);
        v_at.push_back(vc[static_cast<size_t>(pb.slots[t]) * kv_cols + c]);
        k_want.push_back(k_ref[static_cast<size_t>(t) * kv_cols + c]);
        v_want.push_back(v_ref[static_cast<size_t>(t) * kv_cols + c]);
      }
    }
    expect_close(k_at, k_want, tol.rel_norm, tol.rel_elem, 1e-2, "k cache " + what);
    expect_close(v_at, v_want, tol.rel_norm, tol.rel_elem, 1e-2, "v cache " + what);
    size_t touched = 0;
    for (size_t slot = 0; slot < written.size(); ++slot)
      if (!written[slot] && !std::isnan(kc[slot * kv_cols])) ++touched;
    EXPECT_EQ(touched, 0u) << "slots written that no token maps to, " << what;

    // The same from one q|k|v product row per token: q written apart, k/v to the cache only.
    ASSERT_TRUE(gpu().fuses_qkv_epilogue());
    const int qkv_cols = q_cols + 2 * kv_cols;
    std::vector<float> qkv(static_cast<size_t>(n) * qkv_cols);
    for (int t = 0; t < n; ++t) {
      float* row = &qkv[static_cast<size_t>(t) * qkv_cols];
      std::copy_n(&q[static_cast<size_t>(t) * q_cols], q_cols, row);
      std::copy_n(&k[static_cast<size_t>(t) * kv_cols], kv_cols, row + q_cols);
      std::copy_n(&v[static_cast<size_t>(t) * kv_cols], kv_cols, row + q_cols + kv_cols);
    }
    auto dqkv = DeviceTensor::from(gpu(), dtype(), n, qkv_cols, qkv);
    auto q_out = DeviceTensor::poisoned(gpu(), dtype(), n, q_cols);
    auto k_cache2 = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
    auto v_cache2 = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
    gpu().qkv_fused_rope_kvwrite(batch, attn, epi, dqkv.t, q_out.t, geo, KvLayer{k_cache2.t.data, v_cache2.t.data});
    expect_close(download(gpu(), q_out.t), q_ref, tol.rel_norm, tol.rel_elem, 1e-2, "fused q " + what);
    const auto kc2 = download(gpu(), k_cache2.t);
    const auto vc2 = download(gpu(), v_cache2.t);
    std::vector<float> k_at2, v_at2;
    for (int t = 0; t < n; ++t)
      for (int c = 0; c < kv_cols; ++c) {
        k_at2.push_back(kc2[static_cast<size_t>(pb.slots[t]) * kv_cols + c]);
        v_at2.push_back(vc2[static_cast<size_t>(pb.slots[t]) * kv_cols + c]);
      }
    expect_close(k_at2, k_want, tol.rel_norm, tol.rel_elem, 1e-2, "fused k cache " + what);
    expect_close(v_at2, v_want, tol.rel_norm, tol.rel_elem, 1e-2, "fused v cache " + what);
    const auto qkv_after = download(gpu(), dqkv.t);
    size_t changed = 0;
    for (size_t i = 0; i < qkv.size(); ++i)
      if (qkv_after[i] != qkv[i]) ++changed;
    EXPECT_EQ(changed, 0u) << "the fused product was written to, " << what;
  }
}

// The q|k|v product with the epilogue folded in writes what the product followed by the
// epilogue writes (that pair is checked against the formulas above), bit for bit: biases,
// RoPE table rows per sequence and LogN (the original Qwen), a token with no slot.
TEST_P(CudaOps, QkvProductWithEpilogueEqualsProductThenEpilogue) {
  const HeadConfig configs[] = {{14, 2, 64, true, false}, {28, 4, 128, true, false}, {8, 8, 64, false, false}};
  const int hidden = 264;
  constexpr int kGemvRowsTested = 4;  // the decode product's row limit
  for (const HeadConfig& hc : configs) {
    for (int rows = 1; rows <= kGemvRowsTested; ++rows) {
      std::vector<int> ctx, fresh;
      for (int r = 0; r < rows; ++r) {
        ctx.push_back(std::uniform_int_distribution<int>(1, 120)(rng_));
        fresh.push_back(1);
      }
      PagedBatch pb(gpu(), rng_, ctx, fresh, 16);
      if (rows == 3) {  // a token whose k/v are not kept
        pb.slots[1] = -1;
        pb.d_slots = upload_ints(gpu(), pb.slots);
      }
      BatchView batch = pb.view();
      const bool original_qwen = rows % 2 == 0;
      std::vector<int32_t> rope_rows;
      for (int r = 0; r < rows; ++r) rope_rows.push_back(r % 2);
      DeviceBuffer d_rope_rows = upload_ints(gpu(), rope_rows);
      if (original_qwen) batch.rope_rows = static_cast<const int32_t*>(d_rope_rows.data());

      const int d = hc.head_dim, half = d / 2;
      const int q_cols = hc.n_heads * d, kv_cols = hc.n_kv_heads * d, qkv_cols = q_cols + 2 * kv_cols;
      std::vector<float> inv_freq(2 * half);
      for (int i = 0; i < half; ++i) {
        inv_freq[i] = std::pow(1e6f, -2.f * i / d);
        inv_freq[half + i] = std::pow(3e6f, -2.f * i / d);
      }
      auto dfreq = DeviceTensor::from(gpu(), DType::kF32, 2, half, inv_freq);
      auto x = DeviceTensor::from(gpu(), dtype(), rows, hidden, random_values(rng_, rows * hidden, 1.f, dtype()));
      auto w = DeviceTensor::from(gpu(), dtype(), qkv_cols, hidden,
                                  random_values(rng_, static_cast<size_t>(qkv_cols) * hidden, 0.1f, dtype()));
      auto qb = DeviceTensor::from(gpu(), dtype(), 1, q_cols, random_values(rng_, q_cols, 0.5f, dtype()));
      auto kb = DeviceTensor::from(gpu(), dtype(), 1, kv_cols, random_values(rng_, kv_cols, 0.5f, dtype()));
      auto vb = DeviceTensor::from(gpu(), dtype(), 1, kv_cols, random_values(rng_, kv_cols, 0.5f, dtype()));
      QkvEpilogue epi;
      if (hc.bias) {
        epi.q_bias = qb.t;
        epi.k_bias = kb.t;
        epi.v_bias = vb.t;
      }
      epi.inv_freq = static_cast<const float*>(dfreq.t.data);
      epi.rope_scaling = 1.1f;
      epi.logn_length = original_qwen ? 40 : 0;
      AttentionParams attn{hc.n_heads, hc.n_kv_heads, d, 1.f / std::sqrt(float(d)), 0};
      KvGeometry geo{pb.num_blocks, pb.block_size, hc.n_kv_heads, d, dtype()};
      const int64_t pool = static_cast<int64_t>(pb.num_blocks) * pb.block_size * kv_cols;

      auto qkv = DeviceTensor::poisoned(gpu(), dtype(), rows, qkv_cols);
      auto q_two = DeviceTensor::poisoned(gpu(), dtype(), rows, q_cols);
      auto k_two = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
      auto v_two = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
      gpu().matmul(x.t, w.t, qkv.t);
      gpu().qkv_fused_rope_kvwrite(batch, attn, epi, qkv.t, q_two.t, geo, KvLayer{k_two.t.data, v_two.t.data});
      auto q_one = DeviceTensor::poisoned(gpu(), dtype(), rows, q_cols);
      auto k_one = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
      auto v_one = DeviceTensor::poisoned(gpu(), dtype(), 1, pool);
      ASSERT_TRUE(gpu().matmul_qkv_rope_kvwrite(x.t, w.t, batch, attn, epi, q_one.t, geo,
                                                KvLayer{k_one.t.data, v_one.t.data}));
      const std::string what = "heads " + std::to_string(hc.n_heads) + "/" + std::to_string(hc.n_kv_heads) +
                               " d=" + std::to_string(d) + " rows " + std::to_string(rows);
      const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
      };
      EXPECT_TRUE(same_bits(download(gpu(), q_one.t), download(gpu(), q_two.t))) << "q " << what;
      EXPECT_TRUE(same_bits(download(gpu(), k_one.t), download(gpu(), k_two.t))) << "k cache " << what;
      EXPECT_TRUE(same_bits(download(gpu(), v_one.t), download(gpu(), v_two.t))) << "v cache " << what;

      // Per-head q/k norms (Qwen3) need the whole head: not folded in.
      auto norm_weight = DeviceTensor::from(gpu(), dtype(), 1, d, std::vector<float>(d, 1.f));
      QkvEpilogue normed = epi;
      normed.q_norm = norm_weight.t;
      EXPECT_FALSE(gpu().matmul_qkv_rope_kvwrite(x.t, w.t, batch, attn, normed, q_one.t, geo,
                                                 KvLayer{k_one.t.data, v_one.t.data}));
    }
  }
}

struct AttentionCase {
  HeadConfig heads;
  std::vector<int> context;
  std::vector<int> new_tokens;
  int block_size;
  int sliding_window;
};

void run_attention_case(Backend& gpu, DType dtype, std::mt19937& rng, const AttentionCase& ac) {
  PagedBatch pb(gpu, rng, ac.context, ac.new_tokens, ac.block_size);
  const BatchView batch = pb.view();
  const int d = ac.heads.head_dim, hq = ac.heads.n_heads, hkv = ac.heads.n_kv_heads;
  const int group = hq / hkv;
  const int n = batch.n_tokens;
  const int kv_cols = hkv * d;
  const size_t slots = static_cast<size_t>(pb.num_blocks) * pb.block_size;
  // Pool full of NaN except the slots the sequences own: a read of a foreign slot shows.
  std::vector<float> k_pool(slots * kv_cols, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> v_pool = k_pool;
  std::vector<std::vector<float>> k_seq(ac.context.size()), v_seq(ac.context.size());
  for (size_t s = 0; s < ac.context.size(); ++s) {
    k_seq[s] = random_values(rng, static_cast<size_t>(ac.context[s]) * kv_cols, 1.f, dtype);
    v_seq[s] = random_values(rng, static_cast<size_t>(ac.context[s]) * kv_cols, 1.f, dtype);
    for (int p = 0; p < ac.context[s]; ++p) {
      const size_t slot = static_cast<size_t>(pb.slot_of(static_cast<int>(s), p));
      std::copy_n(&k_seq[s][static_cast<size_t>(p) * kv_cols], kv_cols, &k_pool[slot * kv_cols]);
      std::copy_n(&v_seq[s][static_cast<size_t>(p) * kv_cols], kv_cols, &v_pool[slot * kv_cols]);
    }
  }
  auto k_cache = DeviceTensor::from(gpu, dtype, static_cast<int64_t>(slots), kv_cols, k_pool);
  auto v_cache = DeviceTensor::from(gpu, dtype, static_cast<int64_t>(slots), kv_cols, v_pool);
  const auto q = random_values(rng, static_cast<size_t>(n) * hq * d, 1.f, dtype);
  auto dq = DeviceTensor::from(gpu, dtype, n, hq * d, q);
  auto out = DeviceTensor::poisoned(gpu, dtype, n, hq * d);
  KvGeometry geo{pb.num_blocks, pb.block_size, hkv, d, dtype};
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  AttentionParams attn{hq, hkv, d, scale, ac.sliding_window};
  gpu.attention(batch, attn, dq.t, geo, KvLayer{k_cache.t.data, v_cache.t.data}, out.t);

  std::vector<double> ref(static_cast<size_t>(n) * hq * d);
  for (int t = 0; t < n; ++t) {
    const int s = pb.token_seq[t];
    const int pos = pb.positions[t];
    for (int h = 0; h < hq; ++h) {
      const int kvh = h / group;
      const int lo = ac.sliding_window > 0 ? std::max(0, pos - ac.sliding_window + 1) : 0;
      std::vector<double> score(pos + 1 - lo);
      double mx = -1e300;
      for (int p = lo; p <= pos; ++p) {
        double dot = 0;
        for (int i = 0; i < d; ++i)
          dot += static_cast<double>(q[(static_cast<size_t>(t) * hq + h) * d + i]) *
                 k_seq[s][static_cast<size_t>(p) * kv_cols + kvh * d + i];
        score[p - lo] = dot * scale;
        mx = std::max(mx, score[p - lo]);
      }
      double sum = 0;
      for (double& sc : score) sum += (sc = std::exp(sc - mx));
      for (int i = 0; i < d; ++i) {
        double o = 0;
        for (int p = lo; p <= pos; ++p) o += score[p - lo] * v_seq[s][static_cast<size_t>(p) * kv_cols + kvh * d + i];
        ref[(static_cast<size_t>(t) * hq + h) * d + i] = o / sum;
      }
    }
  }
  const Tolerance tol = tolerance_for(dtype);
  // The tensor-core prompt kernel rounds the softmax weights P to the storage type before
  // P·V (as flash attention does): in bf16 that is up to 2^-9 relative per term, which a
  // few small outputs of a long row show as ~2e-3 absolute. The norm-wise bound is unchanged.
  const double abs_tol = dtype == DType::kBF16 ? 4e-3 : 2e-3;
  std::string what = "attention heads " + std::to_string(hq) + "/" + std::to_string(hkv) +
                     " d=" + std::to_string(d) + " window " + std::to_string(ac.sliding_window) +
                     " seqs";
  for (size_t s = 0; s < ac.context.size(); ++s) {
    what += ' ';
    what += std::to_string(ac.context[s]);
    what += '/';
    what += std::to_string(ac.new_tokens[s]);
  }
  expect_close(download(gpu, out.t), ref, tol.rel_norm, tol.rel_elem, abs_tol, what);
}

TEST_P(CudaOps, AttentionPromptAndMixedBatches) {
  const HeadConfig heads[] = {{14, 2, 64, false, false},  // group 7
                              {16, 8, 128, false, false},  // group 2
                              {8, 8, 64, false, false},    // MHA
                              {32, 4, 128, false, false}}; // group 8
  for (const HeadConfig& h : heads) {
    run_attention_case(gpu(), dtype(), rng_, {h, {37, 1, 130}, {37, 1, 130}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {70, 200, 16, 3}, {5, 1, 16, 2}, 16, 0});
  }
  // Shapes only the generic kernel takes: small/odd head_dim, group 3, tiny test models.
  const HeadConfig odd[] = {{4, 2, 16, false, false}, {6, 2, 24, false, false}, {8, 8, 8, false, false},
                            {6, 2, 80, false, false}};
  for (const HeadConfig& h : odd) {
    run_attention_case(gpu(), dtype(), rng_, {h, {37, 1, 70}, {37, 1, 3}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {300, 12}, {1, 1}, 16, 0});
  }
  run_attention_case(gpu(), dtype(), rng_, {odd[1], {90, 33}, {90, 1}, 5, 17});
  // Group 3 on the tiled kernels.
  run_attention_case(gpu(), dtype(), rng_, {{12, 4, 128, false, false}, {50, 9}, {50, 1}, 16, 0});
  run_attention_case(gpu(), dtype(), rng_, {{12, 4, 128, false, false}, {50, 9}, {1, 1}, 16, 0});
  // Sliding window, odd block size.
  run_attention_case(gpu(), dtype(), rng_, {heads[1], {90, 33}, {90, 4}, 7, 20});
  // One long prompt chunk continuing a cached prefix.
  run_attention_case(gpu(), dtype(), rng_, {heads[3], {600}, {257}, 32, 0});
  // Mixed batches led by decode rows (the scheduler's order): those through the decode
  // kernels, the rest (a one-token sequence among them) through the prompt kernels; a
  // prompt with a longer context than every decode row; many decode rows and two prompts.
  for (const HeadConfig& h : heads) {
    run_attention_case(gpu(), dtype(), rng_, {h, {70, 200, 3, 150, 1, 300}, {1, 1, 1, 40, 1, 3}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {90, 2600}, {1, 130}, 16, 0});
  }
  std::vector<int> context, fresh;
  for (int s = 0; s < 40; ++s) {
    context.push_back(20 + 13 * s);
    fresh.push_back(1);
  }
  context.insert(context.end(), {128, 77});
  fresh.insert(fresh.end(), {128, 60});
  run_attention_case(gpu(), dtype(), rng_, {heads[1], context, fresh, 16, 0});
  run_attention_case(gpu(), dtype(), rng_, {heads[1], {90, 33, 60}, {1, 4, 1}, 7, 20});  // sliding window
  run_attention_case(gpu(), dtype(), rng_, {odd[3], {90, 33}, {1, 4}, 16, 0});             // generic only
}

// A few new tokens over contexts longer than they are (a short prompt after a cached
// prefix, alone or beside decode rows): each token a decode row of its own in the tiled
// kernels, over its own keys, the chunk's others' included.
TEST_P(CudaOps, AttentionFewNewTokensOverLongContexts) {
  const HeadConfig heads[] = {{28, 4, 128, false, false}, {14, 2, 64, false, false}, {8, 8, 128, false, false}};
  for (const HeadConfig& h : heads) {
    run_attention_case(gpu(), dtype(), rng_, {h, {1040}, {16}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {300, 1000, 47}, {1, 8, 5}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {10, 5}, {10, 5}, 16, 0});  // whole short prompts
    run_attention_case(gpu(), dtype(), rng_, {h, {4100, 2}, {3, 2}, 32, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {1040, 64}, {30, 34}, 16, 0});  // 64: the most as token rows
  }
  run_attention_case(gpu(), dtype(), rng_, {heads[0], {90, 700}, {3, 12}, 7, 20});  // sliding window
}

TEST_P(CudaOps, AttentionDecodeManySequences) {
  const HeadConfig heads[] = {{14, 2, 64, false, false},
                              {28, 4, 128, false, false},
                              {8, 8, 128, false, false},
                              {16, 8, 64, false, false},
                              {40, 8, 128, false, false}};
  for (const HeadConfig& h : heads) {
    std::uniform_int_distribution<int> len(1, 700);
    std::vector<int> ctx(13);
    for (int& c : ctx) c = len(rng_);
    ctx[0] = 1;
    ctx[1] = 16;  // exactly one block
    ctx[2] = 17;  // one past a block boundary
    run_attention_case(gpu(), dtype(), rng_, {h, ctx, std::vector<int>(ctx.size(), 1), 16, 0});
    // Batch of one with a long context: many splits.
    run_attention_case(gpu(), dtype(), rng_, {h, {3000}, {1}, 16, 0});
  }
  // One sequence cut into 2 to 16 splits (a tile each or less, then the combine); a short
  // sequence beside a long one leaves most of its splits empty.
  for (const HeadConfig& h : {heads[0], heads[1], heads[3]}) {
    for (int c : {64, 65, 200, 512, 777, 1024}) run_attention_case(gpu(), dtype(), rng_, {h, {c}, {1}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {1000, 5}, {1, 1}, 16, 0});
    run_attention_case(gpu(), dtype(), rng_, {h, {1, 700, 33}, {1, 1, 1}, 16, 0});
  }
  // Long contexts of one sequence (the tensor-core split kernel), a group of 16, a context
  // that is not a whole number of tiles or blocks, and a sliding window over a long one.
  run_attention_case(gpu(), dtype(), rng_, {heads[1], {9001}, {1}, 16, 0});
  run_attention_case(gpu(), dtype(), rng_, {heads[0], {8200}, {1}, 16, 0});  // three tiles a split
  run_attention_case(gpu(), dtype(), rng_, {heads[0], {5000, 2049}, {1, 1}, 32, 0});
  run_attention_case(gpu(), dtype(), rng_, {{32, 2, 128, false, false}, {4097, 3}, {1, 1}, 16, 0});
  run_attention_case(gpu(), dtype(), rng_, {heads[4], {6000}, {1}, 16, 1000});
  // The combine at its most splits (64: 32,768 keys and more at d = 128; a few kv heads at
  // d = 64 reach it sooner).
  run_attention_case(gpu(), dtype(), rng_, {heads[1], {33001}, {1}, 16, 0});
  run_attention_case(gpu(), dtype(), rng_, {heads[0], {20000}, {1}, 16, 0});
  // Sliding window on the decode path.
  run_attention_case(gpu(), dtype(), rng_, {heads[1], {500, 40, 1000}, {1, 1, 1}, 16, 64});
  // Enough sequences to fill the device: the tensor-core kernel takes decode batches, in
  // blocks of four warps up to a wave of them (160 x 2 kv heads) and of two warps beyond.
  for (const HeadConfig& h : {heads[0], heads[1], heads[4]}) {
    std::uniform_int_distribution<int> len(1, 300);
    std::vector<int> ctx(160);
    for (int& c : ctx) c = len(rng_);
    ctx[0] = 1;
    ctx[1] = 64;
    ctx[2] = 65;
    run_attention_case(gpu(), dtype(), rng_, {h, ctx, std::vector<int>(ctx.size(), 1), 16, 0});
  }
  {
    // Many sequences and one long context: the long one is still split.
    std::vector<int> ctx(140, 50);
    ctx[7] = 5000;
    run_attention_case(gpu(), dtype(), rng_, {heads[0], ctx, std::vector<int>(ctx.size(), 1), 16, 0});
  }
  {
    std::vector<int> ctx(150, 90);
    ctx[3] = 700;
    run_attention_case(gpu(), dtype(), rng_, {heads[1], ctx, std::vector<int>(ctx.size(), 1), 16, 48});
  }
}

}  // namespace
}  // namespace qwenrt::test
