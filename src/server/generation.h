// The engine as the HTTP layer sees it: a request goes in, a stream of per-choice text
// events comes out, and the stream can be cancelled from the connection's thread.
// EngineService runs the real scheduler on its own thread; the tests' scripted service
// stands behind the same interface for the tool-call and reasoning wire format.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/scheduler.h"
#include "structured/token_mask.h"
#include "server/api.h"

namespace qwenrt::server {

class Metrics;

// A token with its log-probability: its text as decoded (a partial UTF-8 sequence shows as
// U+FFFD) and its own bytes (what the API's `bytes` field carries).
struct LogprobToken {
  std::string text;
  std::string bytes;
  float logprob = 0;
  int32_t id = -1;
};

struct LogprobEntry : LogprobToken {
  std::vector<LogprobToken> top;  // most likely first
  bool in_text = true;  // false: the token adds nothing to the text (a special or ending token)
  bool ends = false;    // the token that ends its choice (an end-of-sequence or stop id) and is not in its text
  bool none = false;    // no log-prob: an echoed prompt's first token (nothing comes before it)
};

struct ChoiceEvent {
  int choice = 0;
  std::string text;  // new text: valid UTF-8, nothing past a stop string
  int tokens = 0;    // generated tokens this event accounts for
  int32_t token_id = -1;  // with `tokens` 1, the token's id (the one that ends the choice too)
  // With a choice's first token: its prompt's tokens read from the prefix cache (-1: not told).
  int cached_prompt_tokens = -1;
  std::vector<LogprobEntry> logprobs;
  bool echo = false;  // the echoed prompt (completions' echo): its text stands alone, a cut character and all
  std::string finish_reason;  // "" while the choice runs; "stop", "length", "error"
  // With "stop", what the client named that ended the choice (vLLM's stop_reason): its stop
  // string, or its stop token id (-1: neither, an end-of-sequence id or the grammar's end).
  std::string stop_string;
  int32_t stop_token = -1;
  std::string error;          // with "error"
};

// One request's events, produced by the service's thread and consumed by the connection's.
class RequestStream {
 public:
  // Events a request may have waiting for its connection before it is cancelled: a step
  // adds one a running choice, and a connection takes them all each step unless its
  // client has stopped reading.
  static constexpr size_t kMaxUnreadEvents = 32768;
  RequestStream(int choices, int prompt_tokens) : unfinished_(choices), prompt_tokens_(prompt_tokens) {}
  void push(ChoiceEvent event);
  // push without waking the waiting connection: wake() does that later (the engine's
  // thread leaves the wake-ups of a step's streams to another thread).
  void push_quietly(ChoiceEvent event);
  void wake();
  // The events so far, waiting up to `timeout` for the first one (empty on timeout).
  std::vector<ChoiceEvent> wait(std::chrono::milliseconds timeout);
  // Asks the service to stop generating (the client went away); blocks return within a step.
  void cancel();
  bool cancelled() const;
  int prompt_tokens() const { return prompt_tokens_; }
  // Every choice has sent its finishing event.
  bool finished() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ChoiceEvent> events_;
  int unfinished_;
  bool cancelled_ = false;
  int prompt_tokens_;
};

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Queues a request. Throws ApiError: 400 for what the engine refuses, 429 when the
  // queue is full, 503 while shutting down.
  virtual std::shared_ptr<RequestStream> start(const GenerationRequest& request) = 0;
  // Requests started and not yet finished.
  virtual int active_requests() const = 0;
  // Stops taking requests and ends every running one with an error event.
  virtual void shut_down(const std::string& reason) = 0;
  // Scheduler counters for /metrics (zeros where there is no scheduler).
  virtual SchedulerStats scheduler_stats() const = 0;
};

struct EngineServiceOptions {
  int max_requests = 0;  // started and unfinished; more get 429 (0: no cap)
};

// The real service: a scheduler over the engine, stepped on a thread of its own, with
// detokenization and stop strings per choice.
class EngineService : public GenerationService {
 public:
  EngineService(Engine& engine, const Tokenizer& tokenizer, Metrics& metrics, EngineServiceOptions options);
  ~EngineService() override;
  std::shared_ptr<RequestStream> start(const GenerationRequest& request) override;
  int active_requests() const override;
  void shut_down(const std::string& reason) override;
  SchedulerStats scheduler_stats() const override { return scheduler_.stats(); }

 private:
  struct Choice;
  void run();
  // A step's events to their streams (takes mutex_), then the streams to the waker.
  void deliver_events(const std::vector<SequenceEvent>& events);
  void dispatch(const SequenceEvent& event);
  void end_choice(uint64_t id, Choice& choice, const std::string& reason, const std::string& error = "",
                  int32_t stop_token = -1);
  // Ends every unfinished choice with an error event (mutex_ held).
  void fail_all(const std::string& reason);

  // A step's event for its stream, woken after the step's dispatch by the waker thread.
  void deliver(const std::shared_ptr<RequestStream>& stream, ChoiceEvent event);
  void wake_streams();
  void stop_waker();

  const Tokenizer& tokenizer_;
  // The vocabulary as grammars see it, built at the first structured request (≈ 0.1 s for
  // Qwen's 151k tokens), then shared by every constraint.
  std::once_flag vocabulary_once_;
  std::shared_ptr<const structured::Vocabulary> vocabulary_;
  Metrics& metrics_;
  EngineServiceOptions options_;
  Engine& engine_;
  Scheduler scheduler_;
  // The engine's thread only: the last timed step seen, and whether the loop waited for
  // work since (then the next gap is idle time, not the engine's).
  StepTiming last_timing_;
  bool idled_ = true;
  // The last step's events: delivered while the device runs the next step.
  std::vector<SequenceEvent> pending_events_;
  mutable std::mutex mutex_;  // guards what follows up to the waker's own; held while dispatching a step's events
  std::condition_variable work_;
  std::map<uint64_t, std::unique_ptr<Choice>> choices_;  // unfinished choices, by sequence id
  // Echoed prompts' log-probabilities: a connection's thread queues the job and waits; the
  // engine's thread scores it between two steps (Engine::score, the KV blocks borrowed from
  // the pool for the while) and wakes it.
  struct ScoreJob {
    const std::vector<int32_t>* ids = nullptr;
    int top_logprobs = 0;
    ScoreResult result;
    std::string error;  // what failed, if it did
    bool done = false;
    std::chrono::steady_clock::time_point queued;  // its first try (zero: none yet)
  };
  std::deque<ScoreJob*> score_jobs_;
  std::condition_variable scored_;
  void run_score_jobs(std::unique_lock<std::mutex>& lock);
  // The echo a choice of `request` for its prompt `p` opens with: the prompt's text (as the
  // client wrote it, where it came as text), and with logprobs its tokens (scored on the
  // engine's thread).
  ChoiceEvent echo_event(const GenerationRequest& request, int p, std::unique_lock<std::mutex>& lock);
  // A token as logprobs list it: its text, its bytes, its log-probability.
  LogprobToken logprob_token(int32_t id, float logprob) const;
  int active_ = 0;
  bool stopping_ = false, closed_ = false;
  std::vector<std::shared_ptr<RequestStream>> delivered_;  // this step's streams with new events
  // The waker: one thread wakes the connections of each step's streams (a system call
  // each, ≈ 2.5 µs: 0.6 ms a step at 256 streams) while the engine's thread goes on.
  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
  std::vector<std::shared_ptr<RequestStream>> to_wake_;
  bool waker_stopping_ = false;
  std::thread waker_;
  std::thread thread_;
};

}  // namespace qwenrt::server
