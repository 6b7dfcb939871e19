#include "structured/constraint.h"

#include <algorithm>

#include "core/error.h"

namespace qwenrt::structured {

namespace {

bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

constexpr int kMaxWhitespaceBetweenCalls = 2;  // tokens

}  // namespace

GrammarConstraint::GrammarConstraint(ConstraintOptions options)
    : options_(std::move(options)), matcher_(options_.grammar) {
  QWENRT_CHECK(options_.vocabulary != nullptr && options_.grammar != nullptr, "a grammar constraint without its parts");
  restart_text(true);
  if (state_.dead()) {
    throw Error(ErrorCategory::kInvalidArgument, "the text's opening does not fit its grammar");
  }
  if (options_.thinking) phase_ = Phase::kThinking;
  else if (options_.think_open >= 0) phase_ = Phase::kMaybeThink;
}

void GrammarConstraint::restart_text(bool with_prefix) {
  state_ = matcher_.start();
  if (with_prefix) matcher_.advance_all(state_, options_.prefix);
}

bool GrammarConstraint::next_mask(std::span<uint32_t> mask) {
  switch (phase_) {
    case Phase::kThinking:
      // Free, but the answer may not end before its reasoning does.
      std::fill(mask.begin(), mask.end(), ~0u);
      for (const int32_t id : options_.end_ids) refuse_token(mask, id);
      return true;
    case Phase::kBetweenCalls:
      std::fill(mask.begin(), mask.end(), 0u);
      allow_token(mask, options_.call_open);
      for (const int32_t id : options_.final_ids) allow_token(mask, id);
      if (between_whitespace_ < kMaxWhitespaceBetweenCalls) {
        for (const int32_t id : options_.vocabulary->whitespace_tokens()) allow_token(mask, id);
      }
      return true;
    case Phase::kEnded:
      std::fill(mask.begin(), mask.end(), 0u);
      for (const int32_t id : options_.end_ids) allow_token(mask, id);
      return true;
    case Phase::kMaybeThink:
    case Phase::kText:
      break;
  }
  options_.vocabulary->fill(matcher_, state_, mask);
  const bool any = std::any_of(mask.begin(), mask.end(), [](uint32_t word) { return word != 0; });
  const bool complete = matcher_.accepting(state_);
  // Nowhere left to go unfinished (not expected: the grammar refuses what it cannot finish,
  // and every byte is some token's): the end, reported as a cut.
  stuck_ = !any && !complete;
  if (complete || stuck_) {
    for (const int32_t id : options_.end_ids) allow_token(mask, id);
  }
  // Complete, and not even an end id may follow (the model has none): the text ends here,
  // whatever is drawn.
  complete_ = complete && !any && options_.end_ids.empty();
  if (phase_ == Phase::kMaybeThink) allow_token(mask, options_.think_open);
  return true;
}

void GrammarConstraint::accept(int32_t id) {
  switch (phase_) {
    case Phase::kEnded:
      return;
    case Phase::kThinking:
      if (id == options_.think_close) {
        phase_ = Phase::kText;
        restart_text(true);
      }
      return;
    case Phase::kBetweenCalls:
      if (id == options_.call_open) {
        phase_ = Phase::kText;
        restart_text(false);  // the model writes this call's opening itself
      } else if (contains(options_.final_ids, id)) {
        phase_ = Phase::kEnded;
      } else {
        ++between_whitespace_;
      }
      return;
    case Phase::kMaybeThink:
      if (id == options_.think_open) {
        phase_ = Phase::kThinking;
        return;
      }
      phase_ = Phase::kText;
      [[fallthrough]];
    case Phase::kText:
      break;
  }
  if (complete_) {
    // (A forced call always has its </tool_call> to end on: never here.)
    dropped_last_ = true;
    phase_ = Phase::kEnded;
    return;
  }
  if (contains(options_.end_ids, id)) {
    if (stuck_) {
      cut_ = true;
      phase_ = Phase::kEnded;
      return;
    }
    if (options_.call_open >= 0) {
      phase_ = Phase::kBetweenCalls;
      between_whitespace_ = 0;
    } else {
      phase_ = Phase::kEnded;
    }
    return;
  }
  if (!matcher_.advance_all(state_, options_.vocabulary->bytes(id))) {
    // A token the mask did not allow (it cannot happen through the scheduler): the text can
    // no longer be completed, so it ends here, cut.
    cut_ = true;
    phase_ = Phase::kEnded;
  }
}

}  // namespace qwenrt::structured
