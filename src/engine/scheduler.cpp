#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "engine/sampling_ranges.h"
#include "core/thread_pool.h"

namespace qwenrt {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "";
}

struct Scheduler::Sequence {
  uint64_t id = 0;
  SequenceRequest request;
  std::vector<int32_t> tokens;  // prompt, then generated
  int generated = 0;
  std::unique_ptr<SequenceBlocks> blocks;  // null while waiting
  int chunk = 0;                           // tokens this step computes
  int cached_prompt = -1;                  // prompt tokens its first admission took from the prefix cache
  std::vector<int32_t> held_ids;           // ids it may not sample before min_tokens
  std::vector<uint32_t> mask;              // the constraint's mask for this step's draw

  int computed() const { return blocks ? blocks->length() : 0; }
  int pending() const { return static_cast<int>(tokens.size()) - computed(); }
};

Scheduler::Scheduler(Engine& engine, bool prefix_cache)
    : engine_(engine), prefix_cache_(prefix_cache), eos_ids_(engine.config().eos_token_ids) {
  update_stats();
}

Scheduler::~Scheduler() = default;

uint64_t Scheduler::submit(SequenceRequest request) {
  engine_.check_prompt(request.prompt, "the prompt");
  const int prompt_tokens = static_cast<int>(request.prompt.size());
  if (prompt_tokens >= engine_.max_context()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "the prompt has " + std::to_string(prompt_tokens) + " tokens, at or over the context limit of " +
                    std::to_string(engine_.max_context()) + " (leave room for at least one new token)");
  }
  if (request.max_new_tokens < 1) {
    throw Error(ErrorCategory::kInvalidArgument, "the number of new tokens must be at least 1");
  }
  const int64_t pool_tokens = engine_.kv_pool_tokens();
  if (prompt_tokens + 1 > pool_tokens) {
    throw Error(ErrorCategory::kInvalidArgument, "the prompt has " + std::to_string(prompt_tokens) +
                                                     " tokens but the KV cache holds only " +
                                                     std::to_string(pool_tokens));
  }
  const SamplingParams& p = request.sampling;
  if (const auto why = sampling_out_of_range(p)) {
    throw Error(ErrorCategory::kInvalidArgument, "sampling parameters out of range: " + *why);
  }
  if (request.logit_bias.size() > static_cast<size_t>(kMaxLogitBiasPerRow)) {
    throw Error(ErrorCategory::kInvalidArgument, "logit_bias has " + std::to_string(request.logit_bias.size()) +
                                                     " entries; at most " + std::to_string(kMaxLogitBiasPerRow) +
                                                     " are supported");
  }
  std::vector<int32_t> biased;
  for (const TokenBias& entry : request.logit_bias) {
    if (entry.id < 0 || entry.id >= engine_.config().vocab_size || !std::isfinite(entry.bias)) {
      throw Error(ErrorCategory::kInvalidArgument, "logit_bias entries need ids in the vocabulary and finite values");
    }
    biased.push_back(entry.id);
  }
  std::sort(biased.begin(), biased.end());
  if (std::adjacent_find(biased.begin(), biased.end()) != biased.end()) {
    throw Error(ErrorCategory::kInvalidArgument, "logit_bias names a token id twice");
  }
  auto sequence = std::make_unique<Sequence>();
  if (request.min_tokens > 0) {
    // As vLLM's min_tokens: until then the end-of-sequence and stop ids are not drawn (the
    // former also with ignore_eos, where they would not end it).
    sequence->held_ids = eos_ids_;
    sequence->held_ids.insert(sequence->held_ids.end(), request.stop_ids.begin(), request.stop_ids.end());
    std::sort(sequence->held_ids.begin(), sequence->held_ids.end());
    sequence->held_ids.erase(std::unique(sequence->held_ids.begin(), sequence->held_ids.end()), sequence->held_ids.end());
    if (sequence->held_ids.size() > static_cast<size_t>(kMaxBannedPerRow)) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "min_tokens would hold off " + std::to_string(sequence->held_ids.size()) +
                      " end-of-sequence and stop ids; at most " + std::to_string(kMaxBannedPerRow) + " are supported",
                  "min_tokens");
    }
  }
  sequence->tokens = request.prompt;
  sequence->request = std::move(request);
  std::lock_guard<std::mutex> lock(mutex_);
  sequence->id = next_id_++;
  const uint64_t id = sequence->id;
  submitted_.push_back(std::move(sequence));
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_.push_back(id);
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_.empty() && cancelled_.empty() && stats_.running == 0 && stats_.waiting == 0;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Scheduler::take_submissions() {
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& sequence : submitted_) {
      prompt_tokens_ += static_cast<int64_t>(sequence->tokens.size());
      waiting_.push_back(std::move(sequence));
    }
    submitted_.clear();
    cancelled.swap(cancelled_);
  }
  for (uint64_t id : cancelled) {
    for (auto* queue : {&running_, &waiting_}) {
      auto found = std::find_if(queue->begin(), queue->end(), [&](const auto& s) { return s->id == id; });
      if (found == queue->end()) continue;
      finish(**found, FinishReason::kCancelled);
      queue->erase(found);
      break;
    }
  }
}

// Gives the sequence's blocks back (published ones stay cached) and reports its end; the
// caller removes it from its queue.
void Scheduler::finish(Sequence& sequence, FinishReason reason) {
  sequence.blocks.reset();
  if (!events_.empty() && events_.back().id == sequence.id && events_.back().finish == FinishReason::kNone) {
    events_.back().finish = reason;
  } else {
    events_.push_back(SequenceEvent{sequence.id, -1, reason});
  }
}

void Scheduler::preempt(Sequence& sequence) {
  auto in_batch = std::find(batch_.begin(), batch_.end(), &sequence);
  if (in_batch != batch_.end()) {
    budget_ += sequence.chunk;
    batch_.erase(in_batch);
  }
  sequence.blocks.reset();
  sequence.chunk = 0;
  ++preemptions_;
  auto found = std::find_if(running_.begin(), running_.end(), [&](const auto& s) { return s.get() == &sequence; });
  QWENRT_CHECK(found != running_.end(), "preempting a sequence that is not running");
  std::unique_ptr<Sequence> owned = std::move(*found);
  running_.erase(found);
  // Back to the queue in arrival order: it goes before every later arrival.
  auto place = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& s) { return s->id > owned->id; });
  waiting_.insert(place, std::move(owned));
}

// Reserves `count` positions for a running sequence, preempting the newest running ones
// while the pool is short. False when `sequence` itself had to go.
bool Scheduler::reserve_or_preempt(Sequence& sequence, int count) {
  while (!sequence.blocks->reserve(count)) {
    Sequence& newest = *running_.back();
    preempt(newest);
    if (&newest == &sequence) return false;
  }
  return true;
}

// The original Qwen's dynamic NTK: the prompt's length fixes a sequence's RoPE alpha, also
// when it is recomputed after preemption (its request keeps the prompt).
int Scheduler::ntk_alpha(const Sequence& sequence) const {
  return ntk_alpha_index(engine_.config(), static_cast<int>(sequence.request.prompt.size()));
}

// Cached blocks hold keys under alpha 1; a sequence with another alpha neither uses nor
// publishes them (keys computed under one alpha are never reused under another).
bool Scheduler::shares_prefix(const Sequence& sequence) const { return prefix_cache_ && ntk_alpha(sequence) == 0; }

bool Scheduler::admit(Sequence& sequence, int budget) {
  sequence.blocks = engine_.new_sequence();
  int adopted = 0;
  if (shares_prefix(sequence)) {
    // At least the last token is computed again: its logits draw the next one.
    adopted = sequence.blocks->adopt_cached_prefix(
        std::span<const int32_t>(sequence.tokens).first(sequence.tokens.size() - 1));
  }
  const int count = std::min(sequence.pending(), budget);
  if (!sequence.blocks->reserve(count)) {
    sequence.blocks.reset();
    return false;
  }
  // Only the first admission counts: after a preemption the cache holds its own blocks.
  if (sequence.cached_prompt < 0) sequence.cached_prompt = adopted;
  sequence.chunk = count;
  return true;
}

const std::vector<SequenceEvent>& Scheduler::step() {
  events_.clear();
  launch();
  complete();
  return events_;
}

void Scheduler::take_events(std::vector<SequenceEvent>& out) {
  out.clear();
  out.swap(events_);
}

// The batch's sequences end with an error; their blocks go back and the rest carry on.
void Scheduler::fail_batch() {
  for (Sequence* sequence : batch_) {
    finish(*sequence, FinishReason::kError);
    std::erase_if(running_, [&](const auto& s) { return s.get() == sequence; });
  }
  batch_.clear();
}

void Scheduler::launch() {
  QWENRT_CHECK(!launched_, "a step launched before the last one completed");
  take_submissions();
  batch_.clear();
  budget_ = engine_.max_batch_tokens();
  const int seats = engine_.max_seqs();
  // Running sequences, oldest first: every decode (one token each) before any part-prefilled
  // prompt, which then takes what budget is left. (The passes take disjoint sequences: a
  // sequence's pending count does not change between them.)
  for (const bool decoding : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget_ > 0;) {
      Sequence& sequence = *running_[i];
      if ((sequence.pending() == 1) != decoding) {
        ++i;
        continue;
      }
      const int count = std::min(sequence.pending(), budget_);
      if (!reserve_or_preempt(sequence, count)) continue;  // it was the newest: gone from running_
      sequence.chunk = count;
      budget_ -= count;
      batch_.push_back(&sequence);
      ++i;
    }
  }
  // Then waiting ones in arrival order while seats and budget last; admission never preempts.
  while (!waiting_.empty() && budget_ > 0 && static_cast<int>(running_.size()) < seats) {
    Sequence& sequence = *waiting_.front();
    if (!admit(sequence, budget_)) {
      if (running_.empty() && batch_.empty()) {
        // Alone and still no room: the pool cannot hold this sequence any further.
        finish(sequence, FinishReason::kLength);
        waiting_.erase(waiting_.begin());
        continue;
      }
      break;
    }
    budget_ -= sequence.chunk;
    batch_.push_back(&sequence);
    std::unique_ptr<Sequence> owned = std::move(waiting_.front());
    waiting_.erase(waiting_.begin());
    auto place = std::find_if(running_.begin(), running_.end(), [&](const auto& s) { return s->id > owned->id; });
    running_.insert(place, std::move(owned));
  }
  if (batch_.empty()) {
    update_stats();
    return;
  }

  inputs_.clear();
  constrained_.clear();
  for (Sequence* sequence : batch_) {
    const int start = sequence->computed();
    const bool samples = start + sequence->chunk == static_cast<int>(sequence->tokens.size());
    if (start < static_cast<int>(sequence->request.prompt.size())) {
      computed_prompt_tokens_ += std::min<int>(sequence->chunk, static_cast<int>(sequence->request.prompt.size()) - start);
    }
    SampleRow sampling;
    sampling.params = sequence->request.sampling;
    sampling.params.prompt_tokens = static_cast<int32_t>(sequence->request.prompt.size());
    sampling.stream = sequence->request.stream;
    inputs_.push_back(StepInput{sequence->blocks.get(),
                                std::span<const int32_t>(sequence->tokens).subspan(static_cast<size_t>(start),
                                                                                   static_cast<size_t>(sequence->chunk)),
                                samples, sampling, sequence->tokens, sequence->request.top_logprobs,
                                ntk_alpha(*sequence),
                                sequence->generated < sequence->request.min_tokens
                                    ? std::span<const int32_t>(sequence->held_ids)
                                    : std::span<const int32_t>(),
                                sequence->request.logit_bias});
    if (samples && sequence->request.constraint != nullptr) {
      // Filled by fill_masks while the device runs the pass.
      sequence->mask.resize(static_cast<size_t>(token_mask_words(engine_.config().vocab_size)));
      inputs_.back().allowed = sequence->mask;
      constrained_.push_back(sequence);
    }
  }
  try {
    engine_.begin_step(inputs_, true, constrained_.empty() ? std::function<void()>() : [this] { fill_masks(); });
  } catch (const std::exception&) {
    fail_batch();
    update_stats();
    return;
  }
  launched_ = true;
}

// The constrained sequences' masks for this step's draw, on several threads (a mask walks
// the vocabulary: ≈ 0.2–1 ms on one core). A draw its constraint leaves free gets a mask
// that allows every id.
void Scheduler::fill_masks() {
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Sequence& sequence = *constrained_[static_cast<size_t>(i)];
      if (!sequence.request.constraint->next_mask(sequence.mask)) {
        std::fill(sequence.mask.begin(), sequence.mask.end(), ~0u);
      }
    }
  };
  const auto count = static_cast<int64_t>(constrained_.size());
  if (count == 1) {
    fill(0, 1);
    return;
  }
  if (!mask_pool_) mask_pool_ = std::make_unique<ThreadPool>(std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8));
  mask_pool_->parallel_for(count, 1, fill);
}

void Scheduler::complete() {
  if (!launched_) return;
  launched_ = false;
  try {
    engine_.end_step(sampled_, &logprobs_);
  } catch (const std::exception&) {
    fail_batch();
    update_stats();
    return;
  }
  ++steps_;

  // A sequence cancelled while this step ran (its caller found a stop string in the token
  // before, or its client went) takes nothing from it: the token it drew is neither counted
  // nor reported; take_submissions ends it.
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled = cancelled_;
  }
  std::vector<Sequence*> finished;
  for (size_t k = 0; k < batch_.size(); ++k) {
    Sequence& sequence = *batch_[k];
    if (sampled_[k] >= 0 && std::find(cancelled.begin(), cancelled.end(), sequence.id) != cancelled.end()) continue;
    if (sampled_[k] < 0) {
      if (shares_prefix(sequence)) sequence.blocks->publish_full_blocks(sequence.tokens);
      continue;
    }
    const int32_t token = sampled_[k];
    sequence.tokens.push_back(token);
    ++sequence.generated;
    ++generated_tokens_;
    if (shares_prefix(sequence)) sequence.blocks->publish_full_blocks(sequence.tokens);
    events_.push_back(SequenceEvent{sequence.id, token, FinishReason::kNone, std::move(logprobs_[k]),
                                    sequence.generated == 1 ? std::max(sequence.cached_prompt, 0) : -1});
    const SequenceRequest& request = sequence.request;
    const bool may_stop = sequence.generated >= request.min_tokens;
    const bool is_eos = !request.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
    const bool is_stop = std::find(request.stop_ids.begin(), request.stop_ids.end(), token) != request.stop_ids.end();
    bool constraint_ended = false;
    if (request.constraint != nullptr) {
      request.constraint->accept(token);
      constraint_ended = request.constraint->ended();
    }
    FinishReason reason = FinishReason::kNone;
    if (constraint_ended && (request.constraint->cut() || request.constraint->dropped_last())) {
      // Cut where the grammar had no way on, or complete with no end id to draw: the id
      // drawn is no part of the text.
      events_.back().token = -1;
      events_.back().logprobs = StepLogprobs{};
      --generated_tokens_;  // not a token of the answer (usage does not count it)
      reason = request.constraint->cut() ? FinishReason::kLength : FinishReason::kStop;
    } else if (constraint_ended || (may_stop && (is_eos || is_stop))) {
      reason = FinishReason::kStop;
    } else if (sequence.generated >= request.max_new_tokens ||
               static_cast<int>(sequence.tokens.size()) > engine_.max_context()) {
      reason = FinishReason::kLength;
    }
    if (reason != FinishReason::kNone) {
      finish(sequence, reason);
      finished.push_back(&sequence);
    }
  }
  if (!finished.empty()) {
    std::erase_if(running_, [&](const auto& s) {
      return std::find(finished.begin(), finished.end(), s.get()) != finished.end();
    });
  }
  update_stats();
}

void Scheduler::update_stats() {
  const BlockAllocator& blocks = engine_.block_allocator();
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.running = static_cast<int>(running_.size());
  stats_.waiting = static_cast<int>(waiting_.size());
  stats_.kv_blocks_total = blocks.num_blocks();
  stats_.kv_blocks_held = blocks.held_blocks();
  stats_.kv_blocks_cached = blocks.cached_unheld_blocks();
  stats_.prefix_lookups = blocks.lookups();
  stats_.prefix_hits = blocks.hits();
  stats_.preemptions = preemptions_;
  stats_.prompt_tokens = prompt_tokens_;
  stats_.computed_prompt_tokens = computed_prompt_tokens_;
  stats_.generated_tokens = generated_tokens_;
  stats_.steps = steps_;
}

}  // namespace qwenrt
