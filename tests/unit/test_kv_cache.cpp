// The paged KV cache's host bookkeeping: block allocation, exhaustion, reuse, per-sequence
// reservation and the slot of each position.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "engine/kv_cache.h"

namespace qwenrt {
namespace {

TEST(BlockAllocator, ExhaustionAndReuse) {
  BlockAllocator allocator(3);
  EXPECT_EQ(allocator.num_blocks(), 3);
  EXPECT_EQ(allocator.free_blocks(), 3);
  std::set<int> taken;
  for (int i = 0; i < 3; ++i) {
    int block = allocator.allocate();
    EXPECT_GE(block, 0);
    EXPECT_LT(block, 3);
    taken.insert(block);
  }
  EXPECT_EQ(taken.size(), 3u);  // distinct blocks
  EXPECT_EQ(allocator.free_blocks(), 0);
  EXPECT_EQ(allocator.allocate(), -1);
  EXPECT_EQ(allocator.allocate(), -1);  // stays exhausted, no state change
  EXPECT_EQ(allocator.free_blocks(), 0);
  allocator.release(1);
  EXPECT_EQ(allocator.free_blocks(), 1);
  EXPECT_EQ(allocator.allocate(), 1);  // the released block is handed out again
  EXPECT_EQ(allocator.allocate(), -1);
}

TEST(BlockAllocator, RejectsBadRelease) {
  BlockAllocator allocator(2);
  int block = allocator.allocate();
  EXPECT_THROW(allocator.release(1 - block), Error);  // never allocated
  EXPECT_THROW(allocator.release(2), Error);          // out of range
  EXPECT_THROW(allocator.release(-1), Error);
  allocator.release(block);
  EXPECT_THROW(allocator.release(block), Error);  // double release
  EXPECT_EQ(allocator.free_blocks(), 2);
}

TEST(BlockAllocator, ZeroBlocks) {
  BlockAllocator allocator(0);
  EXPECT_EQ(allocator.allocate(), -1);
}

TEST(SequenceBlocks, ReserveAdvanceAcrossBlockBoundaries) {
  BlockAllocator allocator(8);
  SequenceBlocks seq(allocator, 16);
  EXPECT_EQ(seq.capacity(), 0);
  EXPECT_TRUE(seq.reserve(0));
  EXPECT_EQ(seq.block_table().size(), 0u);
  EXPECT_TRUE(seq.reserve(5));
  EXPECT_EQ(seq.block_table().size(), 1u);
  EXPECT_EQ(seq.capacity(), 16);
  EXPECT_EQ(seq.length(), 0);  // reserved, not yet written
  seq.advance(5);
  EXPECT_EQ(seq.length(), 5);
  EXPECT_TRUE(seq.reserve(11));  // exactly fills the first block
  EXPECT_EQ(seq.block_table().size(), 1u);
  seq.advance(11);
  EXPECT_TRUE(seq.reserve(1));  // position 16 starts block 2
  EXPECT_EQ(seq.block_table().size(), 2u);
  seq.advance(1);
  EXPECT_TRUE(seq.reserve(33));  // positions 17..49: up to block 4
  EXPECT_EQ(seq.block_table().size(), 4u);
  EXPECT_EQ(seq.capacity(), 64);
  EXPECT_EQ(allocator.free_blocks(), 4);
}

TEST(SequenceBlocks, SlotMappingInterleavedSequences) {
  BlockAllocator allocator(10);
  SequenceBlocks a(allocator, 4), b(allocator, 4);
  // Alternate one-token steps so the two sequences' blocks interleave in the pool.
  for (int step = 0; step < 18; ++step) {
    ASSERT_TRUE(a.reserve(1));
    a.advance(1);
    if (step % 2 == 0) {
      ASSERT_TRUE(b.reserve(1));
      b.advance(1);
    }
  }
  EXPECT_EQ(a.length(), 18);
  EXPECT_EQ(b.length(), 9);
  EXPECT_EQ(a.block_table().size(), 5u);
  EXPECT_EQ(b.block_table().size(), 3u);
  std::set<int32_t> slots;
  for (const SequenceBlocks* seq : {&a, &b}) {
    for (int p = 0; p < seq->length(); ++p) {
      int32_t expected = seq->block_table()[p / 4] * 4 + p % 4;
      EXPECT_EQ(seq->slot(p), expected) << p;
      slots.insert(seq->slot(p));
      EXPECT_GE(seq->slot(p), 0);
      EXPECT_LT(seq->slot(p), 40);
    }
  }
  EXPECT_EQ(slots.size(), 27u);  // no two positions share a slot
}

TEST(SequenceBlocks, FailedReserveLeavesStateUnchanged) {
  BlockAllocator allocator(4);
  SequenceBlocks other(allocator, 16);
  ASSERT_TRUE(other.reserve(20));  // 2 blocks
  SequenceBlocks seq(allocator, 16);
  ASSERT_TRUE(seq.reserve(10));  // 1 block, 1 left
  seq.advance(10);
  auto table = seq.block_table();
  EXPECT_FALSE(seq.reserve(40));  // needs 3 more blocks (50 positions), only 1 free
  EXPECT_EQ(seq.block_table(), table);
  EXPECT_EQ(seq.length(), 10);
  EXPECT_EQ(seq.capacity(), 16);
  EXPECT_EQ(allocator.free_blocks(), 1);
  EXPECT_TRUE(seq.reserve(22));  // 32 positions: exactly the one free block
  EXPECT_EQ(allocator.free_blocks(), 0);
}

TEST(SequenceBlocks, ClearAndDestructionReturnBlocks) {
  BlockAllocator allocator(4);
  {
    SequenceBlocks seq(allocator, 8);
    ASSERT_TRUE(seq.reserve(17));
    seq.advance(17);
    EXPECT_EQ(allocator.free_blocks(), 1);
    seq.clear();
    EXPECT_EQ(allocator.free_blocks(), 4);
    EXPECT_EQ(seq.length(), 0);
    EXPECT_EQ(seq.capacity(), 0);
    ASSERT_TRUE(seq.reserve(30));
    EXPECT_EQ(allocator.free_blocks(), 0);
  }
  EXPECT_EQ(allocator.free_blocks(), 4);  // the destructor released them
}

TEST(SequenceBlocks, TruncateKeepsThePrefixAndReturnsTheRest) {
  BlockAllocator allocator(6);
  SequenceBlocks seq(allocator, 8);
  ASSERT_TRUE(seq.reserve(40));  // 5 blocks
  seq.advance(37);
  const std::vector<int32_t> table = seq.block_table();
  const int32_t slot_9 = seq.slot(9);
  seq.truncate(17);  // positions 0..16 live in blocks 0..2
  EXPECT_EQ(seq.length(), 17);
  EXPECT_EQ(seq.block_table(), std::vector<int32_t>(table.begin(), table.begin() + 3));
  EXPECT_EQ(seq.slot(9), slot_9);
  EXPECT_EQ(allocator.free_blocks(), 3);
  seq.truncate(16);  // exactly two blocks
  EXPECT_EQ(seq.block_table().size(), 2u);
  EXPECT_EQ(allocator.free_blocks(), 4);
  seq.truncate(16);  // no-op
  EXPECT_EQ(allocator.free_blocks(), 4);
  ASSERT_TRUE(seq.reserve(5));  // writing continues after the kept prefix
  EXPECT_EQ(seq.block_table().size(), 3u);
  seq.truncate(0);
  EXPECT_EQ(seq.capacity(), 0);
  EXPECT_EQ(allocator.free_blocks(), 6);
  EXPECT_THROW(seq.truncate(1), Error);
}

// Prefix cache: reference counts, chain hashes, sharing, eviction of the oldest unheld block.
std::vector<int32_t> counting(int n, int start = 0) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = start + i;
  return ids;
}

TEST(BlockAllocator, ReferenceCounts) {
  BlockAllocator allocator(2, 4);
  const int block = allocator.allocate();
  allocator.retain(block);
  EXPECT_EQ(allocator.references(block), 2);
  allocator.release(block);
  EXPECT_EQ(allocator.free_blocks(), 1);  // still held once
  allocator.release(block);
  EXPECT_EQ(allocator.free_blocks(), 2);
  EXPECT_THROW(allocator.retain(block), Error);
}

TEST(PrefixCache, SharesFullBlocksOfTheSamePrefix) {
  BlockAllocator allocator(8, 4);
  const std::vector<int32_t> tokens = counting(10);  // two full blocks and two tokens
  SequenceBlocks first(allocator, 4);
  ASSERT_TRUE(first.reserve(10));
  first.advance(10);
  first.publish_full_blocks(tokens);
  EXPECT_EQ(allocator.held_blocks(), 3);

  SequenceBlocks second(allocator, 4);
  EXPECT_EQ(second.adopt_cached_prefix(tokens), 8);
  EXPECT_EQ(second.length(), 8);
  EXPECT_EQ(std::vector<int32_t>(second.block_table()),
            std::vector<int32_t>(first.block_table().begin(), first.block_table().begin() + 2));
  EXPECT_EQ(allocator.held_blocks(), 3);  // shared, not copied
  EXPECT_EQ(allocator.references(first.block_table()[0]), 2);
  EXPECT_EQ(allocator.hits(), 2);

  // A different second block shares only the first.
  std::vector<int32_t> other = tokens;
  other[5] = 99;
  SequenceBlocks third(allocator, 4);
  EXPECT_EQ(third.adopt_cached_prefix(other), 4);
  // The same tokens at a different place in the chain do not match.
  SequenceBlocks fourth(allocator, 4);
  EXPECT_EQ(fourth.adopt_cached_prefix(std::vector<int32_t>(tokens.begin() + 4, tokens.end())), 0);
}

TEST(PrefixCache, UnheldBlocksStayCachedUntilNeededThenTheOldestGoes) {
  BlockAllocator allocator(3, 4);
  {
    SequenceBlocks a(allocator, 4);
    ASSERT_TRUE(a.reserve(4));
    a.advance(4);
    a.publish_full_blocks(counting(4, 100));
  }
  {
    SequenceBlocks b(allocator, 4);
    ASSERT_TRUE(b.reserve(4));
    b.advance(4);
    b.publish_full_blocks(counting(4, 200));
  }
  EXPECT_EQ(allocator.held_blocks(), 0);
  EXPECT_EQ(allocator.cached_unheld_blocks(), 2);
  EXPECT_EQ(allocator.free_blocks(), 3);  // cached blocks still count as available
  {
    SequenceBlocks c(allocator, 4);
    ASSERT_TRUE(c.reserve(8));  // the free block, then the oldest cached one (a's)
    EXPECT_EQ(allocator.cached_unheld_blocks(), 1);
  }
  SequenceBlocks again_a(allocator, 4);
  EXPECT_EQ(again_a.adopt_cached_prefix(counting(5, 100)), 0);  // evicted
  SequenceBlocks again_b(allocator, 4);
  EXPECT_EQ(again_b.adopt_cached_prefix(counting(5, 200)), 4);  // kept
  EXPECT_EQ(allocator.cached_unheld_blocks(), 0);
}

TEST(PrefixCache, TruncateNeverKeepsPartOfAPublishedBlock) {
  BlockAllocator allocator(4, 4);
  SequenceBlocks seq(allocator, 4);
  ASSERT_TRUE(seq.reserve(8));
  seq.advance(8);
  seq.publish_full_blocks(counting(8));
  EXPECT_EQ(seq.truncate(6), 4);  // writing positions 6.. would change the published block
  EXPECT_EQ(seq.block_table().size(), 1u);
  EXPECT_EQ(seq.truncate(4), 4);
}

}  // namespace
}  // namespace qwenrt
