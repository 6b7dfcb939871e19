#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <tuple>

#include "core/error.h"

namespace qwenrt::tok {
namespace {

// Pieces longer than this are not cached (HF caches words shorter than 256 characters).
constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kCacheSlots = size_t{1} << 17;  // power of two; filled to half at most
constexpr size_t kMaxCacheBytes = size_t{1} << 22;

// A fast 64-bit hash of a short byte string (never 0, which marks an empty slot).
uint64_t hash_bytes(std::string_view bytes) {
  uint64_t hash = 0x9E3779B97F4A7C15ULL ^ bytes.size();
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    hash = (hash ^ word) * 0xBF58476D1CE4E5B9ULL;
    hash ^= hash >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  hash = (hash ^ tail) * 0x94D049BB133111EBULL;
  hash ^= hash >> 29;
  hash *= 0xBF58476D1CE4E5B9ULL;
  hash ^= hash >> 32;
  return hash | 1;
}

}  // namespace

BpeModel::BpeModel(const std::array<int32_t, 256>& byte_ids, const std::vector<MergeRule>& merges,
                   std::function<std::optional<int32_t>(std::string_view)> whole_word,
                   size_t short_piece)
    : byte_ids_(byte_ids), short_piece_(short_piece), whole_word_(std::move(whole_word)) {
  if (merges.size() >= (size_t{1} << kRankBits)) {
    throw Error(ErrorCategory::kUnsupported, "more than 2^24 BPE merges");
  }
  size_t capacity = 16;
  hash_shift_ = 60;
  while (capacity < merges.size() + merges.size() / 2 + 1) {  // load factor at most 2/3
    capacity *= 2;
    hash_shift_ -= 1;
  }
  slots_.assign(capacity, kEmptySlot);
  merged_by_rank_.resize(merges.size());
  const size_t mask = capacity - 1;
  constexpr int32_t kIdLimit = (1 << kIdBits) - 1;
  for (size_t index = 0; index < merges.size(); ++index) {
    const MergeRule& rule = merges[index];
    if (rule.left < 0 || rule.left >= kIdLimit || rule.right < 0 || rule.right >= kIdLimit) {
      throw Error(ErrorCategory::kUnsupported, "BPE merges of token ids of 2^20 - 1 and above");
    }
    const size_t rank = rule.rank >= 0 ? static_cast<size_t>(rule.rank) : index;
    if (rank >= (size_t{1} << kRankBits)) throw Error(ErrorCategory::kUnsupported, "BPE ranks of 2^24 and above");
    if (rank >= merged_by_rank_.size()) merged_by_rank_.resize(rank + 1, -1);
    merged_by_rank_[rank] = rule.merged;
    const uint64_t key = pair_key(rule.left, rule.right);
    const uint64_t packed = (key << kRankBits) | rank;
    size_t i = slot_index(key);
    // A later duplicate of a pair replaces the earlier one.
    while (slots_[i] != kEmptySlot && (slots_[i] >> kRankBits) != key) i = (i + 1) & mask;
    slots_[i] = packed;
  }
}

int32_t BpeModel::find_rank(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_index(key);; i = (i + 1) & mask) {
    const uint64_t slot = slots_[i];
    if (slot == kEmptySlot) return kNoRank;
    if ((slot >> kRankBits) == key) {
      return static_cast<int32_t>(slot & ((uint64_t{1} << kRankBits) - 1));
    }
  }
}

std::pair<int32_t, int32_t> BpeModel::lookup(int32_t left, int32_t right,
                                             BpeScratch& scratch) const {
  if (scratch.pair_memo.empty()) {
    scratch.pair_memo.assign(std::max<size_t>(scratch.memo_size, 256), {kEmptyKey, 0, 0});
  }
  const uint64_t key = pair_key(left, right);
  const size_t mask = scratch.pair_memo.size() - 1;
  BpeScratch::PairMemo& memo =
      scratch.pair_memo[static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 40) & mask];
  if (memo.key != key) {
    const int32_t rank = find_rank(left, right);
    memo = {key, rank, rank == kNoRank ? -1 : merged_by_rank_[static_cast<size_t>(rank)]};
  }
  return {memo.rank, memo.merged};
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>& out,
                            BpeScratch& scratch) const {
  if (bytes.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  const bool cacheable = bytes.size() <= kMaxCachedPiece;
  if (cacheable && cache_lookup(bytes, out)) return;
  const size_t first = out.size();
  std::optional<int32_t> whole;
  if (whole_word_) {
    scratch.mapped = alphabet_.to_chars(bytes);
    whole = whole_word_(scratch.mapped);
  }
  if (whole) {
    out.push_back(*whole);
  } else {
    scratch.symbols.clear();
    for (char b : bytes) scratch.symbols.push_back(byte_ids_[static_cast<uint8_t>(b)]);
    if (bytes.size() <= short_piece_) {
      merge_short(scratch);
      out.insert(out.end(), scratch.symbols.begin(), scratch.symbols.end());
    } else {
      merge_long(scratch, out);
    }
  }
  if (cacheable) cache_store(bytes, out.data() + first, out.size() - first);
}

void BpeModel::merge_short(BpeScratch& scratch) const {
  std::vector<int32_t>& symbols = scratch.symbols;
  std::vector<int32_t>& ranks = scratch.ranks;  // ranks[i]: merge of symbols i and i+1
  std::vector<int32_t>& merged = scratch.merged;
  const size_t n = symbols.size();
  ranks.resize(n - 1);
  merged.resize(n - 1);
  auto update = [&](size_t i) {
    std::tie(ranks[i], merged[i]) = lookup(symbols[i], symbols[i + 1], scratch);
  };
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  while (!ranks.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < ranks.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoRank) break;
    symbols[best] = merged[best];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best));
    merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(best));
    if (best > 0) update(best - 1);
    if (best < ranks.size()) update(best);
  }
}

void BpeModel::merge_long(BpeScratch& scratch, std::vector<int32_t>& out) const {
  // Symbols form a linked list; the heap holds candidate merges keyed by (rank, position)
  // and stale entries are dropped when popped.
  std::vector<int32_t>& symbols = scratch.symbols;
  std::vector<int32_t>& prev = scratch.prev;
  std::vector<int32_t>& next = scratch.next;
  auto& heap = scratch.heap;
  const auto n = static_cast<int32_t>(symbols.size());
  prev.resize(static_cast<size_t>(n));
  next.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  heap.clear();
  auto greater = std::greater<int64_t>();
  auto push = [&](int32_t pos) {
    const int32_t right = next[static_cast<size_t>(pos)];
    if (right < 0) return;
    const int32_t rank =
        lookup(symbols[static_cast<size_t>(pos)], symbols[static_cast<size_t>(right)], scratch)
            .first;
    if (rank == kNoRank) return;
    heap.push_back((static_cast<int64_t>(rank) << 32) | pos);
    std::push_heap(heap.begin(), heap.end(), greater);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const int64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<int32_t>(top >> 32);
    const auto pos = static_cast<int32_t>(top & 0xFFFFFFFF);
    const auto p = static_cast<size_t>(pos);
    if (symbols[p] < 0 || next[p] < 0) continue;  // merged away, or now last
    const auto right = static_cast<size_t>(next[p]);
    const auto [current_rank, merged_id] = lookup(symbols[p], symbols[right], scratch);
    if (current_rank != rank) continue;  // the pair at pos changed since
    symbols[p] = merged_id;
    symbols[right] = -1;
    next[p] = next[right];
    if (next[p] >= 0) prev[static_cast<size_t>(next[p])] = pos;
    if (prev[p] >= 0) push(prev[p]);
    push(pos);
  }
  for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)])
    out.push_back(symbols[static_cast<size_t>(i)]);
}

bool BpeModel::cache_lookup(std::string_view bytes, std::vector<int32_t>& out) const {
  const uint64_t hash = hash_bytes(bytes);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_slots_.empty()) return false;
  for (size_t i = hash & (kCacheSlots - 1);; i = (i + 1) & (kCacheSlots - 1)) {
    const CacheSlot& slot = cache_slots_[i];
    if (slot.hash == 0) return false;
    if (slot.hash == hash && slot.key_size == bytes.size() &&
        std::memcmp(cache_keys_.data() + slot.key_at, bytes.data(), bytes.size()) == 0) {
      const int32_t* ids = cache_ids_.data() + slot.ids_at;
      out.insert(out.end(), ids, ids + slot.id_count);
      return true;
    }
  }
}

void BpeModel::cache_store(std::string_view bytes, const int32_t* ids, size_t count) const {
  const uint64_t hash = hash_bytes(bytes);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_slots_.empty() || cache_used_ >= kCacheSlots / 2 ||
      cache_keys_.size() + bytes.size() > kMaxCacheBytes ||
      cache_ids_.size() + count > kMaxCacheBytes) {
    cache_slots_.assign(kCacheSlots, CacheSlot{0, 0, 0, 0, 0});
    cache_keys_.clear();
    cache_ids_.clear();
    cache_used_ = 0;
  }
  size_t i = hash & (kCacheSlots - 1);
  while (cache_slots_[i].hash != 0) {
    const CacheSlot& slot = cache_slots_[i];
    if (slot.hash == hash && slot.key_size == bytes.size() &&
        std::memcmp(cache_keys_.data() + slot.key_at, bytes.data(), bytes.size()) == 0) {
      return;  // another caller stored it meanwhile
    }
    i = (i + 1) & (kCacheSlots - 1);
  }
  cache_slots_[i] = CacheSlot{hash, static_cast<uint32_t>(cache_keys_.size()),
                              static_cast<uint32_t>(cache_ids_.size()),
                              static_cast<uint16_t>(bytes.size()), static_cast<uint16_t>(count)};
  cache_keys_.append(bytes);
  cache_ids_.insert(cache_ids_.end(), ids, ids + count);
  ++cache_used_;
}

}  // namespace qwenrt::tok
