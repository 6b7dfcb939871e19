// The CPU reference backend: every op in fp32 arithmetic on host memory, matrix products
// and attention spread over a thread pool. Weight matrices may be bf16/fp16/f32 (used in
// place from the mapped checkpoint); each thread converts a tile of weight rows to fp32
// once and reuses it for every input row, so the conversion costs O(m·k), not O(n·m·k).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/units.h"
#include "engine/sampler.h"

namespace qwenrt {
namespace {

constexpr int kWeightTileRows = 16;

void release_host(void* pointer) { std::free(pointer); }

// Dot product with 8 independent accumulators so the compiler can vectorise it.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int lane = 0; lane < 8; ++lane) acc[lane] += a[i + lane] * b[i + lane];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void require_f32(const Tensor& tensor, const char* op, const char* what) {
  if (tensor.dtype != DType::kF32) {
    throw Error(ErrorCategory::kInternal,
                std::string("cpu ") + op + ": " + what + " must be f32, got " + dtype_name(tensor.dtype));
  }
}

void rmsnorm_row(const float* x, const float* weight, float eps, int64_t n, float* out) {
  double sum_squares = 0;  // fp32 in transformers; a wider sum only removes rounding
  for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  float inv = 1.0f / std::sqrt(static_cast<float>(sum_squares / n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

}  // namespace

double available_host_bytes() {
  FILE* meminfo = std::fopen("/proc/meminfo", "r");
  if (meminfo == nullptr) return 0;
  char line[256];
  double bytes = 0;
  while (std::fgets(line, sizeof(line), meminfo) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      bytes = static_cast<double>(kib) * 1024.0;
      break;
    }
  }
  std::fclose(meminfo);
  return bytes;
}

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads) {}

  std::string name() const override { return "cpu"; }
  DType activation_dtype() const override { return DType::kF32; }
  bool uses_host_memory() const override { return true; }
  DeviceMemoryInfo memory_info() const override { return {}; }
  DeviceInfo device_info() const override {
    DeviceInfo info{name(), 0, 0};
    info.threads = pool_.size();
    return info;
  }

  DeviceBuffer allocate(size_t bytes, const char* what) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr) {
      // How much was asked and how much the machine has, in GiB, and what to lower.
      const double available = available_host_bytes();
      const std::string free_text = available > 0 ? ", " + format_gib(available) + " available" : "";
      throw Error(ErrorCategory::kOutOfMemory, "cannot allocate " + format_gib(static_cast<double>(bytes)) +
                                                   " of host memory for " + what + free_text +
                                                   ": use a smaller model, or lower --kv-cache-gb or --max-context");
    }
    return DeviceBuffer(data, bytes, &release_host);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void upload_converted(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                        size_t count) override {
    if (dst_dtype == src_dtype) {
      std::memcpy(dst, src, count * dtype_size(src_dtype));
      return;
    }
    std::vector<float> staging(count);
    convert_to_f32(src, src_dtype, staging.data(), count);
    convert_from_f32(staging.data(), dst, dst_dtype, count);
  }
  void synchronize() override {}

  // Host memory: fill in parallel, each chunk from its own counter-derived stream.
  void fill_random(Tensor tensor, uint64_t seed, float scale, float offset) override {
    constexpr int64_t kChunk = 1 << 16;
    const int64_t total = tensor.numel();
    pool_.parallel_for((total + kChunk - 1) / kChunk, 1, [&](int64_t first, int64_t last) {
      std::vector<float> values(kChunk);
      for (int64_t chunk = first; chunk < last; ++chunk) {
        int64_t begin = chunk * kChunk;
        int64_t count = std::min(kChunk, total - begin);
        uint64_t state = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(chunk)));
        for (int64_t i = 0; i < count; ++i) {
          state = splitmix64(state);
          values[i] = offset + scale * (2.0f * unit_float(state) - 1.0f);
        }
        convert_from_f32(values.data(), static_cast<char*>(tensor.data) + begin * dtype_size(tensor.dtype),
                         tensor.dtype, static_cast<size_t>(count));
      }
    });
  }

  void embed(const BatchView& batch, const Tensor& table, Tensor out) override {
    require_f32(out, "embed", "out");
    const int64_t hidden = table.cols;
    for (int t = 0; t < batch.n_tokens; ++t) {
      int32_t id = batch.token_ids[t];
      if (id < 0 || id >= table.rows) {
        throw Error(ErrorCategory::kInvalidArgument,
                    "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(table.rows) + ")");
      }
      const char* row = static_cast<const char*>(table.data) + static_cast<size_t>(id) * hidden * dtype_size(table.dtype);
      convert_to_f32(row, table.dtype, out.as<float>() + t * hidden, hidden);
    }
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    require_f32(x, "rmsnorm", "x");
    require_f32(weight, "rmsnorm", "weight");
    for (int64_t r = 0; r < x.rows; ++r) {
      rmsnorm_row(x.as<float>() + r * x.cols, weight.as<float>(), eps, x.cols, out.as<float>() + r * x.cols);
    }
  }

  void add_rmsnorm(Tensor residual, const Tensor& delta, const Tensor& weight, float eps,
                   Tensor out) override {
    require_f32(residual, "add_rmsnorm", "residual");
    require_f32(delta, "add_rmsnorm", "delta");
    float* res = residual.as<float>();
    const float* add = delta.as<float>();
    for (int64_t i = 0; i < residual.numel(); ++i) res[i] += add[i];
    rmsnorm(residual, weight, eps, out);
  }

  void matmul(const Tensor& x, const Tensor& w, Tensor out) override {
    require_f32(x, "matmul", "x");
    require_f32(out, "matmul", "out");
    QWENRT_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows,
                 "matmul shapes: x [" + std::to_string(x.rows) + "," + std::to_string(x.cols) +
                     "] w [" + std::to_string(w.rows) + "," + std::to_string(w.cols) + "]");
    const int64_t n = x.rows, m = w.rows, k = w.cols;
    const float* in = x.as<float>();
    float* result = out.as<float>();
    const size_t elem = dtype_size(w.dtype);
    int64_t tiles = (m + kWeightTileRows - 1) / kWeightTileRows;
    pool_.parallel_for(tiles, 1, [&](int64_t first_tile, int64_t end_tile) {
      // Each thread's tile is kept between products (1.2 MB for a 7B's down projection: a
      // fresh one a product would be mapped and unmapped each time where malloc maps large
      // blocks, as the server has it).
      thread_local std::vector<float> tile;
      if (tile.size() < static_cast<size_t>(kWeightTileRows * k)) tile.resize(static_cast<size_t>(kWeightTileRows * k));
      for (int64_t t = first_tile; t < end_tile; ++t) {
        int64_t row0 = t * kWeightTileRows;
        int64_t rows = std::min<int64_t>(kWeightTileRows, m - row0);
        const float* weights;
        // f32 weights are read in place unless the mapped file left them misaligned (the
        // safetensors format does not pad its data area); those go through the tile copy.
        if (w.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0) {
          weights = w.as<float>() + row0 * k;
        } else {
          convert_to_f32(static_cast<const char*>(w.data) + static_cast<size_t>(row0 * k) * elem,
                         w.dtype, tile.data(), static_cast<size_t>(rows * k));
          weights = tile.data();
        }
        for (int64_t i = 0; i < n; ++i) {
          const float* x_row = in + i * k;
          float* out_row = result + i * m + row0;
          for (int64_t j = 0; j < rows; ++j) out_row[j] = dot(x_row, weights + j * k, k);
        }
      }
    });
  }

  void qkv_rope_kvwrite(const BatchView& batch, const AttentionParams& attn,
                        const QkvEpilogue& epilogue, Tensor q, Tensor k, Tensor v,
                        const KvGeometry& geometry, KvLayer cache) override {
    require_f32(q, "qkv_rope_kvwrite", "q");
    QWENRT_CHECK(geometry.dtype == DType::kF32, "cpu KV cache must be f32");
    const int head_dim = attn.head_dim;
    const int half = head_dim / 2;
    const int64_t q_dim = static_cast<int64_t>(attn.n_heads) * head_dim;
    const int64_t kv_dim = static_cast<int64_t>(attn.n_kv_heads) * head_dim;
    auto add_bias = [](float* row, const Tensor& bias, int64_t n) {
      if (bias.data == nullptr) return;
      const float* b = bias.as<float>();
      for (int64_t i = 0; i < n; ++i) row[i] += b[i];
    };
    pool_.parallel_for(batch.n_tokens, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> cos_table(half), sin_table(half), scratch(head_dim);
      for (int64_t t = begin; t < end; ++t) {
        float* q_row = q.as<float>() + t * q_dim;
        float* k_row = k.as<float>() + t * kv_dim;
        float* v_row = v.as<float>() + t * kv_dim;
        add_bias(q_row, epilogue.q_bias, q_dim);
        add_bias(k_row, epilogue.k_bias, kv_dim);
        add_bias(v_row, epilogue.v_bias, kv_dim);
        const float position = static_cast<float>(batch.positions[t]);
        const int rope_row = batch.rope_rows != nullptr ? batch.rope_rows[batch.token_seq[t]] : 0;
        const float* inv_freq = epilogue.inv_freq + static_cast<int64_t>(rope_row) * half;
        for (int i = 0; i < half; ++i) {
          float angle = position * inv_freq[i];  // fp32 product, as transformers
          cos_table[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * epilogue.rope_scaling;
          sin_table[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * epilogue.rope_scaling;
        }
        auto norm_and_rotate = [&](float* head, const Tensor& norm) {
          if (norm.data != nullptr) {
            rmsnorm_row(head, norm.as<float>(), epilogue.norm_eps, head_dim, scratch.data());
            std::memcpy(head, scratch.data(), sizeof(float) * head_dim);
          }
          for (int i = 0; i < half; ++i) {
            float x1 = head[i], x2 = head[i + half];
            head[i] = x1 * cos_table[i] - x2 * sin_table[i];
            head[i + half] = x2 * cos_table[i] + x1 * sin_table[i];
          }
        };
        for (int h = 0; h < attn.n_heads; ++h) norm_and_rotate(q_row + h * head_dim, epilogue.q_norm);
        if (const float logn = logn_scale(epilogue.logn_length, batch.positions[t]); logn != 1.f) {
          for (int64_t i = 0; i < q_dim; ++i) q_row[i] *= logn;
        }
        for (int h = 0; h < attn.n_kv_heads; ++h) norm_and_rotate(k_row + h * head_dim, epilogue.k_norm);
        const int64_t slot = batch.slot_mapping[t];
        float* k_dst = static_cast<float*>(cache.k) + slot * kv_dim;
        float* v_dst = static_cast<float*>(cache.v) + slot * kv_dim;
        std::memcpy(k_dst, k_row, sizeof(float) * kv_dim);
        std::memcpy(v_dst, v_row, sizeof(float) * kv_dim);
      }
    });
  }

  void attention(const BatchView& batch, const AttentionParams& attn, const Tensor& q,
                 const KvGeometry& geometry, KvLayer cache, Tensor out) override {
    require_f32(q, "attention", "q");
    QWENRT_CHECK(geometry.dtype == DType::kF32, "cpu KV cache must be f32");
    const int head_dim = attn.head_dim;
    const int group = attn.n_heads / attn.n_kv_heads;
    const int64_t q_dim = static_cast<int64_t>(attn.n_heads) * head_dim;
    const int64_t kv_dim = static_cast<int64_t>(attn.n_kv_heads) * head_dim;
    const int block_size = geometry.block_size;
    const float* k_pool = static_cast<const float*>(cache.k);
    const float* v_pool = static_cast<const float*>(cache.v);
    int64_t work = static_cast<int64_t>(batch.n_tokens) * attn.n_heads;
    pool_.parallel_for(work, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores;
      std::vector<float> accum(head_dim);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / attn.n_heads;
        const int h = static_cast<int>(item % attn.n_heads);
        const int kv_head = h / group;
        const int seq = batch.token_seq[t];
        const int position = batch.positions[t];
        const int32_t* blocks = batch.block_tables + static_cast<int64_t>(seq) * batch.max_blocks_per_seq;
        int first = 0;
        if (attn.sliding_window > 0) first = std::max(0, position - attn.sliding_window + 1);
        const float* q_head = q.as<float>() + t * q_dim + static_cast<int64_t>(h) * head_dim;
        scores.resize(position + 1);
        float max_score = -INFINITY;
        for (int j = first; j <= position; ++j) {
          int64_t slot = static_cast<int64_t>(blocks[j / block_size]) * block_size + j % block_size;
          const float* k_head = k_pool + slot * kv_dim + static_cast<int64_t>(kv_head) * head_dim;
          scores[j] = dot(q_head, k_head, head_dim) * attn.scale;
          max_score = std::max(max_score, scores[j]);
        }
        double denominator = 0;
        for (int j = first; j <= position; ++j) {
          scores[j] = std::exp(scores[j] - max_score);
          denominator += scores[j];
        }
        std::fill(accum.begin(), accum.end(), 0.f);
        for (int j = first; j <= position; ++j) {
          int64_t slot = static_cast<int64_t>(blocks[j / block_size]) * block_size + j % block_size;
          const float* v_head = v_pool + slot * kv_dim + static_cast<int64_t>(kv_head) * head_dim;
          float weight = scores[j];
          for (int d = 0; d < head_dim; ++d) accum[d] += weight * v_head[d];
        }
        float* out_head = out.as<float>() + t * q_dim + static_cast<int64_t>(h) * head_dim;
        float inv = static_cast<float>(1.0 / denominator);
        for (int d = 0; d < head_dim; ++d) out_head[d] = accum[d] * inv;
      }
    });
  }

  void add_bias(Tensor x, const Tensor& bias) override {
    require_f32(x, "add_bias", "x");
    require_f32(bias, "add_bias", "bias");
    for (int64_t r = 0; r < x.rows; ++r) {
      float* row = x.as<float>() + r * x.cols;
      for (int64_t c = 0; c < x.cols; ++c) row[c] += bias.as<float>()[c];
    }
  }

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) override {
    require_f32(gate, "silu_mul", "gate");
    const float* g = gate.as<float>();
    const float* u = up.as<float>();
    float* o = out.as<float>();
    pool_.parallel_for(gate.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    });
  }

  void gather_rows(const Tensor& x, const int32_t* rows, Tensor out) override {
    const size_t row_bytes = static_cast<size_t>(x.cols) * dtype_size(x.dtype);
    for (int64_t i = 0; i < out.rows; ++i) {
      QWENRT_CHECK(rows[i] >= 0 && rows[i] < x.rows, "gather_rows index out of range");
      std::memcpy(static_cast<char*>(out.data) + i * row_bytes,
                  static_cast<const char*>(x.data) + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
    }
  }

  void sample(const Tensor& logits, const SamplingParams& params, uint64_t step,
              const int32_t* history, const int32_t* history_lens, int history_stride,
              int32_t* out_ids, int32_t* host_ids) override {
    for (int64_t r = 0; r < logits.rows; ++r) {
      const int32_t* row_history = history != nullptr && history_lens != nullptr ? history + r * history_stride : nullptr;
      out_ids[r] = sample_one(logits, r, SampleRow{params, step, static_cast<uint64_t>(r)}, row_history,
                              row_history != nullptr ? history_lens[r] : 0);
    }
    if (host_ids != nullptr) std::memcpy(host_ids, out_ids, static_cast<size_t>(logits.rows) * sizeof(int32_t));
  }

  void adjust_logits(Tensor logits, const int32_t* entries, int n) override {
    require_f32(logits, "adjust_logits", "logits");
    for (int i = 0; i < n; ++i) {
      const int64_t row = entries[3 * i], id = entries[3 * i + 1];
      if (row < 0 || row >= logits.rows || id < 0 || id >= logits.cols) continue;
      const float bias = std::bit_cast<float>(entries[3 * i + 2]);
      float& logit = logits.as<float>()[row * logits.cols + id];
      logit = std::isinf(bias) && bias < 0 ? kBannedLogit : logit + bias;
    }
  }

  void score_rows(const Tensor& logits, const int32_t* targets, const int32_t* target_rows, int top_k, float* logprobs,
                  int32_t* ids) override {
    require_f32(logits, "score_rows", "logits");
    const int64_t vocab = logits.cols;
    QWENRT_CHECK(top_k >= 0 && top_k <= vocab, "score_rows: top_k " + std::to_string(top_k) + " for " +
                                                  std::to_string(vocab) + " ids");
    const auto width = static_cast<int64_t>(top_k) + 1;
    pool_.parallel_for(logits.rows, 1, [&](int64_t begin, int64_t end) {
      std::vector<int32_t> top_ids;
      for (int64_t r = begin; r < end; ++r) {
        const float* row = logits.as<const float>() + r * vocab;
        float* lp = logprobs + r * width;
        int32_t* id = ids + r * width;
        int32_t best = 0;
        bool finite = true;
        for (int64_t j = 0; j < vocab; ++j) {
          finite = finite && std::isfinite(row[j]);
          if (row[j] > row[best]) best = static_cast<int32_t>(j);
        }
        if (!finite) {
          std::fill(lp, lp + width, std::numeric_limits<float>::quiet_NaN());
          std::fill(id, id + width, -1);
          continue;
        }
        const std::span<const float> values(row, static_cast<size_t>(vocab));
        const double log_sum = log_softmax_norm(values);
        id[0] = best;
        lp[0] = static_cast<float>(row[targets[target_rows != nullptr ? target_rows[r] : r]] - log_sum);
        top_logit_ids(values, top_k, top_ids);
        for (size_t q = 0; q < top_ids.size(); ++q) {
          id[1 + q] = top_ids[q];
          lp[1 + q] = static_cast<float>(row[top_ids[q]] - log_sum);
        }
      }
    });
  }

  void mask_logits(Tensor logits, const int32_t* rows, const uint32_t* masks, int n) override {
    require_f32(logits, "mask_logits", "logits");
    const int64_t vocab = logits.cols, words = token_mask_words(vocab);
    for (int i = 0; i < n; ++i) {
      const int64_t row = rows[i];
      if (row < 0 || row >= logits.rows) continue;
      const uint32_t* mask = masks + i * words;
      float* logit = logits.as<float>() + row * vocab;
      for (int64_t id = 0; id < vocab; ++id) {
        if (((mask[id / 32] >> (id % 32)) & 1u) == 0) logit[id] = kBannedLogit;
      }
    }
  }

  void sample_rows(const Tensor& logits, const SampleRow* rows, const int32_t* history,
                   const int32_t* history_lens, int history_stride, int32_t* out_ids) override {
    for (int64_t r = 0; r < logits.rows; ++r) {
      const int32_t* row_history = history != nullptr && history_lens != nullptr ? history + r * history_stride : nullptr;
      out_ids[r] = sample_one(logits, r, rows[r], row_history, row_history != nullptr ? history_lens[r] : 0);
    }
  }

 private:
  static int32_t sample_one(const Tensor& logits, int64_t r, const SampleRow& key, const int32_t* history,
                            int history_len) {
    require_f32(logits, "sample", "logits");
    const int vocab = static_cast<int>(logits.cols);
    std::vector<float> row(logits.as<float>() + r * vocab, logits.as<float>() + (r + 1) * vocab);
    for (float value : row) {
      if (!std::isfinite(value)) {
        // In f32 this comes from the model, not the arithmetic.
        throw Error(ErrorCategory::kInvalidModel, non_finite_logits_message("row " + std::to_string(r), DType::kF32));
      }
    }
    if (history != nullptr) apply_penalties(row.data(), vocab, key.params, history, history_len);
    return sample_row(row.data(), vocab, key.params, key.position, key.stream);
  }

  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace qwenrt
