#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>

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
  size_t capacity = 16;
  hash_shift_ = 60;
  while (capacity < merges.size() * 2 + 1) {
    capacity *= 2;
    hash_shift_ -= 1;
  }
  slots_.assign(capacity, Slot{kEmptyKey, 0, 0});
  const size_t mask = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& rule = merges[rank];
    const uint64_t key = pair_key(rule.left, rule.right);
    size_t i = slot_index(key);
    while (slots_[i].key != kEmptyKey && slots_[i].key != key) i = (i + 1) & mask;
    slots_[i] = Slot{key, static_cast<int32_t>(rank), rule.merged};
  }
}

const BpeModel::Slot* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_index(key);; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.key == key) return &slot;
    if (slot.key == kEmptyKey) return nullptr;
  }
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
    const Slot* slot = find_merge(symbols[i], symbols[i + 1]);
    ranks[i] = slot ? slot->rank : kNoRank;
    merged[i] = slot ? slot->merged : -1;
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
    const Slot* slot =
        find_merge(symbols[static_cast<size_t>(pos)], symbols[static_cast<size_t>(right)]);
    if (!slot) return;
    heap.push_back((static_cast<int64_t>(slot->rank) << 32) | pos);
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
    const Slot* slot = find_merge(symbols[p], symbols[right]);
    if (!slot || slot->rank != rank) continue;  // the pair at pos changed since
    symbols[p] = slot->merged;
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
