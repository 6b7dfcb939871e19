// The paged KV cache's bookkeeping on the host: a pool of fixed-size blocks, a free list,
// and per-sequence block tables. The pool memory itself (per layer K and V arrays of
// [num_blocks, block_size, n_kv_heads, head_dim]) is one backend allocation made at plan time.
#pragma once

#include <cstdint>
#include <vector>

namespace qwenrt {

class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);

  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  // Takes one block; returns -1 when none is free.
  int allocate();
  void release(int block);

 private:
  int num_blocks_;
  std::vector<int> free_;
  std::vector<bool> in_use_;
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
  // Keeps the first `length` positions (length <= length()) and gives back the blocks past them.
  void truncate(int length);
  void clear();

 private:
  BlockAllocator& allocator_;
  int block_size_;
  int length_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace qwenrt
