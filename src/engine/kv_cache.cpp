#include "engine/kv_cache.h"

#include "core/error.h"

namespace qwenrt {

BlockAllocator::BlockAllocator(int num_blocks) : num_blocks_(num_blocks), in_use_(num_blocks, false) {
  free_.reserve(num_blocks);
  // Hand out low block ids first (stack order), which keeps small runs compact.
  for (int block = num_blocks - 1; block >= 0; --block) free_.push_back(block);
}

int BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  int block = free_.back();
  free_.pop_back();
  in_use_[block] = true;
  return block;
}

void BlockAllocator::release(int block) {
  QWENRT_CHECK(block >= 0 && block < num_blocks_ && in_use_[block], "releasing a block not in use");
  in_use_[block] = false;
  free_.push_back(block);
}

SequenceBlocks::SequenceBlocks(BlockAllocator& allocator, int block_size)
    : allocator_(allocator), block_size_(block_size) {}

SequenceBlocks::~SequenceBlocks() { clear(); }

bool SequenceBlocks::reserve(int count) {
  int needed = (length_ + count + block_size_ - 1) / block_size_ - static_cast<int>(blocks_.size());
  if (needed <= 0) return true;
  if (needed > allocator_.free_blocks()) return false;
  for (int i = 0; i < needed; ++i) blocks_.push_back(allocator_.allocate());
  return true;
}

void SequenceBlocks::truncate(int length) {
  QWENRT_CHECK(length >= 0 && length <= length_, "truncating a sequence past its end");
  const size_t keep = static_cast<size_t>((length + block_size_ - 1) / block_size_);
  while (blocks_.size() > keep) {
    allocator_.release(blocks_.back());
    blocks_.pop_back();
  }
  length_ = length;
}

void SequenceBlocks::clear() {
  for (int32_t block : blocks_) allocator_.release(block);
  blocks_.clear();
  length_ = 0;
}

}  // namespace qwenrt
