// What a token mask costs over a real vocabulary: for each grammar, a document is stepped
// byte by byte and the mask filled at every prefix, 5 times; prints the mean and worst
// milliseconds of the first fill at a prefix (as a draw fills it once: what earlier prefixes
// left in the caches of pattern masks is kept, as in a generation) and of the best of the 5
// (warm memory caches), and the trie steps of the worst. With --check, every mask is also compared with the tokens stepped one
// by one through the matcher (slow: the whole vocabulary at every prefix).
//
//   qwenrt_mask_bench TOKENIZER_DIR [--check]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_grammar.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

using namespace qwenrt;
using namespace qwenrt::structured;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR [--check]\n", argv[0]);
    return 2;
  }
  const bool check = argc > 2 && std::strcmp(argv[2], "--check") == 0;
  const Tokenizer tokenizer = Tokenizer::load(argv[1]);
  auto t0 = std::chrono::steady_clock::now();
  const Vocabulary vocabulary(tokenizer);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("vocabulary: %d tokens, built in %.1f ms\n", tokenizer.vocab_size(), build_ms);
  struct Case {
    const char* name;
    const char* schema;  // empty: any JSON object
    const char* document;
  };
  const std::vector<Case> cases = {
      {"any JSON object", "", R"({"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"]})"},
      {"a string with maxLength 40", R"({"type": "string", "maxLength": 40})", R"("The quick brown fox jumps over it")"},
      {"pattern ^[a-z ]+$ (permissive)", R"({"type": "string", "pattern": "^[a-z ]+$"})", R"("the quick brown fox jumps over it")"},
      {"pattern ^[a-z ]+$, maxLength 40", R"({"type": "string", "pattern": "^[a-z ]+$", "maxLength": 40})",
       R"("the quick brown fox jumps over it")"},
      {"pattern ^[a-z ]+$, minLength 20", R"({"type": "string", "pattern": "^[a-z ]+$", "minLength": 20})",
       R"("the quick brown fox jumps over it")"},
      {"pattern fox (unanchored)", R"({"type": "string", "pattern": "fox"})", R"("The quick brown fox jumps over it")"},
      {"pattern ^\\d{3}-\\d{4}$", R"({"type": "string", "pattern": "^\\d{3}-\\d{4}$"})", R"("555-1212")"},
      {"pattern e-mail in an object",
       R"({"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string",
           "pattern": "^[\\w.+-]+@[\\w-]+(\\.[\\w-]+)+$", "maxLength": 60}}, "required": ["name", "email"]})",
       R"({"name": "Ada", "email": "ada.lovelace@example.org"})"},
  };
  const size_t words = (static_cast<size_t>(tokenizer.vocab_size()) + 31) / 32;
  for (const Case& c : cases) {
    const auto grammar = std::make_shared<const Grammar>(
        c.schema[0] == '\0' ? any_json_object_grammar() : compile_json_schema(nlohmann::ordered_json::parse(c.schema)));
    JsonMatcher matcher(grammar);
    MatchState state = matcher.start();
    const std::string document = c.document;
    double total = 0, worst = 0, first_total = 0, first_worst = 0;
    size_t worst_steps = 0, mismatches = 0;
    std::vector<uint32_t> mask(words);
    for (size_t n = 0; n <= document.size(); ++n) {
      double best = 1e9;
      size_t steps = 0;
      for (int r = 0; r < 5; ++r) {
        const auto a = std::chrono::steady_clock::now();
        steps = vocabulary.fill(matcher, state, mask);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
        if (r == 0) {
          first_total += ms;
          first_worst = std::max(first_worst, ms);
        }
        best = std::min(best, ms);
      }
      total += best;
      if (best > worst) {
        worst = best;
        worst_steps = steps;
      }
      if (check) {
        for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
          const std::string_view bytes = vocabulary.bytes(id);
          MatchState probe = state;
          const bool expected = !bytes.empty() && matcher.advance_all(probe, bytes);
          const bool got = ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) != 0;
          if (expected != got && ++mismatches <= 3) {
            std::printf("  MISMATCH after %s: token %d '%.*s' expected %d\n", document.substr(0, n).c_str(), id,
                        static_cast<int>(bytes.size()), bytes.data(), expected);
          }
        }
      }
      if (n < document.size() && !matcher.advance_all(state, document.substr(n, 1))) {
        std::printf("  the document is refused at byte %zu\n", n);
        return 1;
      }
    }
    const auto fills = static_cast<double>(document.size() + 1);
    std::printf("%-34s first: mean %.3f worst %.3f ms; best of 5: mean %.3f worst %.3f ms (%zu steps)%s\n", c.name,
                first_total / fills, first_worst, total / fills, worst, worst_steps,
                check ? (mismatches == 0 ? "  masks checked" : "  MASKS DIFFER") : "");
    if (mismatches > 0) return 1;
  }
  return 0;
}
