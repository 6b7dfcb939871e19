// Byte-level BPE: a pre-tokenized piece (raw bytes) starts as one symbol per byte and the
// adjacent pair with the lowest merge rank is merged, leftmost first, until no pair has a
// merge. This is the order Hugging Face's BPE model applies (a priority queue keyed by rank,
// then position). Results for short pieces are cached: text repeats words a lot.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/byte_level.h"

namespace qwenrt::tok {

// One merge rule: the pair (left, right) of token ids becomes `merged`.
struct MergeRule {
  int32_t left;
  int32_t right;
  int32_t merged;
  // Its priority; -1: its index in the list. Rules that make the same token may share a
  // rank (tiktoken's vocabularies rank the merged token, not the pair).
  int32_t rank = -1;
};

// Reusable buffers for BpeModel::encode_piece, owned by one encode call.
struct BpeScratch {
  std::vector<int32_t> symbols;
  std::vector<int32_t> ranks;
  std::vector<int32_t> merged;
  std::vector<int32_t> prev;
  std::vector<int32_t> next;
  std::vector<int64_t> heap;  // rank << 32 | position
  std::string mapped;
  // Recent merge-table lookups (direct-mapped): text reuses the same pairs, and the table
  // itself (megabytes) mostly misses the CPU caches.
  struct PairMemo {
    uint64_t key;
    int32_t rank;
    int32_t merged;
  };
  std::vector<PairMemo> pair_memo;
  size_t memo_size = 256;  // entries, a power of two; set before the first piece
};

class BpeModel {
 public:
  // byte_ids: the token id of each single byte. merges: rules in rank order (index = rank);
  // a later duplicate of a pair replaces the earlier one, as in HF. whole_word: when set
  // (HF's ignore_merges), a piece whose byte-level text is itself a token is that token.
  // short_piece: pieces up to this many bytes use a quadratic scan (fastest for words),
  // longer ones a priority queue (n log n); both give the same ids.
  BpeModel(const std::array<int32_t, 256>& byte_ids, const std::vector<MergeRule>& merges,
           std::function<std::optional<int32_t>(std::string_view)> whole_word,
           size_t short_piece = 64);

  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one piece (raw bytes, not empty).
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out, BpeScratch& scratch) const;

 private:
  // Merge table slots pack (left, right, rank) into 64 bits (ids below 2^20, ranks below
  // 2^24) so the table is 2-4 MB: BPE is bound by these lookups missing the CPU caches.
  static constexpr int kIdBits = 20;
  static constexpr int kRankBits = 24;
  static constexpr uint64_t kEmptySlot = ~uint64_t{0};
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  static constexpr int32_t kNoRank = INT32_MAX;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << kIdBits) |
           static_cast<uint32_t>(right);
  }
  size_t slot_index(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> hash_shift_);
  }
  // Rank of the merge of (left, right), or kNoRank.
  int32_t find_rank(int32_t left, int32_t right) const;
  // rank and merged id of a pair (rank kNoRank when the pair has no merge), via the memo.
  std::pair<int32_t, int32_t> lookup(int32_t left, int32_t right, BpeScratch& scratch) const;
  void merge_short(BpeScratch& scratch) const;
  void merge_long(BpeScratch& scratch, std::vector<int32_t>& out) const;
  bool cache_lookup(std::string_view bytes, std::vector<int32_t>& out) const;
  void cache_store(std::string_view bytes, const int32_t* ids, size_t count) const;

  std::array<int32_t, 256> byte_ids_;
  ByteLevelAlphabet alphabet_;
  size_t short_piece_;
  std::vector<uint64_t> slots_;          // open addressing, power-of-two size
  std::vector<int32_t> merged_by_rank_;  // the token each merge makes
  int hash_shift_ = 64;
  std::function<std::optional<int32_t>(std::string_view)> whole_word_;

  // Word cache: piece bytes -> ids, in an open-addressing table over two arenas (no
  // allocation per entry). Shared by all callers, hence the mutex; emptied when full.
  struct CacheSlot {
    uint64_t hash;  // 0: empty
    uint32_t key_at;
    uint32_t ids_at;
    uint16_t key_size;
    uint16_t id_count;
  };
  mutable std::mutex cache_mutex_;
  mutable std::vector<CacheSlot> cache_slots_;
  mutable std::string cache_keys_;
  mutable std::vector<int32_t> cache_ids_;
  mutable size_t cache_used_ = 0;
};

}  // namespace qwenrt::tok
