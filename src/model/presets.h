// Model shapes of the released Qwen2.5 and Qwen3 dense models (QWEN.md §Shapes), for the
// synthetic benchmark: random weights of exactly that shape, no checkpoint needed.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace qwenrt {

// Names like "qwen2.5-7b" or "qwen3-0.6b"; throws Error(kInvalidArgument) listing the names.
ModelConfig synthetic_config(const std::string& name);
std::vector<std::string> synthetic_names();

}  // namespace qwenrt
