#include "backend/common/gpu_advice.h"

#include <algorithm>
#include <sstream>

namespace qwenrt {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::vector<std::string> split_targets(const std::string& list) {
  std::string spaced = list;
  std::replace(spaced.begin(), spaced.end(), ';', ' ');
  std::istringstream stream(spaced);
  std::vector<std::string> targets;
  std::string target;
  while (stream >> target) targets.push_back(target);
  return targets;
}

// Whether code built with `built` feature settings runs on a card with `device` settings:
// every setting the code asks for must be the card's (a card that lists no setting for a
// feature does not have it switchable, so any code runs).
bool features_match(const std::vector<std::string>& built, const std::vector<std::string>& device) {
  for (const std::string& feature : built) {
    const std::string name = feature.substr(0, feature.size() - 1);
    for (const std::string& have : device) {
      if (have.substr(0, have.size() - 1) == name && have != feature) return false;
    }
  }
  return true;
}

std::string isa_version(const GfxTarget& target) {
  return std::to_string(target.major) + "." + std::to_string(target.minor) + "." +
         std::to_string(target.stepping);
}

std::string rebuild_hint(const GfxTarget& device) {
  return "rebuild with -DQWENRT_HIP_ARCHITECTURES=" + device.processor + " (or add it to the list)";
}

// The numeric parts of a dotted version; empty when it does not start with a number.
std::vector<long long> version_parts(const std::string& text) {
  std::vector<long long> parts;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    long long value = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && value < (1ll << 40))
      value = value * 10 + (text[i++] - '0');
    parts.push_back(value);
    if (i >= text.size() || text[i] != '.') break;
    ++i;
  }
  return parts;
}

}  // namespace

std::optional<GfxTarget> parse_gfx_target(const std::string& id) {
  GfxTarget target;
  std::istringstream stream(id);
  std::string part;
  if (!std::getline(stream, part, ':')) return std::nullopt;
  // "gfx" and at least three version digits: major (one or more), minor, stepping.
  if (part.size() < 6 || part.compare(0, 3, "gfx") != 0) return std::nullopt;
  const std::string digits = part.substr(3);
  for (char c : digits) {
    if (hex_digit(c) < 0) return std::nullopt;
  }
  for (size_t i = 0; i + 2 < digits.size(); ++i) {
    if (hex_digit(digits[i]) > 9) return std::nullopt;
    target.major = target.major * 10 + hex_digit(digits[i]);
  }
  target.minor = hex_digit(digits[digits.size() - 2]);
  target.stepping = hex_digit(digits[digits.size() - 1]);
  target.processor = part;
  while (std::getline(stream, part, ':')) {
    if (part.size() < 2 || (part.back() != '+' && part.back() != '-')) return std::nullopt;
    target.features.push_back(part);
  }
  return target;
}

GfxCoverage gfx_coverage(const std::string& build_targets, const std::string& device_target) {
  GfxCoverage coverage;
  const std::optional<GfxTarget> device = parse_gfx_target(device_target);
  if (!device) {
    coverage.advice =
        "the HIP runtime reports no gfx target for this GPU ('" + device_target + "')";
    return coverage;
  }
  std::vector<GfxTarget> built;
  for (const std::string& id : split_targets(build_targets)) {
    if (std::optional<GfxTarget> target = parse_gfx_target(id)) built.push_back(*target);
  }
  for (const GfxTarget& target : built) {
    if (target.processor == device->processor &&
        features_match(target.features, device->features)) {
      coverage.kind = GfxCoverage::Kind::kCovered;
      return coverage;
    }
  }
  for (const GfxTarget& target : built) {
    if (target.processor == device->processor) {
      coverage.kind = GfxCoverage::Kind::kNotCovered;
      coverage.advice = "this build's " + device->processor +
                        " code needs other feature settings than this GPU's ('" + device_target +
                        "'): " + rebuild_hint(*device);
      return coverage;
    }
  }
  // RDNA (gfx10, gfx11 and later): a family shares major and minor.
  if (device->major >= 10) {
    for (const GfxTarget& target : built) {
      if (target.major == device->major && target.minor == device->minor) {
        coverage.kind = GfxCoverage::Kind::kOverride;
        coverage.advice =
            "no code for " + device->processor + ", but for " + target.processor +
            " of its family: run with HSA_OVERRIDE_GFX_VERSION=" + isa_version(target) +
            " (works in practice, not supported by AMD), or " + rebuild_hint(*device);
        return coverage;
      }
    }
  }
  coverage.kind = GfxCoverage::Kind::kNotCovered;
  coverage.advice = "no code for " + device->processor + ": " + rebuild_hint(*device);
  return coverage;
}

std::string cuda_version_string(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string hip_version_string(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 10000000) + "." + std::to_string((version / 100000) % 100) + "." +
         std::to_string(version % 100000);
}

std::optional<bool> version_older(const std::string& a, const std::string& b) {
  std::vector<long long> left = version_parts(a), right = version_parts(b);
  if (left.empty() || right.empty()) return std::nullopt;
  left.resize(3, 0);
  right.resize(3, 0);
  return left < right;
}

std::string version_advice(const std::string& what, const std::string& found,
                           const std::string& built_with) {
  if (version_older(found, built_with).value_or(false)) {
    return "the " + what + " " + found + " is older than " + built_with +
           ", the one this build was made with: update it, or rebuild qwenrt against it";
  }
  return "";
}

}  // namespace qwenrt
