#include "engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"
#include "core/random_bits.h"

namespace qwenrt {

BlockAllocator::BlockAllocator(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size), refs_(num_blocks, 0), meta_(num_blocks) {
  free_.reserve(num_blocks);
  // Hand out low block ids first (stack order), which keeps small runs compact.
  for (int block = num_blocks - 1; block >= 0; --block) free_.push_back(block);
}

int BlockAllocator::allocate() {
  int block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    block = evictable_.begin()->second;  // released longest ago
    evictable_.erase(evictable_.begin());
    unpublish(block);
  } else {
    return -1;
  }
  refs_[block] = 1;
  return block;
}

void BlockAllocator::retain(int block) {
  QWENRT_CHECK(block >= 0 && block < num_blocks_ && refs_[block] > 0, "retaining a block not in use");
  ++refs_[block];
}

void BlockAllocator::release(int block) {
  QWENRT_CHECK(block >= 0 && block < num_blocks_ && refs_[block] > 0, "releasing a block not in use");
  if (--refs_[block] > 0) return;
  if (meta_[block].published) {
    meta_[block].released_at = ++tick_;
    evictable_.emplace(meta_[block].released_at, block);
  } else {
    free_.push_back(block);
  }
}

uint64_t BlockAllocator::chain_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t hash = splitmix64(parent ^ 0x6b76636163686521ull);
  for (int32_t token : tokens) hash = splitmix64(hash ^ static_cast<uint32_t>(token));
  return hash;
}

uint64_t BlockAllocator::publish(int block, uint64_t parent, std::span<const int32_t> tokens) {
  QWENRT_CHECK(block >= 0 && block < num_blocks_ && refs_[block] > 0, "publishing a block not in use");
  QWENRT_CHECK(static_cast<int>(tokens.size()) == block_size_, "publishing a block that is not full");
  const uint64_t hash = chain_hash(parent, tokens);
  BlockMeta& meta = meta_[block];
  if (meta.published) return meta.hash;
  if (by_hash_.count(hash) != 0) return hash;  // an equal block is already shared
  meta.published = true;
  meta.hash = hash;
  meta.parent = parent;
  meta.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
  return hash;
}

int BlockAllocator::lookup(uint64_t parent, std::span<const int32_t> tokens) {
  ++lookups_;
  auto found = by_hash_.find(chain_hash(parent, tokens));
  if (found == by_hash_.end()) return -1;
  const int block = found->second;
  const BlockMeta& meta = meta_[block];
  if (meta.parent != parent || !std::equal(tokens.begin(), tokens.end(), meta.tokens.begin(), meta.tokens.end())) {
    return -1;
  }
  if (refs_[block] == 0) evictable_.erase({meta.released_at, block});
  ++refs_[block];
  ++hits_;
  return block;
}

void BlockAllocator::unpublish(int block) {
  BlockMeta& meta = meta_[block];
  if (!meta.published) return;
  by_hash_.erase(meta.hash);
  meta = BlockMeta{};
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

int SequenceBlocks::truncate(int length) {
  QWENRT_CHECK(length >= 0 && length <= length_, "truncating a sequence past its end");
  if (length % block_size_ != 0 && allocator_.published(blocks_[length / block_size_])) {
    length -= length % block_size_;
  }
  const size_t keep = static_cast<size_t>((length + block_size_ - 1) / block_size_);
  while (blocks_.size() > keep) {
    allocator_.release(blocks_.back());
    blocks_.pop_back();
  }
  chain_.resize(std::min(chain_.size(), static_cast<size_t>(length / block_size_)));
  length_ = length;
  return length;
}

void SequenceBlocks::clear() {
  for (int32_t block : blocks_) allocator_.release(block);
  blocks_.clear();
  chain_.clear();
  length_ = 0;
}

int SequenceBlocks::adopt_cached_prefix(std::span<const int32_t> tokens) {
  QWENRT_CHECK(blocks_.empty() && length_ == 0, "adopting a cached prefix into a sequence in use");
  uint64_t parent = 0;
  for (size_t begin = 0; begin + block_size_ <= tokens.size(); begin += block_size_) {
    std::span<const int32_t> block_tokens = tokens.subspan(begin, static_cast<size_t>(block_size_));
    const int block = allocator_.lookup(parent, block_tokens);
    if (block < 0) break;
    parent = allocator_.chain_hash(parent, block_tokens);
    blocks_.push_back(block);
    chain_.push_back(parent);
    length_ += block_size_;
  }
  return length_;
}

void SequenceBlocks::publish_full_blocks(std::span<const int32_t> tokens) {
  QWENRT_CHECK(static_cast<int>(tokens.size()) >= length_, "publishing blocks without their tokens");
  const size_t full = static_cast<size_t>(length_ / block_size_);
  while (chain_.size() < full) {
    const size_t index = chain_.size();
    const uint64_t parent = index == 0 ? 0 : chain_.back();
    chain_.push_back(allocator_.publish(blocks_[index], parent,
                                        tokens.subspan(index * block_size_, static_cast<size_t>(block_size_))));
  }
}

}  // namespace qwenrt
