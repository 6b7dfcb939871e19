#include <algorithm>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "engine/stop_strings.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::server {

using Clock = std::chrono::steady_clock;

void RequestStream::push(ChoiceEvent event) {
  push_quietly(std::move(event));
  wake();
}

void RequestStream::push_quietly(ChoiceEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!event.finish_reason.empty()) --unfinished_;
  events_.push_back(std::move(event));
  // A connection that has not taken its events for this long is stuck on a client that
  // stopped reading: the request is cancelled rather than its output kept without bound.
  if (events_.size() > kMaxUnreadEvents) cancelled_ = true;
}

// The waiter checks for events under the mutex, so a wake after the push's unlock is not lost.
void RequestStream::wake() { ready_.notify_all(); }

std::vector<ChoiceEvent> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<ChoiceEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void RequestStream::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unfinished_ <= 0 && events_.empty();
}

// One choice of a request: a scheduler sequence and its text state.
struct EngineService::Choice {
  int index = 0;  // the scheduler's sequence id is its key in choices_
  std::shared_ptr<RequestStream> stream;
  StreamDecoder decoder;
  StopMatcher stops;
  bool logprobs = false;
  Clock::time_point started, last_token;
  int tokens = 0;
  int min_tokens = 0;  // stop strings are looked for once the choice has more tokens than this
  // include_stop_str_in_output: the client's stop ids (stop_token_ids), whose text stays in
  // the text they end; empty without it.
  std::vector<int32_t> kept_ending_ids;
  // The client's stop ids that would not end the choice anyway (the model's end-of-sequence
  // ids and the chat turn's end, unless ignore_eos): one of these that ends it is its
  // stop_reason; another gives null, as vLLM's does for its end-of-sequence id.
  std::vector<int32_t> named_stop_ids;
  Choice(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool include_stop, bool skip_specials)
      : decoder(tokenizer, skip_specials), stops(std::move(stop_strings), include_stop) {}
};

EngineService::EngineService(Engine& engine, const Tokenizer& tokenizer, Metrics& metrics, EngineServiceOptions options)
    : tokenizer_(tokenizer), metrics_(metrics), options_(options), engine_(engine), scheduler_(engine) {
  waker_ = std::thread([this] { wake_streams(); });
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    stop_waker();
    throw;
  }
}

EngineService::~EngineService() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
  stop_waker();
}

// After the waker has woken every stream handed to it.
void EngineService::stop_waker() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    waker_stopping_ = true;
  }
  wake_cv_.notify_all();
  waker_.join();
}

void EngineService::deliver(const std::shared_ptr<RequestStream>& stream, ChoiceEvent event) {
  stream->push_quietly(std::move(event));
  // A request's choices share a stream; one wake a step is enough.
  if (delivered_.empty() || delivered_.back() != stream) delivered_.push_back(stream);
}

void EngineService::wake_streams() {
  std::vector<std::shared_ptr<RequestStream>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_cv_.wait(lock, [&] { return waker_stopping_ || !to_wake_.empty(); });
      if (to_wake_.empty()) return;  // stopping, and every stream handed over is woken
      batch.swap(to_wake_);
    }
    for (const auto& stream : batch) stream->wake();
    batch.clear();
  }
}

int EngineService::active_requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_;
}

std::shared_ptr<RequestStream> EngineService::start(const GenerationRequest& request) {
  if (request.structured) {
    std::call_once(vocabulary_once_, [&] { vocabulary_ = std::make_shared<const structured::Vocabulary>(tokenizer_); });
  }
  // Time to first token counts from here: an echo's scoring is part of the wait.
  const auto arrived = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) throw ApiError(503, "server_error", "the server is shutting down", "", "shutting_down");
  if (options_.max_requests > 0 && active_ >= options_.max_requests) {
    throw ApiError(429, "rate_limit_error",
                   "the server has " + std::to_string(active_) + " requests in progress, its limit: retry later", "",
                   "queue_full");
  }
  int prompt_tokens = 0;
  for (int p = 0; p < request.prompt_count(); ++p) prompt_tokens += static_cast<int>(request.prompt_at(p).size());
  auto stream = std::make_shared<RequestStream>(request.choices(), prompt_tokens);
  if (request.echo) {
    // The echo comes first in every choice, before any token (none is submitted yet). The
    // request counts against the cap while its prompts are scored.
    ++active_;
    std::vector<ChoiceEvent> echoes;
    try {
      for (int p = 0; p < request.prompt_count(); ++p) {
        echoes.push_back(echo_event(request, p, lock));
        if (closed_) throw ApiError(503, "server_error", "the server is shutting down", "", "shutting_down");
      }
    } catch (...) {
      --active_;
      throw;
    }
    --active_;
    for (int c = 0; c < request.choices(); ++c) {
      ChoiceEvent event = echoes[static_cast<size_t>(c / request.n)];
      event.choice = c;
      stream->push(std::move(event));
    }
    if (request.max_tokens == 0) {
      for (int c = 0; c < request.choices(); ++c) {
        ChoiceEvent last;
        last.choice = c;
        last.finish_reason = "length";
        stream->push(std::move(last));
      }
      return stream;
    }
  }
  // A request's stop ids, the same for each of its choices: the sequence's (the client's hold
  // also with ignore_eos, as vLLM's stop_token_ids), and those a stop_reason names.
  std::vector<int32_t> stop_ids = request.ignore_eos ? std::vector<int32_t>() : request.stop_ids;
  std::vector<int32_t> named_stop_ids;
  const std::vector<int32_t>& eos = engine_.config().eos_token_ids;
  for (const int32_t stop_id : request.stop_token_ids) {
    const bool ends_anyway =
        !request.ignore_eos && (std::find(eos.begin(), eos.end(), stop_id) != eos.end() ||
                                std::find(request.stop_ids.begin(), request.stop_ids.end(), stop_id) != request.stop_ids.end());
    if (!ends_anyway) named_stop_ids.push_back(stop_id);
    if (std::find(stop_ids.begin(), stop_ids.end(), stop_id) == stop_ids.end()) stop_ids.push_back(stop_id);
  }
  std::vector<uint64_t> submitted;
  for (int c = 0; c < request.choices(); ++c) {
    SequenceRequest sequence;
    sequence.prompt = request.prompt_at(c / request.n);
    sequence.max_new_tokens = request.max_tokens;
    sequence.min_tokens = request.min_tokens;
    sequence.ignore_eos = request.ignore_eos;
    sequence.sampling = request.sampling;
    // A seeded choice's random stream is keyed by its index among its prompt's choices: a
    // prompt's answer is the same alone or batched with others. Without a seed, every choice
    // of the request draws its own (two prompts alike get two answers).
    sequence.stream = static_cast<uint64_t>(request.seeded ? c % request.n : c);
    sequence.top_logprobs = request.top_logprobs;
    sequence.logit_bias = request.logit_bias;
    sequence.stop_ids = stop_ids;
    uint64_t id = 0;
    try {
      if (request.structured) {
        // Each choice its own: the constraint follows its sequence's text.
        structured::ConstraintOptions options = *request.structured;
        options.vocabulary = vocabulary_;
        sequence.constraint = std::make_shared<structured::GrammarConstraint>(std::move(options));
      }
      id = scheduler_.submit(std::move(sequence));
    } catch (const Error& error) {
      for (uint64_t earlier : submitted) scheduler_.cancel(earlier);
      std::erase_if(choices_, [&](const auto& entry) { return entry.second->stream == stream; });
      // The scheduler's refusals that parsing cannot foresee (min_tokens holding off more
      // ids than a draw bans, where the model's end ids count too) name their field.
      throw invalid_request(error.message(), error.param());
    }
    submitted.push_back(id);
    auto choice = std::make_unique<Choice>(tokenizer_, request.stop, request.include_stop, request.skip_special);
    choice->index = c;
    choice->stream = stream;
    choice->logprobs = request.top_logprobs >= 0;
    choice->min_tokens = request.min_tokens;
    if (request.include_stop) choice->kept_ending_ids = request.stop_token_ids;
    choice->named_stop_ids = named_stop_ids;
    choice->started = arrived;
    choices_.emplace(id, std::move(choice));
  }
  ++active_;
  work_.notify_all();
  return stream;
}

LogprobToken EngineService::logprob_token(int32_t id, float logprob) const {
  return LogprobToken{tokenizer_.decode(std::span<const int32_t>(&id, 1)), std::string(tokenizer_.token_bytes(id)), logprob,
                      id};
}

ChoiceEvent EngineService::echo_event(const GenerationRequest& request, int p, std::unique_lock<std::mutex>& lock) {
  const std::vector<int32_t>& prompt = request.prompt_at(p);
  ScoreResult scored;
  if (request.top_logprobs >= 0 && prompt.size() >= 2) {
    if (stopping_) throw ApiError(503, "server_error", "the server is shutting down", "", "shutting_down");
    // What the scheduler would refuse after the scoring is refused before it.
    const int64_t positions = static_cast<int64_t>(prompt.size()) + (request.max_tokens > 0 ? 1 : 0);
    if (positions > engine_.kv_pool_tokens()) {
      throw invalid_request("the prompt needs " + std::to_string(positions) + " positions of KV cache, the pool holds " +
                                std::to_string(engine_.kv_pool_tokens()),
                            "prompt");
    }
    ScoreJob job;
    job.ids = &prompt;
    job.top_logprobs = request.top_logprobs;
    score_jobs_.push_back(&job);
    work_.notify_all();
    scored_.wait(lock, [&] { return job.done; });
    if (!job.error.empty()) {
      throw ApiError(503, "server_error", "the prompt's log-probabilities could not be computed: " + job.error, "",
                     "unavailable");
    }
    scored = std::move(job.result);
  }
  // The text and the entries are made without the lock (the engine's thread delivers steps
  // under it).
  lock.unlock();
  ChoiceEvent event;
  event.echo = true;
  // The client's own text where it sent text; else the ids decoded (special tokens written out).
  const std::string* written = request.prompt_text(p);
  event.text = written != nullptr ? *written : tokenizer_.decode(prompt);
  if (request.top_logprobs >= 0) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      LogprobEntry entry;
      static_cast<LogprobToken&>(entry) =
          logprob_token(prompt[i], i > 0 ? static_cast<float>(scored.logprobs[i - 1]) : 0.0f);
      entry.none = i == 0;
      if (i > 0 && i - 1 < scored.top.size()) {
        for (const TokenLogprob& alternative : scored.top[i - 1]) {
          entry.top.push_back(logprob_token(alternative.id, alternative.logprob));
        }
      }
      event.logprobs.push_back(std::move(entry));
    }
  }
  lock.lock();
  return event;
}

// On the engine's thread, between steps (mutex_ held on entry and exit, not while scoring).
// The jobs queued by now, oldest first; one whose prompt the KV pool cannot take while the
// running sequences hold their blocks waits for a later pass (up to kScoreWait), and so do
// those behind it.
void EngineService::run_score_jobs(std::unique_lock<std::mutex>& lock) {
  constexpr auto kScoreWait = std::chrono::seconds(60);
  const int block = std::max(engine_.memory_plan().kv_block_size, 1);
  for (size_t pending = score_jobs_.size(); pending > 0 && !score_jobs_.empty(); --pending) {
    ScoreJob* job = score_jobs_.front();
    const SchedulerStats stats = scheduler_.stats();
    const auto needed = static_cast<int>((job->ids->size() + static_cast<size_t>(block) - 1) / static_cast<size_t>(block));
    const auto now = Clock::now();
    if (job->queued == Clock::time_point()) job->queued = now;
    if (needed > stats.kv_blocks_total - stats.kv_blocks_held) {
      if (now - job->queued < kScoreWait) break;
      job->error = "the KV cache had no room to score it for 60 s: retry later";
      score_jobs_.pop_front();
      job->done = true;
      continue;
    }
    score_jobs_.pop_front();
    lock.unlock();
    try {
      job->result = engine_.score(*job->ids, job->top_logprobs);
    } catch (const std::exception& error) {
      job->error = error.what();
    }
    lock.lock();
    job->done = true;
  }
  scored_.notify_all();
}

void EngineService::shut_down(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  fail_all(reason);
}

void EngineService::fail_all(const std::string& reason) {
  for (auto& [id, choice] : choices_) {
    scheduler_.cancel(id);
    ChoiceEvent event;
    event.choice = choice->index;
    event.finish_reason = "error";
    event.error = reason;
    choice->stream->push(std::move(event));
  }
  // Each request counts once however many choices it has.
  std::vector<RequestStream*> counted;
  for (auto& [id, choice] : choices_) {
    if (std::find(counted.begin(), counted.end(), choice->stream.get()) == counted.end()) {
      counted.push_back(choice->stream.get());
      --active_;
    }
  }
  choices_.clear();
}

// Sends a choice's last text and its finish reason, and forgets it.
void EngineService::end_choice(uint64_t id, Choice& choice, const std::string& reason, const std::string& error,
                               int32_t stop_token) {
  ChoiceEvent event;
  event.choice = choice.index;
  if (reason != "error" && !choice.stops.stopped()) {
    event.text = choice.stops.push(choice.decoder.flush(), choice.tokens > choice.min_tokens);
    if (!choice.stops.stopped()) event.text += choice.stops.flush();
  }
  event.finish_reason = choice.stops.stopped() ? "stop" : reason;
  event.error = error;
  if (choice.stops.stopped()) {
    event.stop_string = choice.stops.matched();
  } else if (reason == "stop" && std::find(choice.named_stop_ids.begin(), choice.named_stop_ids.end(), stop_token) !=
                                     choice.named_stop_ids.end()) {
    event.stop_token = stop_token;
  }
  std::shared_ptr<RequestStream> stream = choice.stream;
  choices_.erase(id);
  const bool last =
      std::none_of(choices_.begin(), choices_.end(), [&](const auto& entry) { return entry.second->stream == stream; });
  if (last) --active_;
  deliver(stream, std::move(event));
}

void EngineService::dispatch(const SequenceEvent& event) {
  auto found = choices_.find(event.id);
  if (found == choices_.end()) return;  // ended already (a stop string, a cancel)
  Choice& choice = *found->second;
  if (event.token >= 0) {
    const auto now = Clock::now();
    if (choice.tokens == 0) {
      metrics_.observe_time_to_first_token(std::chrono::duration<double>(now - choice.started).count());
    } else {
      metrics_.observe_inter_token(std::chrono::duration<double>(now - choice.last_token).count());
    }
    choice.last_token = now;
    ++choice.tokens;
    ChoiceEvent out;
    out.choice = choice.index;
    out.tokens = 1;
    out.token_id = event.token;
    out.cached_prompt_tokens = event.cached_prompt_tokens;
    // The token that ends the choice (an end-of-sequence or stop id) is not text of it, even
    // where it is no special token (as OpenAI and vLLM answer); its log-prob is still listed.
    // A stop id the client named stays with include_stop_str_in_output (as vLLM keeps it),
    // and no stop string is looked for in it: the id ended the choice (vLLM checks ids first).
    const bool ends = event.finish == FinishReason::kStop;  // the scheduler's word: this id ended it
    const bool kept = !ends || std::find(choice.kept_ending_ids.begin(), choice.kept_ending_ids.end(), event.token) !=
                                   choice.kept_ending_ids.end();
    if (kept) out.text = choice.stops.push(choice.decoder.push(event.token), !ends && choice.tokens > choice.min_tokens);
    if (choice.logprobs) {
      LogprobEntry entry;
      static_cast<LogprobToken&>(entry) = logprob_token(event.token, event.logprobs.sampled);
      entry.in_text = kept && !(choice.decoder.skips_special() && tokenizer_.is_special(event.token));
      // An ending token that adds no text comes after the flush of a character left unfinished.
      entry.ends = ends && !entry.in_text;
      for (const TokenLogprob& alternative : event.logprobs.top) entry.top.push_back(logprob_token(alternative.id, alternative.logprob));
      out.logprobs.push_back(std::move(entry));
    }
    if (choice.stops.stopped()) {
      // The stop string ends the choice here; the sequence is cancelled at the next step.
      scheduler_.cancel(event.id);
      deliver(choice.stream, std::move(out));
      end_choice(event.id, choice, "stop");
      return;
    }
    deliver(choice.stream, std::move(out));
  }
  switch (event.finish) {
    case FinishReason::kNone: return;
    case FinishReason::kStop: end_choice(event.id, choice, "stop", "", event.token); return;
    case FinishReason::kLength: end_choice(event.id, choice, "length"); return;
    case FinishReason::kCancelled: end_choice(event.id, choice, "error", "the request was cancelled"); return;
    case FinishReason::kError:
      end_choice(event.id, choice, "error", "the engine failed while generating this request");
      return;
  }
}

void EngineService::deliver_events(const std::vector<SequenceEvent>& events) {
  if (events.empty()) return;
  bool delivered = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const SequenceEvent& event : events) dispatch(event);
    if (!delivered_.empty()) {
      // mutex_ before wake_mutex_ (the waker takes only the latter); both vectors keep
      // their capacity, so a step allocates nothing here.
      std::lock_guard<std::mutex> wake_lock(wake_mutex_);
      to_wake_.insert(to_wake_.end(), std::make_move_iterator(delivered_.begin()),
                      std::make_move_iterator(delivered_.end()));
      delivered_.clear();
      delivered = true;
    }
  }
  if (delivered) wake_cv_.notify_one();
}

// Each pass issues step n + 1 to the device, then delivers step n's events (text, stop
// strings, the streams' wake-ups) while it runs, then waits for it. A stop string found in
// step n's text so cancels its sequence one step later than it could: the extra token is
// dropped (its choice has ended).
void EngineService::run() {
  for (;;) {
    bool idle = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_) {
        for (ScoreJob* job : score_jobs_) {
          job->error = "the server is shutting down";
          job->done = true;
        }
        score_jobs_.clear();
        scored_.notify_all();
        lock.unlock();
        deliver_events(pending_events_);  // the last step's
        pending_events_.clear();
        return;
      }
      // Cancellations from the connections (clients gone): the scheduler ends them next step.
      for (const auto& [id, choice] : choices_) {
        if (choice->stream->cancelled()) scheduler_.cancel(id);
      }
      // No step is in flight here: echoed prompts are scored before the next one.
      if (!score_jobs_.empty()) run_score_jobs(lock);
      idle = scheduler_.idle();
      if (idle && pending_events_.empty()) {
        idled_ = true;
        work_.wait_for(lock, std::chrono::milliseconds(20));
        continue;
      }
    }
    bool delivering = false;  // step n's events are (being) delivered
    try {
      if (!idle) scheduler_.launch();
      delivering = true;
      deliver_events(pending_events_);
      scheduler_.complete();
      const StepTiming& timing = engine_.last_step_timing();
      if (timing.index != last_timing_.index) {
        const bool consecutive = !idled_ && last_timing_.index > 0 && timing.step == last_timing_.step + 1;
        metrics_.observe_step(timing.seconds, timing.device_seconds,
                              consecutive ? std::chrono::duration<double>(timing.started - last_timing_.ended).count()
                                          : -1.0);
        last_timing_ = timing;
        idled_ = false;
      }
      scheduler_.take_events(pending_events_);
    } catch (const std::exception& error) {
      // A broken invariant must not take the server down: the requests in flight end
      // with the error, their sequences are cancelled, and new ones are served.
      std::fprintf(stderr, "qwenrt serve: %s\n", error.what());
      if (scheduler_.launched()) {
        try {
          scheduler_.complete();
        } catch (const std::exception&) {
        }
      }
      if (!delivering) {
        // The launch broke: step n's events (last tokens, normal ends) still go out.
        try {
          deliver_events(pending_events_);
        } catch (const std::exception&) {
        }
      }
      scheduler_.take_events(pending_events_);  // of the choices failed below
      pending_events_.clear();
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& stream : delivered_) stream->wake();  // what the step delivered before it broke
      delivered_.clear();
      fail_all(std::string("internal error: ") + error.what());
    }
  }
}

}  // namespace qwenrt::server
