// The paged KV cache's bookkeeping on the host: a pool of fixed-size blocks with reference
// counts, per-sequence block tables, and the prefix cache. The pool memory itself (per layer
// K and V arrays of [num_blocks, block_size, n_kv_heads, head_dim]) is one backend allocation
// made at plan time.
//
// Prefix cache: a full block whose tokens are known can be published under the hash of its
// chain (the parent block's hash and its own block_size tokens). A later sequence with the
// same token prefix looks the chain up block by block and shares those blocks instead of
// computing them (keys and values depend only on the tokens before them). A published block
// nobody holds stays cached until a block is needed and none is free: then the one released
// longest ago is evicted. Lookups compare the tokens and the parent hash, not only the hash,
// so a hash collision can cost a miss but never a wrong answer.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

namespace qwenrt {

class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks, int block_size = 16);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks allocate() can hand out: never-used or released ones plus cached ones nobody holds.
  int free_blocks() const { return static_cast<int>(free_.size() + evictable_.size()); }
  // Blocks some sequence holds (a shared block counts once).
  int held_blocks() const { return num_blocks_ - free_blocks(); }
  // Published blocks nobody holds (kept for later prefix hits, reclaimed on demand).
  int cached_unheld_blocks() const { return static_cast<int>(evictable_.size()); }
  int references(int block) const { return refs_[block]; }

  // Takes one block (reference count 1); returns -1 when none can be had.
  int allocate();
  // One more holder of an allocated block.
  void retain(int block);
  // Drops one reference; at zero the block is free again (or cached, if it is published).
  void release(int block);

  // The chain hash of a block of `tokens` (block_size of them) after a block of `parent`.
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  // Publishes a full, held block. Returns its chain hash. When an equal block is already
  // published this one is left unpublished (it is freed normally).
  uint64_t publish(int block, uint64_t parent, std::span<const int32_t> tokens);
  // The published block holding `tokens` after `parent`, retained for the caller; -1 if none.
  int lookup(uint64_t parent, std::span<const int32_t> tokens);
  bool published(int block) const { return meta_[block].published; }

  // Prefix-cache statistics: blocks looked up, and of them found.
  int64_t lookups() const { return lookups_; }
  int64_t hits() const { return hits_; }

 private:
  struct BlockMeta {
    bool published = false;
    uint64_t hash = 0;
    uint64_t parent = 0;
    uint64_t released_at = 0;  // tick of the release that left it unheld (eviction order)
    std::vector<int32_t> tokens;
  };
  void unpublish(int block);

  int num_blocks_;
  int block_size_;
  std::vector<int> free_;
  std::vector<int> refs_;
  std::vector<BlockMeta> meta_;
  std::set<std::pair<uint64_t, int>> evictable_;  // (released_at, block), oldest first
  std::unordered_map<uint64_t, int> by_hash_;
  uint64_t tick_ = 0;
  int64_t lookups_ = 0, hits_ = 0;
};

// One sequence's view of the cache: which physical block holds each run of block_size
// positions, and how many positions are filled.
class SequenceBlocks {
 public:
  SequenceBlocks(BlockAllocator& allocator, int block_size);
  SequenceBlocks(const SequenceBlocks&) = delete;
  SequenceBlocks& operator=(const SequenceBlocks&) = delete;
  ~SequenceBlocks();

  // Makes room for `count` more positions; false (and no change) when the pool is exhausted.
  bool reserve(int count);
  // Marks `count` reserved positions as written.
  void advance(int count) { length_ += count; }
  int length() const { return length_; }
  int capacity() const { return static_cast<int>(blocks_.size()) * block_size_; }
  const std::vector<int32_t>& block_table() const { return blocks_; }
  // Cache slot of position `position`: block * block_size + offset.
  int32_t slot(int position) const {
    return blocks_[position / block_size_] * block_size_ + position % block_size_;
  }
  // Keeps the first `length` positions (length <= length()) and gives back the blocks past
  // them. A published block is never written again, so a cut inside one drops it as well:
  // returns the length kept.
  int truncate(int length);
  void clear();

  // For an empty sequence: shares the published blocks that hold a prefix of `tokens`
  // (whole blocks only) and returns the positions they cover.
  int adopt_cached_prefix(std::span<const int32_t> tokens);
  // Publishes every full block not yet published; `tokens` are the sequence's tokens
  // (at least length() of them).
  void publish_full_blocks(std::span<const int32_t> tokens);

 private:
  BlockAllocator& allocator_;
  int block_size_;
  int length_ = 0;
  std::vector<int32_t> blocks_;
  std::vector<uint64_t> chain_;  // chain hash of blocks_[0 .. chain_.size()), all published
};

}  // namespace qwenrt
