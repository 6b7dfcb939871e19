// The advice `qwenrt doctor` gives about GPUs, from facts a device query would report.
// Expected values come from outside the project: target ids and their ISA versions from
// LLVM's AMDGPU processor table (gfx90a is GFX 9.0.10, the last place a hex digit), the
// override values the ROCm community guides use (HSA_OVERRIDE_GFX_VERSION=11.0.0 for
// gfx1101/gfx1102, 10.3.0 for gfx1031/gfx1032), and the runtimes' documented version
// encodings (CUDA: 1000·major + 10·minor; HIP_VERSION: 10^7·major + 10^5·minor + patch).
#include <gtest/gtest.h>

#include "backend/common/gpu_advice.h"

namespace qwenrt {
namespace {

using Kind = GfxCoverage::Kind;

constexpr const char* kGuideTargets = "gfx1100;gfx942;gfx90a;gfx1030";

TEST(GfxTarget, ParsesProcessorVersionAndFeatures) {
  auto mi250 = parse_gfx_target("gfx90a:sramecc+:xnack-");
  ASSERT_TRUE(mi250.has_value());
  EXPECT_EQ(mi250->processor, "gfx90a");
  EXPECT_EQ(mi250->major, 9);
  EXPECT_EQ(mi250->minor, 0);
  EXPECT_EQ(mi250->stepping, 10);
  EXPECT_EQ(mi250->features, (std::vector<std::string>{"sramecc+", "xnack-"}));

  auto rx7900 = parse_gfx_target("gfx1100");
  ASSERT_TRUE(rx7900.has_value());
  EXPECT_EQ(rx7900->major, 11);
  EXPECT_EQ(rx7900->minor, 0);
  EXPECT_EQ(rx7900->stepping, 0);
  EXPECT_TRUE(rx7900->features.empty());

  auto mi300 = parse_gfx_target("gfx942:sramecc+:xnack-");
  ASSERT_TRUE(mi300.has_value());
  EXPECT_EQ(mi300->major, 9);
  EXPECT_EQ(mi300->minor, 4);
  EXPECT_EQ(mi300->stepping, 2);
}

TEST(GfxTarget, RejectsWhatIsNotATargetId) {
  for (const char* bad :
       {"", "gfx", "gfx90", "sm_90", "GFX1100", "gfx11g0", "gfx90a:xnack", "gfxa00"}) {
    EXPECT_FALSE(parse_gfx_target(bad).has_value()) << bad;
  }
}

TEST(GfxCoverage, TheGuidesCardsAreCovered) {
  for (const char* card :
       {"gfx1100", "gfx942:sramecc+:xnack-", "gfx90a:sramecc+:xnack-", "gfx1030"}) {
    const GfxCoverage coverage = gfx_coverage(kGuideTargets, card);
    EXPECT_EQ(coverage.kind, Kind::kCovered) << card;
    EXPECT_TRUE(coverage.advice.empty()) << card;
  }
  // Space-separated lists (what the build records) work the same.
  EXPECT_EQ(gfx_coverage("gfx1100 gfx90a", "gfx90a:sramecc-:xnack+").kind, Kind::kCovered);
}

TEST(GfxCoverage, OtherRdna3AndRdna2CardsGetTheOverride) {
  for (const char* card : {"gfx1101", "gfx1102"}) {
    const GfxCoverage coverage = gfx_coverage(kGuideTargets, card);
    EXPECT_EQ(coverage.kind, Kind::kOverride) << card;
    EXPECT_NE(coverage.advice.find("HSA_OVERRIDE_GFX_VERSION=11.0.0"), std::string::npos)
        << coverage.advice;
    EXPECT_NE(coverage.advice.find("-DQWENRT_HIP_ARCHITECTURES=" + std::string(card)),
              std::string::npos)
        << coverage.advice;
  }
  for (const char* card : {"gfx1031", "gfx1032"}) {
    const GfxCoverage coverage = gfx_coverage(kGuideTargets, card);
    EXPECT_EQ(coverage.kind, Kind::kOverride) << card;
    EXPECT_NE(coverage.advice.find("HSA_OVERRIDE_GFX_VERSION=10.3.0"), std::string::npos)
        << coverage.advice;
  }
}

TEST(GfxCoverage, NoOverrideWithoutAFamilyMemberInTheBuild) {
  // RDNA3 card, build without gfx1100: only a rebuild helps.
  GfxCoverage coverage = gfx_coverage("gfx90a;gfx942", "gfx1101");
  EXPECT_EQ(coverage.kind, Kind::kNotCovered);
  EXPECT_EQ(coverage.advice.find("HSA_OVERRIDE"), std::string::npos) << coverage.advice;
  EXPECT_NE(coverage.advice.find("-DQWENRT_HIP_ARCHITECTURES=gfx1101"), std::string::npos)
      << coverage.advice;
  // RDNA2 and RDNA3 are different families.
  EXPECT_EQ(gfx_coverage("gfx1030", "gfx1100").kind, Kind::kNotCovered);
  // CDNA cards of one major (MI100 gfx908, MI210 gfx90a, MI300 gfx942) do not share code.
  EXPECT_EQ(gfx_coverage("gfx90a", "gfx908:sramecc+:xnack-").kind, Kind::kNotCovered);
  EXPECT_EQ(gfx_coverage("gfx942", "gfx940").kind, Kind::kNotCovered);
}

TEST(GfxCoverage, FeatureSpecificCodeNeedsTheCardsSetting) {
  EXPECT_EQ(gfx_coverage("gfx90a:xnack+", "gfx90a:sramecc+:xnack+").kind, Kind::kCovered);
  const GfxCoverage coverage = gfx_coverage("gfx90a:xnack+", "gfx90a:sramecc+:xnack-");
  EXPECT_EQ(coverage.kind, Kind::kNotCovered);
  EXPECT_NE(coverage.advice.find("feature"), std::string::npos) << coverage.advice;
}

TEST(GfxCoverage, UnknownTargetIsSaid) {
  const GfxCoverage coverage = gfx_coverage(kGuideTargets, "");
  EXPECT_EQ(coverage.kind, Kind::kUnknown);
  EXPECT_FALSE(coverage.advice.empty());
}

TEST(Versions, RuntimeEncodings) {
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
  EXPECT_EQ(cuda_version_string(0), "");
  EXPECT_EQ(hip_version_string(50731921), "5.7.31921");
  EXPECT_EQ(hip_version_string(60241134), "6.2.41134");
  EXPECT_EQ(hip_version_string(-1), "");
}

TEST(Versions, OlderComparesPartByPart) {
  EXPECT_EQ(version_older("5.7.31921", "6.2.41134"), true);
  EXPECT_EQ(version_older("6.2.41134", "5.7.31921"), false);
  EXPECT_EQ(version_older("6.2", "6.2.0"), false);     // missing parts are 0
  EXPECT_EQ(version_older("6.10.0", "6.9.0"), false);  // numbers, not text
  EXPECT_EQ(version_older("12.4", "12.8"), true);
  EXPECT_EQ(version_older("5.7", "5.7"), false);
  EXPECT_FALSE(version_older("", "5.7").has_value());
  EXPECT_FALSE(version_older("5.7", "unknown").has_value());
}

TEST(Versions, AdviceOnlyForAnOlderRuntime) {
  const std::string advice = version_advice("HIP runtime", "5.7.31921", "6.2.41134");
  EXPECT_NE(advice.find("5.7.31921"), std::string::npos) << advice;
  EXPECT_NE(advice.find("6.2.41134"), std::string::npos) << advice;
  EXPECT_EQ(version_advice("HIP runtime", "6.2.41134", "6.2.41134"), "");
  EXPECT_EQ(version_advice("HIP runtime", "6.3.0", "6.2.41134"), "");
  EXPECT_EQ(version_advice("HIP runtime", "", "6.2.41134"), "");
}

}  // namespace
}  // namespace qwenrt
