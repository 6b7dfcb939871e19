// Test double (test build only): the real HTTP layer and response code in front of a
// scripted engine that "generates" the text of the conversation's last user message, a few
// bytes per event. A random tiny model never writes <tool_call> or <think>; with this the
// wire format of tool calls and reasoning is checked through the official SDK.
// Usage: qwenrt_scripted_server TOKENIZER_DIR   (prints "listening on PORT" and serves)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "server/generation.h"
#include "server/http_server.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwenrt::server {
namespace {

class ScriptedService : public GenerationService {
 public:
  explicit ScriptedService(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  ~ScriptedService() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (Writer& writer : writers_) writer.thread.join();
  }

  std::shared_ptr<RequestStream> start(const GenerationRequest& request) override {
    // The script: what the user wrote last. Found by the control tokens around it (ids, not
    // text: the message itself may spell "<|im_end|>").
    const int32_t open = *tokenizer_.token_to_id("<|im_start|>"), close = *tokenizer_.token_to_id("<|im_end|>");
    const std::vector<int32_t>& ids = request.prompt;
    const std::string role = "user\n";
    size_t begin = ids.size(), end = ids.size();
    for (size_t i = ids.size(); i-- > 0;) {
      if (ids[i] != open || i + 1 + role.size() > ids.size()) continue;
      if (tokenizer_.decode(std::span<const int32_t>(ids).subspan(i + 1, role.size())) != role) continue;
      begin = i + 1 + role.size();
      end = static_cast<size_t>(std::find(ids.begin() + static_cast<long>(begin), ids.end(), close) - ids.begin());
      break;
    }
    const std::string script = tokenizer_.decode(std::span<const int32_t>(ids).subspan(begin, end - begin));
    auto stream = std::make_shared<RequestStream>(request.choices(), static_cast<int>(request.prompt.size()));
    ++active_;
    // Connections call start() from their own threads: the writers' list is shared. Writers
    // that are done are joined here, so a long test does not gather finished threads.
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = writers_.begin(); it != writers_.end();) {
      if (*it->done) {
        it->thread.join();
        it = writers_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread thread([this, stream, script, n = request.choices(), done] {
      for (int choice = 0; choice < n; ++choice) {
        // Three bytes per event: tags arrive split, as tokens would split them.
        for (size_t i = 0; i < script.size(); i += 3) {
          ChoiceEvent event;
          event.choice = choice;
          event.text = script.substr(i, 3);
          event.tokens = 1;
          stream->push(std::move(event));
        }
        ChoiceEvent last;
        last.choice = choice;
        last.finish_reason = "stop";
        stream->push(std::move(last));
      }
      --active_;
      *done = true;
    });
    writers_.push_back(Writer{std::move(thread), std::move(done)});
    return stream;
  }
  int active_requests() const override { return active_; }
  void shut_down(const std::string&) override {}
  SchedulerStats scheduler_stats() const override { return {}; }

 private:
  const Tokenizer& tokenizer_;
  std::atomic<int> active_{0};
  struct Writer {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mutex_;
  std::list<Writer> writers_;
};

}  // namespace
}  // namespace qwenrt::server

int main(int argc, char** argv) {
  using namespace qwenrt;
  if (argc != 2) {
    std::fprintf(stderr, "usage: qwenrt_scripted_server TOKENIZER_DIR\n");
    return 2;
  }
  Tokenizer tokenizer = Tokenizer::load(argv[1]);
  ChatTemplate chat_template = ChatTemplate::load(argv[1]);
  server::Metrics metrics;
  server::ScriptedService service(tokenizer);
  server::ServerOptions options;
  options.port = 0;
  options.limits.max_context = 4096;
  options.limits.vocab_size = tokenizer.vocab_size();
  options.limits.served_model_name = "scripted";
  server::HttpServer http(service, server::ModelText{&tokenizer, &chat_template, nullptr}, options, metrics);
  if (!http.bind()) return 1;
  http.set_ready(true);
  http.serve([&] {
    std::fprintf(stderr, "serving 'scripted' on http://127.0.0.1:%d\n", http.bound_port());
    std::fflush(stderr);
  });
  return 0;
}
