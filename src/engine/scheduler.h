// Continuous batching over Engine::step. Each step takes the running sequences' next tokens
// (one per decoding sequence), then as much waiting or part-prefilled prompt as the
// batch-token budget allows (prompts are prefilled in chunks, mixed with the decodes so
// running streams keep flowing), runs one forward pass and reports every sampled token.
//
// - Joins and cancels: submit() and cancel() may be called from any thread; they take
//   effect at the start of the next step, so a cancelled sequence's blocks are back in the
//   pool within one step.
// - KV exhaustion: when a sequence needs a block and none is free, the newest running
//   sequence is preempted: its blocks go back and it waits (first in line) to be recomputed
//   from its tokens, prompt and generated. Its random stream is keyed by position, so the
//   recomputed sequence draws exactly what it would have drawn.
// - Prefix cache: full blocks are published as they fill; a joining sequence shares the
//   published blocks of its longest cached prefix (kv_cache.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "qwenrt/engine.h"

namespace qwenrt {

class ThreadPool;

struct SequenceRequest {
  std::vector<int32_t> prompt;
  int max_new_tokens = 16;  // generation also stops at the context limit
  int min_tokens = 0;       // end-of-sequence and stop ids are not drawn before this many
  bool ignore_eos = false;
  std::vector<int32_t> stop_ids;  // besides the model's end-of-sequence ids
  SamplingParams sampling;
  uint64_t stream = 0;      // choice index: the random stream within the seed
  int top_logprobs = -1;    // >= 0: report each token's log-probability and this many alternatives
  std::vector<TokenBias> logit_bias;  // added to the logits of every draw (each id once)
  // What each draw may pick (structured output), told every id drawn; the sequence stops
  // (kStop) once it has ended. One per sequence: it keeps the sequence's state.
  std::shared_ptr<TokenConstraint> constraint;
};

// kError: the forward pass failed for the batch (e.g. non-finite logits); the server stays up.
enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);

// One thing a step did for a sequence: a new token, its end, or both. A token with kStop is
// the end-of-sequence or stop id that ended the sequence (its text is no part of the answer).
struct SequenceEvent {
  uint64_t id = 0;
  int32_t token = -1;  // -1: no token (a cancellation)
  FinishReason finish = FinishReason::kNone;
  StepLogprobs logprobs;  // when the request asked for them
  // With a sequence's first token: how many of its prompt's tokens had their keys from the
  // prefix cache, not computed for it (-1 with every other event).
  int cached_prompt_tokens = -1;
};

struct SchedulerStats {
  int running = 0, waiting = 0;
  int kv_blocks_total = 0;
  int kv_blocks_held = 0;    // held by sequences
  int kv_blocks_cached = 0;  // published, held by nobody: kept for prefix hits
  int64_t prefix_lookups = 0, prefix_hits = 0;  // blocks
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0, computed_prompt_tokens = 0, generated_tokens = 0;
  int64_t steps = 0;
};

class Scheduler {
 public:
  explicit Scheduler(Engine& engine, bool prefix_cache = true);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates the request (throws Error(kInvalidArgument) with the reason) and queues it.
  uint64_t submit(SequenceRequest request);
  // Ends the sequence at the next step (a kCancelled event); unknown or finished ids are ignored.
  void cancel(uint64_t id);
  // Runs one forward pass over the batch it builds and returns what happened; empty when
  // there is nothing to do.
  const std::vector<SequenceEvent>& step();
  // step() in two halves, so that the caller can work (deliver the last step's events)
  // while the device runs the next: launch() builds the batch and issues its forward pass,
  // complete() waits for it and records what it sampled. Events accumulate across both
  // (cancellations and admissions that fail are launch's) until take_events() hands them
  // over. Every launch() is followed by a complete() before the next launch().
  void launch();
  void complete();
  void take_events(std::vector<SequenceEvent>& out);
  bool launched() const { return launched_; }
  // True when nothing is running, waiting or about to be submitted or cancelled.
  bool idle() const;
  SchedulerStats stats() const;

 private:
  struct Sequence;
  void take_submissions();
  void finish(Sequence& sequence, FinishReason reason);
  bool reserve_or_preempt(Sequence& sequence, int count);
  void preempt(Sequence& sequence);
  int ntk_alpha(const Sequence& sequence) const;
  bool shares_prefix(const Sequence& sequence) const;
  bool admit(Sequence& sequence, int budget);
  void fail_batch();
  void fill_masks();
  void update_stats();

  Engine& engine_;
  bool prefix_cache_;
  std::vector<int32_t> eos_ids_;
  mutable std::mutex mutex_;                         // guards the three below and stats_
  std::vector<std::unique_ptr<Sequence>> submitted_;
  std::vector<uint64_t> cancelled_;
  uint64_t next_id_ = 1;
  SchedulerStats stats_;
  // Owned by the stepping thread.
  std::vector<std::unique_ptr<Sequence>> running_;  // in arrival order
  std::vector<std::unique_ptr<Sequence>> waiting_;  // in arrival order (preempted ones first)
  std::vector<SequenceEvent> events_;
  std::vector<StepInput> inputs_;
  std::vector<Sequence*> batch_;  // this step's sequences
  std::vector<Sequence*> constrained_;  // those of them that draw under a constraint
  std::unique_ptr<ThreadPool> mask_pool_;  // their masks' threads (made at the first)
  bool launched_ = false;         // a forward pass issued and not yet completed
  int budget_ = 0;                // this step's batch tokens left
  std::vector<int32_t> sampled_;
  std::vector<StepLogprobs> logprobs_;
  int64_t preemptions_ = 0, prompt_tokens_ = 0, computed_prompt_tokens_ = 0, generated_tokens_ = 0, steps_ = 0;
};

}  // namespace qwenrt
