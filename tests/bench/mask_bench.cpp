// What a token mask costs over a real vocabulary: for each grammar, a document is stepped
// byte by byte and the mask filled at every prefix, 5 times; prints the mean and worst
// milliseconds of the first fill at a prefix (as a draw fills it once: what earlier prefixes
// left in the caches of pattern masks is kept, as in a generation) and of the best of the 5
// (warm memory caches), and the trie steps of the worst. With --check, every mask is also compared with the tokens stepped one
// by one through the matcher (slow: the whole vocabulary at every prefix).
// With --streams N [--threads T]: N sequences of one schema of three pattern strings, each
// writing its own answer and starting a step after the one before, fill their masks at
// every step on T threads (as the scheduler's pool does); prints a step's fill time.
// With --walk N: N documents of any JSON object, each drawn a token at a time uniformly from
// the tokens its mask allows (what a model with random weights writes under json_object),
// 256 tokens at most; prints the fill time at every step.
//
//   qwenrt_mask_bench TOKENIZER_DIR [--check | --streams N [--threads T] | --walk N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "structured/json_grammar.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

using namespace qwenrt;
using namespace qwenrt::structured;

namespace {

// N sequences of one grammar, each with its own answer, a step apart.
int streams(const Vocabulary& vocabulary, int vocab_size, int n, int threads) {
  const auto grammar = std::make_shared<const Grammar>(compile_json_schema(nlohmann::ordered_json::parse(R"({
      "type": "object", "required": ["code", "email", "note"],
      "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                     "email": {"type": "string", "pattern": "^[a-z0-9._]{1,20}@[a-z]{2,12}\\.(com|org|net)$"},
                     "note": {"type": "string", "pattern": "^[A-Za-z ,.]{0,80}$"}}})")));
  const JsonMatcher matcher(grammar);
  uint64_t seed = 7;
  auto next = [&](int below) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((seed >> 33) % static_cast<uint64_t>(below));
  };
  auto letters = [&](const char* from, int count) {
    std::string text;
    for (int i = 0; i < count; ++i) text += from[next(static_cast<int>(std::strlen(from)))];
    return text;
  };
  std::vector<std::string> answers;
  for (int i = 0; i < n; ++i) {
    answers.push_back(R"({"code": ")" + letters("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 3) + "-" + letters("0123456789", 4) +
                      R"(", "email": ")" + letters("abcdefghijklmnopqrstuvwxyz0123456789._", 3 + next(12)) + "@" +
                      letters("abcdefghijklmnopqrstuvwxyz", 2 + next(8)) + (next(2) ? ".org" : ".com") +
                      R"(", "note": ")" + letters("abcdefghijklmnopqrstuvwxyz  ,.", 10 + next(60)) + R"("})");
  }
  std::vector<MatchState> states(static_cast<size_t>(n), matcher.start());
  std::vector<size_t> at(static_cast<size_t>(n), 0);
  std::vector<std::vector<uint32_t>> masks(static_cast<size_t>(n),
                                           std::vector<uint32_t>((static_cast<size_t>(vocab_size) + 31) / 32));
  ThreadPool pool(threads);
  std::vector<double> step_ms;
  size_t fills = 0;
  for (int step = 0;; ++step) {
    std::vector<int> active;
    for (int i = 0; i < n; ++i) {
      if (step >= i && at[static_cast<size_t>(i)] <= answers[static_cast<size_t>(i)].size()) active.push_back(i);
    }
    if (active.empty() && step >= n) break;
    const auto a = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(active.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const auto i = static_cast<size_t>(active[static_cast<size_t>(k)]);
        vocabulary.fill(matcher, states[i], masks[i]);
      }
    });
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    fills += active.size();
    for (const int i : active) {
      const auto s = static_cast<size_t>(i);
      if (at[s] < answers[s].size() && !matcher.advance_all(states[s], std::string_view(answers[s]).substr(at[s], 1))) {
        std::printf("answer %d refused at byte %zu: %s\n", i, at[s], answers[s].c_str());
        return 1;
      }
      ++at[s];
    }
  }
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  double total = 0;
  for (const double ms : step_ms) total += ms;
  std::printf("%d streams on %d threads: %zu steps, %zu masks; a step's fills mean %.2f ms, median %.2f, p90 %.2f, "
              "worst %.2f; %.3f ms a mask on average\n",
              n, pool.size(), step_ms.size(), fills, total / static_cast<double>(step_ms.size()),
              sorted[sorted.size() / 2], sorted[sorted.size() * 9 / 10], sorted.back(),
              total * pool.size() / static_cast<double>(fills));
  return 0;
}

// Documents drawn from the mask itself: the states a model that follows the grammar but not
// the text reaches (long strings, deep nesting, numbers), which a written document does not.
int walk(const Vocabulary& vocabulary, int vocab_size, int n) {
  const auto grammar = std::make_shared<const Grammar>(any_json_object_grammar());
  const JsonMatcher matcher(grammar);
  std::vector<uint32_t> mask((static_cast<size_t>(vocab_size) + 31) / 32);
  uint64_t seed = 11;
  std::vector<double> fill_ms;
  std::vector<size_t> fill_steps;
  for (int doc = 0; doc < n; ++doc) {
    MatchState state = matcher.start();
    std::string text;
    for (int t = 0; t < 256; ++t) {
      const auto a = std::chrono::steady_clock::now();
      const size_t steps = vocabulary.fill(matcher, state, mask);
      fill_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
      fill_steps.push_back(steps);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab_size; ++id) {
        if ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const int32_t id = allowed[(seed >> 33) % allowed.size()];
      const std::string_view bytes = vocabulary.bytes(id);
      if (bytes.empty()) break;  // an end token: the document is complete
      if (!matcher.advance_all(state, bytes)) {
        std::printf("document %d: token %d allowed by the mask but refused by the matcher\n", doc, id);
        return 1;
      }
      text += bytes;
    }
    if (doc < 2) std::printf("document %d (%zu bytes): %.160s\n", doc, text.size(), text.c_str());
  }
  std::vector<double> sorted = fill_ms;
  std::sort(sorted.begin(), sorted.end());
  double total = 0;
  for (const double ms : fill_ms) total += ms;
  size_t worst = 0;
  for (size_t i = 0; i < fill_ms.size(); ++i) {
    if (fill_ms[i] > fill_ms[worst]) worst = i;
  }
  std::printf("%d drawn documents, %zu masks: mean %.3f ms, median %.3f, p90 %.3f, p99 %.3f, worst %.3f (%zu trie steps)\n",
              n, fill_ms.size(), total / static_cast<double>(fill_ms.size()), sorted[sorted.size() / 2],
              sorted[sorted.size() * 9 / 10], sorted[sorted.size() * 99 / 100], sorted.back(), fill_steps[worst]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR [--check | --streams N [--threads T] | --walk N]\n", argv[0]);
    return 2;
  }
  const bool check = argc > 2 && std::strcmp(argv[2], "--check") == 0;
  int n_streams = 0, threads = 2, walks = 0;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--streams") == 0) n_streams = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--walk") == 0) walks = std::atoi(argv[i + 1]);
  }
  const Tokenizer tokenizer = Tokenizer::load(argv[1]);
  auto t0 = std::chrono::steady_clock::now();
  const Vocabulary vocabulary(tokenizer);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("vocabulary: %d tokens, built in %.1f ms\n", tokenizer.vocab_size(), build_ms);
  if (walks > 0) return walk(vocabulary, tokenizer.vocab_size(), walks);
  if (n_streams > 0) return streams(vocabulary, tokenizer.vocab_size(), n_streams, threads);
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
