#include <gtest/gtest.h>

#include "core/units.h"

namespace qwenrt {
namespace {

TEST(Units, GibAlwaysInGib) {
  EXPECT_EQ(format_gib(0), "0.00 GiB");
  EXPECT_EQ(format_gib(1536.0 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(format_gib(512.0 * 1024 * 1024), "0.50 GiB");
  EXPECT_EQ(format_gib(141.0 * 1024 * 1024 * 1024), "141.00 GiB");
}

TEST(Units, BytesInTheLargestUnitAtOrAboveOne) {
  EXPECT_EQ(format_bytes(512), "0.5 KiB");
  EXPECT_EQ(format_bytes(3 * 1024), "3.0 KiB");
  EXPECT_EQ(format_bytes(1024.0 * 1024 - 1), "1024.0 KiB");
  EXPECT_EQ(format_bytes(1024.0 * 1024), "1.0 MiB");
  EXPECT_EQ(format_bytes(212.5 * 1024 * 1024), "212.5 MiB");
  EXPECT_EQ(format_bytes(1024.0 * 1024 * 1024), "1.00 GiB");
  EXPECT_EQ(format_bytes(15.23 * 1024 * 1024 * 1024), "15.23 GiB");
}

}  // namespace
}  // namespace qwenrt
