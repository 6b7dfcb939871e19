// Reads tokenizer.json in one pass. model.vocab and model.merges (hundreds of thousands of
// entries) go straight into flat lists instead of a JSON tree, which is most of the load
// time; everything else becomes an ordinary nlohmann::json tree.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace qwenrt::tok {

struct TokenizerJson {
  nlohmann::json root;  // the file without model.vocab and model.merges
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;       // in file order
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

// Parses `text`; throws qwenrt::Error (kInvalidModel) naming `what` and the problem.
TokenizerJson parse_tokenizer_json(const std::string& text, const std::string& what);

}  // namespace qwenrt::tok
