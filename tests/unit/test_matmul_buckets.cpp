// The row buckets the GPU matrix library chooses its algorithms for, and which the engine's
// warm-up walks: every row count falls in one whose top is at or above it, and no bucket
// above 128 rows is wider than a tile's 128 rows.
#include <gtest/gtest.h>

#include "backend/backend.h"

namespace qwenrt {
namespace {

TEST(MatmulRowBuckets, SmallCountsArePowersOfTwoThenTileRows) {
  const std::pair<int64_t, int64_t> cases[] = {
      {1, 1},       {2, 2},       {3, 4},       {100, 128},  {128, 128},   {129, 192},  {192, 192},
      {193, 256},   {256, 256},   {257, 384},   {320, 384},  {384, 384},   {385, 512},  {513, 640},
      {1024, 1024}, {1025, 1152}, {1152, 1152}, {2047, 2048}, {8193, 8320}};
  for (const auto& [rows, top] : cases) EXPECT_EQ(matmul_row_bucket(rows), top) << rows << " rows";
}

TEST(MatmulRowBuckets, EveryCountIsCoveredByANarrowBucket) {
  int64_t previous_top = 0;
  for (int64_t rows = 1; rows <= 20000; ++rows) {
    const int64_t top = matmul_row_bucket(rows);
    ASSERT_GE(top, rows);
    ASSERT_EQ(matmul_row_bucket(top), top) << "a bucket's top is its own bucket";
    ASSERT_GE(top, previous_top) << "buckets grow with the rows";
    if (rows > 128) {
      ASSERT_LT(top - rows, 128) << rows << " rows";
    }
    previous_top = top;
  }
}

}  // namespace
}  // namespace qwenrt
