// Structured output as a TokenConstraint: a JSON grammar over the text a sequence writes,
// with what comes around that text in Qwen's formats.
// - Reasoning first: where the model may think (Qwen3), the first token may open <think>,
//   and what follows up to </think> is free; the grammar applies after it.
// - The end: once the text is complete, only its end ids (the turn's end; </tool_call> for a
//   forced call) or trailing whitespace may come.
// - Forced tool calls that may be several: after a call's </tool_call>, whitespace, another
//   <tool_call> (whose call the grammar constrains again) or the final end.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "structured/json_grammar.h"
#include "structured/token_mask.h"

namespace qwenrt::structured {

struct ConstraintOptions {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const Vocabulary> vocabulary;
  std::string prefix;                  // the text's opening, already in the prompt (fed first)
  std::vector<int32_t> end_ids;        // end the text once it is complete
  int32_t think_open = -1, think_close = -1;  // <think>, </think>: reasoning may come first
  bool thinking = false;               // the prompt itself opened <think>
  int32_t call_open = -1;              // <tool_call>: after an end id, another call may come
  std::vector<int32_t> final_ids;      // with call_open: what ends the answer after a call
};

class GrammarConstraint final : public TokenConstraint {
 public:
  // Throws Error(kInvalidArgument) when the prefix is not a valid opening of the grammar.
  explicit GrammarConstraint(ConstraintOptions options);
  bool next_mask(std::span<uint32_t> mask) override;
  void accept(int32_t id) override;
  bool ended() const override { return phase_ == Phase::kEnded; }
  bool cut() const override { return cut_; }
  bool dropped_last() const override { return dropped_last_; }

 private:
  enum class Phase { kMaybeThink, kThinking, kText, kBetweenCalls, kEnded };
  void restart_text(bool with_prefix);
  ConstraintOptions options_;
  JsonMatcher matcher_;
  MatchState state_, next_;
  Phase phase_ = Phase::kText;
  int between_whitespace_ = 0;  // whitespace tokens since the last call
  bool stuck_ = false;          // the last mask found no way on: its end ids end the text cut
  bool cut_ = false;
  bool complete_ = false;       // the last mask found the text complete with nothing to follow it
  bool dropped_last_ = false;
};

}  // namespace qwenrt::structured
