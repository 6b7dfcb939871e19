// The decisions behind `qwenrt doctor`'s GPU advice, as pure functions of the facts the
// device query gathers (so that they are tested without a GPU): does a build's list of AMD
// targets cover a card, and if not, what to do; how runtime, driver and build versions
// compare.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace qwenrt {

// An AMD target id: "gfx90a:sramecc+:xnack-" is processor gfx90a with two feature settings.
// The processor's digits encode the ISA version: gfx1100 is 11.0.0, gfx90a 9.0.10, gfx942
// 9.4.2 (the last two places are hex digits) — what HSA_OVERRIDE_GFX_VERSION spells.
struct GfxTarget {
  std::string processor;              // "gfx90a"
  std::vector<std::string> features;  // "sramecc+", "xnack-"
  int major = 0, minor = 0, stepping = 0;
};
// nullopt when `id` is not a gfx target id.
std::optional<GfxTarget> parse_gfx_target(const std::string& id);

// What a HIP build's targets mean for one card.
struct GfxCoverage {
  enum class Kind {
    kCovered,     // the build has code for it
    kOverride,    // no code for it, but for a card of its family: HSA_OVERRIDE_GFX_VERSION
    kNotCovered,  // rebuild with its target
    kUnknown,     // the runtime reported no target id
  };
  Kind kind = Kind::kUnknown;
  std::string advice;  // one line for the user; empty when covered
};
// `build_targets`: the build's targets, separated by spaces or semicolons
// ("gfx1100 gfx942 gfx90a"); `device_target`: the runtime's id for the card
// ("gfx1101", "gfx90a:sramecc+:xnack-"). Code for a target with a feature setting runs only
// where the card has that setting; a target without one runs either way. An override is
// offered within an RDNA family (same major and minor: gfx1101 runs gfx1100 code as
// 11.0.0), the practice AMD's own libraries rely on but do not support; CDNA cards of
// one major differ too much for that.
GfxCoverage gfx_coverage(const std::string& build_targets, const std::string& device_target);

// Version numbers as the runtimes report them, as "major.minor[.patch]". CUDA:
// 1000·major + 10·minor (12040 is 12.4). HIP: 10^7·major + 10^5·minor + patch
// (50731921 is 5.7.31921). Empty for a non-positive number.
std::string cuda_version_string(int version);
std::string hip_version_string(int version);

// Whether dotted version `a` is older than `b`, comparing major, minor and patch in turn
// (a missing part counts as 0); nullopt when either does not start with a number.
std::optional<bool> version_older(const std::string& a, const std::string& b);

// The warning for a runtime (HIP: libamdhip64; CUDA: the driver) older than the one the
// build was made with, or "" when it is not older or a version is unknown. `what` names the
// runtime ("HIP runtime", "CUDA driver").
std::string version_advice(const std::string& what, const std::string& found,
                           const std::string& built_with);

}  // namespace qwenrt
