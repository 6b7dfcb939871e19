// CPU backend ops against naive double-precision formulas written here, on random inputs
// of awkward sizes. Outputs are poisoned with NaN before each op so that an element the op
// forgets to write fails the comparison; the KV pool is poisoned too, so attention reading
// a slot outside its sequence's causal range produces NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "test_util.h"

namespace qwenrt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class CpuOps : public ::testing::Test {
 protected:
  // Three threads on any machine, so the ops' work splitting is exercised.
  std::unique_ptr<Backend> backend_ = make_cpu_backend(3);
  std::mt19937 rng_{12345};

  std::vector<float> random(size_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> values(n);
    for (float& v : values) v = dist(rng_);
    return values;
  }
};

Tensor view(std::vector<float>& values, int64_t rows, int64_t cols) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), rows * cols);
  return Tensor{values.data(), DType::kF32, rows, cols};
}

Tensor view16(std::vector<uint16_t>& values, DType dtype, int64_t rows, int64_t cols) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), rows * cols);
  return Tensor{values.data(), dtype, rows, cols};
}

std::vector<float> poisoned(size_t n) {
  return std::vector<float>(n, kNaN);
}

// |actual - expected| <= tol · (|expected| + floor); NaN always fails.
::testing::AssertionResult close(float actual, double expected, double tol, double floor) {
  double error = std::abs(static_cast<double>(actual) - expected);
  if (error <= tol * (std::abs(expected) + floor)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "actual " << actual << " expected " << expected << " error " << error;
}

// Independent decoders: bf16 is the top half of an f32; f16 from sign/exponent/mantissa.
double decode_bf16(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

double decode_f16(uint16_t bits) {
  int sign = bits >> 15, exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

// Random finite 16-bit encodings with magnitudes around [2^-5, 2).
std::vector<uint16_t> random_halves(std::mt19937& rng, size_t n, DType dtype) {
  std::vector<uint16_t> bits(n);
  std::uniform_int_distribution<int> sign(0, 1);
  if (dtype == DType::kF16) {
    std::uniform_int_distribution<int> exponent(10, 15), mantissa(0, 1023);
    for (auto& b : bits) {
      b = static_cast<uint16_t>((sign(rng) << 15) | (exponent(rng) << 10) | mantissa(rng));
    }
  } else {
    std::uniform_int_distribution<int> exponent(122, 126), mantissa(0, 127);
    for (auto& b : bits) {
      b = static_cast<uint16_t>((sign(rng) << 15) | (exponent(rng) << 7) | mantissa(rng));
    }
  }
  return bits;
}

double decode(uint16_t bits, DType dtype) {
  return dtype == DType::kF16 ? decode_f16(bits) : decode_bf16(bits);
}

// ---- embed ----

TEST_F(CpuOps, EmbedAllDtypes) {
  const int64_t vocab = 37;
  for (int64_t hidden : {1, 17, 129}) {
    std::vector<int32_t> ids = {0, 36, 5, 5, 17, 0, 36};
    BatchView batch;
    batch.n_tokens = static_cast<int>(ids.size());
    batch.token_ids = ids.data();
    std::vector<float> table32 = random(vocab * hidden);
    auto out = poisoned(ids.size() * hidden);
    backend_->embed(batch, view(table32, vocab, hidden), view(out, batch.n_tokens, hidden));
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int64_t c = 0; c < hidden; ++c) {
        ASSERT_EQ(out[t * hidden + c], table32[ids[t] * hidden + c]) << t << "," << c;
      }
    }
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      auto table = random_halves(rng_, vocab * hidden, dtype);
      out = poisoned(ids.size() * hidden);
      backend_->embed(batch, view16(table, dtype, vocab, hidden),
                      view(out, batch.n_tokens, hidden));
      for (size_t t = 0; t < ids.size(); ++t) {
        for (int64_t c = 0; c < hidden; ++c) {
          ASSERT_EQ(out[t * hidden + c], decode(table[ids[t] * hidden + c], dtype))
              << dtype_name(dtype) << " " << t << "," << c;
        }
      }
    }
  }
}

TEST_F(CpuOps, EmbedRejectsOutOfRangeId) {
  std::vector<float> table = random(4 * 3);
  auto out = poisoned(3);
  for (int32_t bad : {4, -1}) {
    BatchView batch;
    batch.n_tokens = 1;
    batch.token_ids = &bad;
    test::expect_error([&] { backend_->embed(batch, view(table, 4, 3), view(out, 1, 3)); },
                       ErrorCategory::kInvalidArgument, {std::to_string(bad)});
  }
}

// ---- rmsnorm, add_rmsnorm ----

std::vector<double> rmsnorm_reference(const float* x, const float* weight, int64_t n, double eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  double inv = 1.0 / std::sqrt(sum / n + eps);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
  return out;
}

TEST_F(CpuOps, RmsNorm) {
  for (int64_t width : {1, 3, 17, 129, 4097}) {
    for (float eps : {1e-6f, 1e-5f}) {
      const int64_t rows = 3;
      auto x = random(rows * width, -2.f, 2.f);
      auto weight = random(width, 0.5f, 1.5f);
      auto out = poisoned(rows * width);
      backend_->rmsnorm(view(x, rows, width), view(weight, 1, width), eps, view(out, rows, width));
      for (int64_t r = 0; r < rows; ++r) {
        auto expected = rmsnorm_reference(&x[r * width], weight.data(), width, eps);
        for (int64_t c = 0; c < width; ++c) {
          ASSERT_TRUE(close(out[r * width + c], expected[c], 1e-5, 1e-3))
              << width << " " << r << "," << c;
        }
      }
    }
  }
}

TEST_F(CpuOps, RmsNormEpsMatters) {
  // A tiny row: eps dominates the mean square, so a wrong or missing eps is visible.
  std::vector<float> x = {1e-3f, -2e-3f, 3e-3f};
  std::vector<float> weight = {1.f, 1.f, 1.f};
  auto out = poisoned(3);
  backend_->rmsnorm(view(x, 1, 3), view(weight, 1, 3), 1e-5f, view(out, 1, 3));
  auto expected = rmsnorm_reference(x.data(), weight.data(), 3, 1e-5);
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(close(out[c], expected[c], 1e-5, 0));
}

TEST_F(CpuOps, AddRmsNorm) {
  for (int64_t width : {1, 17, 4097}) {
    const int64_t rows = 2;
    auto residual = random(rows * width, -2.f, 2.f);
    auto delta = random(rows * width, -2.f, 2.f);
    auto weight = random(width, 0.5f, 1.5f);
    auto before = residual;
    auto out = poisoned(rows * width);
    backend_->add_rmsnorm(view(residual, rows, width), view(delta, rows, width),
                          view(weight, 1, width), 1e-6f, view(out, rows, width));
    for (int64_t i = 0; i < rows * width; ++i) {
      // The residual stream keeps the fp32 sum, exactly rounded.
      ASSERT_EQ(residual[i], static_cast<float>(static_cast<double>(before[i]) + delta[i])) << i;
    }
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> sum(width);
      for (int64_t c = 0; c < width; ++c) sum[c] = before[r * width + c] + delta[r * width + c];
      auto expected = rmsnorm_reference(sum.data(), weight.data(), width, 1e-6);
      for (int64_t c = 0; c < width; ++c) {
        ASSERT_TRUE(close(out[r * width + c], expected[c], 1e-5, 1e-3))
            << width << " " << r << "," << c;
      }
    }
  }
}

// ---- matmul ----

struct MatmulCase {
  int64_t n, m, k;
};

TEST_F(CpuOps, MatmulAllWeightDtypes) {
  const MatmulCase cases[] = {{1, 1, 1},    {1, 17, 3},  {5, 33, 17}, {3, 16, 129},
                              {2, 7, 4097}, {1, 129, 8}, {4, 3, 7},   {1, 40, 4097}};
  for (const auto& c : cases) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(c.n) + " m " +
                   std::to_string(c.m) + " k " + std::to_string(c.k));
      auto x = random(c.n * c.k);
      std::vector<float> w32;
      std::vector<uint16_t> w16;
      std::vector<double> w_exact(c.m * c.k);
      Tensor w;
      if (dtype == DType::kF32) {
        w32 = random(c.m * c.k);
        for (size_t i = 0; i < w32.size(); ++i) w_exact[i] = w32[i];
        w = view(w32, c.m, c.k);
      } else {
        w16 = random_halves(rng_, c.m * c.k, dtype);
        for (size_t i = 0; i < w16.size(); ++i) w_exact[i] = decode(w16[i], dtype);
        w = view16(w16, dtype, c.m, c.k);
      }
      auto out = poisoned(c.n * c.m);
      backend_->matmul(view(x, c.n, c.k), w, view(out, c.n, c.m));
      for (int64_t i = 0; i < c.n; ++i) {
        for (int64_t j = 0; j < c.m; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t e = 0; e < c.k; ++e) {
            double product = x[i * c.k + e] * w_exact[j * c.k + e];
            sum += product;
            magnitude += std::abs(product);
          }
          // fp32 accumulation error scales with Σ|x·w|, not with the (cancelling) result.
          double error = std::abs(out[i * c.m + j] - sum);
          ASSERT_LE(error, 1e-5 * magnitude + 1e-30)
              << "row " << i << " col " << j << " got " << out[i * c.m + j] << " want " << sum;
        }
      }
    }
  }
}

TEST_F(CpuOps, MatmulWeightsAtUnalignedAddress) {
  // Tensors mapped from a safetensors file start wherever the header ends: any address.
  const int64_t n = 2, m = 19, k = 13;
  auto x = random(n * k);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<double> w_exact(m * k);
    std::vector<unsigned char> storage(m * k * dtype_size(dtype) + 1);
    if (dtype == DType::kF32) {
      auto w = random(m * k);
      for (size_t i = 0; i < w.size(); ++i) w_exact[i] = w[i];
      std::memcpy(storage.data() + 1, w.data(), w.size() * 4);
    } else {
      auto w = random_halves(rng_, m * k, dtype);
      for (size_t i = 0; i < w.size(); ++i) w_exact[i] = decode(w[i], dtype);
      std::memcpy(storage.data() + 1, w.data(), w.size() * 2);
    }
    Tensor weights{storage.data() + 1, dtype, m, k};
    auto out = poisoned(n * m);
    backend_->matmul(view(x, n, k), weights, view(out, n, m));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t e = 0; e < k; ++e) {
          sum += x[i * k + e] * w_exact[j * k + e];
          magnitude += std::abs(x[i * k + e] * w_exact[j * k + e]);
        }
        ASSERT_LE(std::abs(out[i * m + j] - sum), 1e-5 * magnitude + 1e-30) << i << "," << j;
      }
    }
    // The embedding table is read the same way.
    std::vector<int32_t> ids = {3, 0, 18};
    BatchView batch;
    batch.n_tokens = 3;
    batch.token_ids = ids.data();
    auto embedded = poisoned(3 * k);
    backend_->embed(batch, weights, view(embedded, 3, k));
    for (int t = 0; t < 3; ++t) {
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_EQ(embedded[t * k + c], w_exact[ids[t] * k + c]) << t << "," << c;
      }
    }
  }
}

TEST_F(CpuOps, MatmulRejectsShapeMismatch) {
  auto x = random(2 * 3);
  auto w = random(4 * 5);
  auto out = poisoned(2 * 4);
  EXPECT_THROW(backend_->matmul(view(x, 2, 3), view(w, 4, 5), view(out, 2, 4)), Error);
}

// ---- ragged batches over a paged cache ----

struct SeqSpec {
  int start;  // cached positions before this step
  int n_new;  // new tokens this step
};

// Host arrays behind a BatchView: each sequence gets blocks drawn from a shuffled pool, so
// block tables are non-contiguous and interleaved between sequences. Unused table entries
// point at a spare block that stays poisoned.
struct PagedBatch {
  int block_size = 16;
  int num_blocks = 0;
  int spare_block = 0;
  std::vector<SeqSpec> seqs;
  std::vector<int32_t> token_ids, positions, slot_mapping, token_seq, seq_starts, context_lens,
      block_tables;
  int max_blocks = 0;

  PagedBatch(const std::vector<SeqSpec>& specs, std::mt19937& rng) : seqs(specs) {
    std::vector<int> blocks_needed;
    int total = 0;
    for (const auto& s : seqs) {
      int needed = (s.start + s.n_new + block_size - 1) / block_size;
      blocks_needed.push_back(needed);
      total += needed;
      max_blocks = std::max(max_blocks, needed);
    }
    num_blocks = total + 3;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    spare_block = pool.back();
    std::vector<std::vector<int32_t>> tables(seqs.size());
    // Deal blocks round-robin so sequences' blocks interleave in the pool.
    size_t next = 0;
    for (int round = 0; round < max_blocks; ++round) {
      for (size_t s = 0; s < seqs.size(); ++s) {
        if (round < blocks_needed[s]) tables[s].push_back(pool[next++]);
      }
    }
    block_tables.assign(seqs.size() * max_blocks, spare_block);
    seq_starts.push_back(0);
    for (size_t s = 0; s < seqs.size(); ++s) {
      std::copy(tables[s].begin(), tables[s].end(), block_tables.begin() + s * max_blocks);
      for (int i = 0; i < seqs[s].n_new; ++i) {
        int position = seqs[s].start + i;
        token_ids.push_back(static_cast<int32_t>(token_ids.size() % 7));
        positions.push_back(position);
        slot_mapping.push_back(slot(static_cast<int>(s), position));
        token_seq.push_back(static_cast<int32_t>(s));
      }
      seq_starts.push_back(static_cast<int32_t>(token_ids.size()));
      context_lens.push_back(seqs[s].start + seqs[s].n_new);
    }
  }

  int32_t slot(int seq, int position) const {
    return block_tables[seq * max_blocks + position / block_size] * block_size +
           position % block_size;
  }

  BatchView view() const {
    BatchView batch;
    batch.n_tokens = static_cast<int>(token_ids.size());
    batch.n_seqs = static_cast<int>(seqs.size());
    for (const auto& s : seqs) {
      batch.max_new_tokens = std::max(batch.max_new_tokens, s.n_new);
      batch.max_context_len = std::max(batch.max_context_len, s.start + s.n_new);
    }
    batch.max_blocks_per_seq = max_blocks;
    batch.token_ids = token_ids.data();
    batch.positions = positions.data();
    batch.slot_mapping = slot_mapping.data();
    batch.token_seq = token_seq.data();
    batch.seq_starts = seq_starts.data();
    batch.context_lens = context_lens.data();
    batch.block_tables = block_tables.data();
    return batch;
  }
};

// Prefill from 0, a decode step, a chunk crossing block boundaries, one ending exactly on a
// boundary, and a long context.
const std::vector<SeqSpec> kSeqs = {{0, 5}, {37, 1}, {10, 20}, {15, 17}, {100, 3}};

std::vector<float> default_inv_freq(int head_dim, double theta) {
  std::vector<float> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
  }
  return inv_freq;
}

struct QkvCase {
  int head_dim, n_heads, n_kv_heads;
  bool bias, qk_norm;
  float rope_scaling;
};

TEST_F(CpuOps, QkvRopeKvWrite) {
  const QkvCase cases[] = {{8, 8, 1, true, false, 1.f},     // Qwen2-like, GQA 8
                           {64, 4, 4, false, true, 1.f},    // Qwen3-like, MHA
                           {128, 6, 2, true, true, 1.1f},   // Qwen3 with attention_bias, YaRN scale
                           {64, 14, 2, true, false, 1.f}};  // Qwen2.5-0.5B's head layout
  for (const auto& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " heads " + std::to_string(c.n_heads) +
                 "/" + std::to_string(c.n_kv_heads));
    PagedBatch paged(kSeqs, rng_);
    BatchView batch = paged.view();
    const int n = batch.n_tokens, d = c.head_dim, half = d / 2;
    const int q_dim = c.n_heads * d, kv_dim = c.n_kv_heads * d;
    AttentionParams attn{c.n_heads, c.n_kv_heads, d, 1.f / std::sqrt(static_cast<float>(d)), 0};
    auto q = random(n * q_dim), k = random(n * kv_dim), v = random(n * kv_dim);
    const auto q_in = q, k_in = k, v_in = v;
    auto q_bias = random(q_dim), k_bias = random(kv_dim), v_bias = random(kv_dim);
    auto q_norm = random(d, 0.5f, 1.5f), k_norm = random(d, 0.5f, 1.5f);
    auto inv_freq = default_inv_freq(d, 1e4);
    QkvEpilogue epilogue;
    if (c.bias) {
      epilogue.q_bias = view(q_bias, 1, q_dim);
      epilogue.k_bias = view(k_bias, 1, kv_dim);
      epilogue.v_bias = view(v_bias, 1, kv_dim);
    }
    if (c.qk_norm) {
      epilogue.q_norm = view(q_norm, 1, d);
      epilogue.k_norm = view(k_norm, 1, d);
    }
    epilogue.norm_eps = 1e-6f;
    epilogue.inv_freq = inv_freq.data();
    epilogue.rope_scaling = c.rope_scaling;
    KvGeometry geometry{paged.num_blocks, paged.block_size, c.n_kv_heads, d, DType::kF32};
    const size_t pool_elems = static_cast<size_t>(paged.num_blocks) * paged.block_size * kv_dim;
    auto k_pool = poisoned(pool_elems), v_pool = poisoned(pool_elems);
    backend_->qkv_rope_kvwrite(batch, attn, epilogue, view(q, n, q_dim), view(k, n, kv_dim),
                               view(v, n, kv_dim), geometry, KvLayer{k_pool.data(), v_pool.data()});

    // bias → per-head RMSNorm → rotate-half RoPE; the angle is an fp32 product as in
    // transformers, everything after it in double.
    auto expected_head = [&](const float* raw, const float* bias, const float* norm, int position) {
      std::vector<double> x(d);
      for (int i = 0; i < d; ++i) x[i] = static_cast<double>(raw[i]) + (bias ? bias[i] : 0.0);
      if (norm) {
        double sum = 0;
        for (double value : x) sum += value * value;
        double inv = 1.0 / std::sqrt(sum / d + 1e-6);
        for (int i = 0; i < d; ++i) x[i] = norm[i] * (x[i] * inv);
      }
      std::vector<double> out(d);
      for (int i = 0; i < half; ++i) {
        float angle = static_cast<float>(position) * inv_freq[i];
        double cos_a = std::cos(static_cast<double>(angle)) * c.rope_scaling;
        double sin_a = std::sin(static_cast<double>(angle)) * c.rope_scaling;
        out[i] = x[i] * cos_a - x[i + half] * sin_a;
        out[i + half] = x[i + half] * cos_a + x[i] * sin_a;
      }
      return out;
    };
    std::vector<bool> slot_written(static_cast<size_t>(paged.num_blocks) * paged.block_size, false);
    for (int t = 0; t < n; ++t) {
      const int position = paged.positions[t];
      for (int h = 0; h < c.n_heads; ++h) {
        auto expected = expected_head(&q_in[t * q_dim + h * d], c.bias ? &q_bias[h * d] : nullptr,
                                      c.qk_norm ? q_norm.data() : nullptr, position);
        for (int i = 0; i < d; ++i) {
          ASSERT_TRUE(close(q[t * q_dim + h * d + i], expected[i], 1e-5, 1.0))
              << "q token " << t << " head " << h << " dim " << i;
        }
      }
      const int slot = paged.slot(paged.token_seq[t], position);
      ASSERT_EQ(slot, paged.slot_mapping[t]);
      slot_written[slot] = true;
      for (int h = 0; h < c.n_kv_heads; ++h) {
        auto expected = expected_head(&k_in[t * kv_dim + h * d], c.bias ? &k_bias[h * d] : nullptr,
                                      c.qk_norm ? k_norm.data() : nullptr, position);
        for (int i = 0; i < d; ++i) {
          ASSERT_TRUE(close(k_pool[slot * kv_dim + h * d + i], expected[i], 1e-5, 1.0))
              << "cached k token " << t << " head " << h << " dim " << i;
          // V gets its bias only: no norm, no rotation.
          double v_expected = static_cast<double>(v_in[t * kv_dim + h * d + i]) +
                              (c.bias ? v_bias[h * d + i] : 0.0);
          ASSERT_TRUE(close(v_pool[slot * kv_dim + h * d + i], v_expected, 1e-6, 1.0))
              << "cached v token " << t << " head " << h << " dim " << i;
        }
      }
    }
    // Nothing outside the new tokens' slots may be touched.
    for (size_t slot = 0; slot < slot_written.size(); ++slot) {
      if (slot_written[slot]) continue;
      for (int i = 0; i < kv_dim; ++i) {
        ASSERT_TRUE(std::isnan(k_pool[slot * kv_dim + i]) && std::isnan(v_pool[slot * kv_dim + i]))
            << "slot " << slot << " was written";
      }
    }
  }
}

TEST_F(CpuOps, RopeAtPositionZeroIsIdentityTimesScaling) {
  // cos 0 = 1, sin 0 = 0: without bias and norm, q comes back scaled by rope_scaling only.
  PagedBatch paged({{0, 1}}, rng_);
  BatchView batch = paged.view();
  const int d = 16;
  auto q = random(2 * d), k = random(d), v = random(d);
  const auto q_in = q;
  auto inv_freq = default_inv_freq(d, 1e6);
  QkvEpilogue epilogue;
  epilogue.inv_freq = inv_freq.data();
  epilogue.rope_scaling = 1.25f;
  KvGeometry geometry{paged.num_blocks, paged.block_size, 1, d, DType::kF32};
  auto k_pool = poisoned(static_cast<size_t>(paged.num_blocks) * paged.block_size * d);
  auto v_pool = k_pool;
  AttentionParams attn{2, 1, d, 0.25f, 0};
  backend_->qkv_rope_kvwrite(batch, attn, epilogue, view(q, 1, 2 * d), view(k, 1, d), view(v, 1, d),
                             geometry, KvLayer{k_pool.data(), v_pool.data()});
  for (int i = 0; i < 2 * d; ++i) EXPECT_FLOAT_EQ(q[i], q_in[i] * 1.25f) << i;
}

struct AttentionCase {
  int head_dim, n_heads, n_kv_heads, sliding_window;
};

TEST_F(CpuOps, PagedAttention) {
  const AttentionCase cases[] = {{64, 4, 4, 0}, {8, 8, 1, 0},   {128, 6, 2, 0}, {64, 14, 2, 0},
                                 {8, 8, 4, 5},  {64, 3, 1, 17}, {8, 4, 2, 1},   {128, 8, 8, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " heads " + std::to_string(c.n_heads) +
                 "/" + std::to_string(c.n_kv_heads) + " window " +
                 std::to_string(c.sliding_window));
    PagedBatch paged(kSeqs, rng_);
    BatchView batch = paged.view();
    const int n = batch.n_tokens, d = c.head_dim;
    const int q_dim = c.n_heads * d, kv_dim = c.n_kv_heads * d;
    const int group = c.n_heads / c.n_kv_heads;
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    AttentionParams attn{c.n_heads, c.n_kv_heads, d, scale, c.sliding_window};
    KvGeometry geometry{paged.num_blocks, paged.block_size, c.n_kv_heads, d, DType::kF32};
    const size_t pool_elems = static_cast<size_t>(paged.num_blocks) * paged.block_size * kv_dim;
    auto k_pool = poisoned(pool_elems), v_pool = poisoned(pool_elems);
    // Every position the sequences hold after this step (cached and new) gets random K/V.
    for (size_t s = 0; s < paged.seqs.size(); ++s) {
      for (int p = 0; p < paged.context_lens[s]; ++p) {
        int slot = paged.slot(static_cast<int>(s), p);
        auto k_row = random(kv_dim), v_row = random(kv_dim);
        std::copy(k_row.begin(), k_row.end(), k_pool.begin() + static_cast<size_t>(slot) * kv_dim);
        std::copy(v_row.begin(), v_row.end(), v_pool.begin() + static_cast<size_t>(slot) * kv_dim);
      }
    }
    auto q = random(n * q_dim);
    auto out = poisoned(n * q_dim);
    backend_->attention(batch, attn, view(q, n, q_dim), geometry,
                        KvLayer{k_pool.data(), v_pool.data()}, view(out, n, q_dim));
    for (int t = 0; t < n; ++t) {
      const int seq = paged.token_seq[t], position = paged.positions[t];
      // Causal, and with a window only keys with pos > position - window.
      const int first = c.sliding_window > 0 ? std::max(0, position - c.sliding_window + 1) : 0;
      for (int h = 0; h < c.n_heads; ++h) {
        const int kv_head = h / group;
        std::vector<double> scores;
        double max_score = -INFINITY;
        for (int j = first; j <= position; ++j) {
          const float* key =
              &k_pool[static_cast<size_t>(paged.slot(seq, j)) * kv_dim + kv_head * d];
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += static_cast<double>(q[t * q_dim + h * d + i]) * key[i];
          scores.push_back(dot * scale);
          max_score = std::max(max_score, scores.back());
        }
        double denominator = 0;
        for (double& s : scores) denominator += (s = std::exp(s - max_score));
        for (int i = 0; i < d; ++i) {
          double expected = 0;
          for (int j = first; j <= position; ++j) {
            const float* value =
                &v_pool[static_cast<size_t>(paged.slot(seq, j)) * kv_dim + kv_head * d];
            expected += scores[j - first] / denominator * value[i];
          }
          // Values are in [-1, 1], so the output's scale is 1.
          ASSERT_TRUE(close(out[t * q_dim + h * d + i], expected, 1e-5, 1.0))
              << "token " << t << " (seq " << seq << ", pos " << position << ") head " << h
              << " dim " << i;
        }
      }
    }
  }
}

TEST_F(CpuOps, AttentionSingleKeyReturnsItsValue) {
  // At position 0 the softmax has one term: the output is exactly v of the head's KV group.
  PagedBatch paged({{0, 1}}, rng_);
  BatchView batch = paged.view();
  const int d = 8, heads = 4, kv_heads = 2;
  KvGeometry geometry{paged.num_blocks, paged.block_size, kv_heads, d, DType::kF32};
  auto k_pool = poisoned(static_cast<size_t>(paged.num_blocks) * paged.block_size * kv_heads * d);
  auto v_pool = k_pool;
  int slot = paged.slot(0, 0);
  for (int i = 0; i < kv_heads * d; ++i) {
    k_pool[slot * kv_heads * d + i] = 0.5f;
    v_pool[slot * kv_heads * d + i] = static_cast<float>(i);
  }
  auto q = random(heads * d);
  auto out = poisoned(heads * d);
  backend_->attention(batch, AttentionParams{heads, kv_heads, d, 0.3f, 0}, view(q, 1, heads * d),
                      geometry, KvLayer{k_pool.data(), v_pool.data()}, view(out, 1, heads * d));
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < d; ++i) {
      // Heads 0, 1 read KV head 0; heads 2, 3 read KV head 1.
      EXPECT_FLOAT_EQ(out[h * d + i], static_cast<float>((h / 2) * d + i)) << h << "," << i;
    }
  }
}

// ---- elementwise ----

TEST_F(CpuOps, SiluMul) {
  for (int64_t width : {1, 3, 17, 129, 4097 * 3}) {
    auto gate = random(2 * width, -8.f, 8.f), up = random(2 * width, -2.f, 2.f);
    auto out = poisoned(2 * width);
    backend_->silu_mul(view(gate, 2, width), view(up, 2, width), view(out, 2, width));
    for (int64_t i = 0; i < 2 * width; ++i) {
      double g = gate[i];
      double expected = g / (1.0 + std::exp(-g)) * up[i];
      ASSERT_TRUE(close(out[i], expected, 1e-5, 1e-6)) << width << " " << i;
    }
  }
}

TEST_F(CpuOps, AddBias) {
  for (int64_t width : {1, 17, 129}) {
    auto x = random(3 * width), bias = random(width);
    const auto before = x;
    backend_->add_bias(view(x, 3, width), view(bias, 1, width));
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < width; ++c) {
        ASSERT_EQ(x[r * width + c],
                  static_cast<float>(static_cast<double>(before[r * width + c]) + bias[c]));
      }
    }
  }
}

TEST_F(CpuOps, AdjustLogits) {
  // (row, id, bias bits): -inf bans (kBannedLogit), anything else is added; entries outside
  // the tensor are skipped.
  auto logits = random(3 * 10);
  auto want = logits;
  const int32_t ban = std::bit_cast<int32_t>(-INFINITY);
  std::vector<int32_t> entries = {0, 4, ban, 2, 9, std::bit_cast<int32_t>(1.5f), 1, 0, std::bit_cast<int32_t>(-100.f),
                                  3, 0, ban, -1, 2, ban, 0, 10, std::bit_cast<int32_t>(1.f)};
  want[0 * 10 + 4] = kBannedLogit;
  want[2 * 10 + 9] += 1.5f;
  want[1 * 10 + 0] += -100.f;
  backend_->adjust_logits(view(logits, 3, 10), entries.data(), static_cast<int>(entries.size() / 3));
  EXPECT_EQ(logits, want);
}

TEST_F(CpuOps, MaskLogits) {
  // A vocabulary of 70 ids: three mask words, the last one partly past the vocabulary. Rows
  // 2 and 0 are masked (in that order), rows 1 and 3 are not; the rows outside the tensor are
  // skipped (their masks allow nothing).
  const int64_t vocab = 70;
  const int words = token_mask_words(vocab);
  ASSERT_EQ(words, 3);
  auto logits = random(4 * vocab);
  auto want = logits;
  std::vector<int32_t> rows = {2, 0, 4, -1};
  std::vector<uint32_t> masks(rows.size() * words, 0);
  const auto allow = [&](size_t i, int64_t id) { masks[i * words + id / 32] |= 1u << (id % 32); };
  for (const int64_t id : {0, 5, 31, 32, 63, 64, 69}) allow(0, id);
  masks[0 * words + 2] |= 0xffffffc0u;  // bits 70..95 set, past the vocabulary: no effect
  masks[1 * words + 1] = 0xffffffffu;   // row 0: ids 32..63 only (its clear bits 70..95 must not spill into row 1)
  for (int64_t id = 0; id < vocab; ++id) {
    const bool row2 = id == 0 || id == 5 || id == 31 || id == 32 || id == 63 || id == 64 || id == 69;
    if (!row2) want[2 * vocab + id] = kBannedLogit;
    if (id < 32 || id >= 64) want[0 * vocab + id] = kBannedLogit;
  }
  backend_->mask_logits(view(logits, 4, vocab), rows.data(), masks.data(), static_cast<int>(rows.size()));
  EXPECT_EQ(logits, want);
  // n = 0 changes nothing.
  const auto before = logits;
  backend_->mask_logits(view(logits, 4, vocab), rows.data(), masks.data(), 0);
  EXPECT_EQ(logits, before);
}

TEST_F(CpuOps, GatherRows) {
  std::vector<int32_t> rows = {6, 0, 3, 3, 6};
  auto x = random(7 * 13);
  auto out = poisoned(rows.size() * 13);
  backend_->gather_rows(view(x, 7, 13), rows.data(),
                        view(out, static_cast<int64_t>(rows.size()), 13));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int c = 0; c < 13; ++c) ASSERT_EQ(out[i * 13 + c], x[rows[i] * 13 + c]) << i << "," << c;
  }
  // 16-bit rows move as bytes.
  auto x16 = random_halves(rng_, 7 * 5, DType::kBF16);
  std::vector<uint16_t> out16(rows.size() * 5, 0xffff);
  backend_->gather_rows(view16(x16, DType::kBF16, 7, 5), rows.data(),
                        view16(out16, DType::kBF16, static_cast<int64_t>(rows.size()), 5));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int c = 0; c < 5; ++c) ASSERT_EQ(out16[i * 5 + c], x16[rows[i] * 5 + c]) << i << "," << c;
  }
}

}  // namespace
}  // namespace qwenrt
