// A request body for `qwenrt serve`: parsed as JSON, then validated as a chat completion, as
// a completion, and as /tokenize and /detokenize bodies against a tiny model's tokenizer,
// chat template and config (the server test fixture). ApiError (the 4xx answer) and qwenrt::Error are clean refusals.
#include "fuzz_util.h"
#include "model/config.h"
#include "server/api.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Model {
  qwenrt::Tokenizer tokenizer = qwenrt::Tokenizer::load(QWENRT_FUZZ_SERVE_TOKENIZER_DIR);
  qwenrt::ChatTemplate chat_template = qwenrt::ChatTemplate::load(QWENRT_FUZZ_SERVE_TOKENIZER_DIR);
  qwenrt::ModelConfig config = qwenrt::load_model_config(QWENRT_FUZZ_SERVE_MODEL_DIR);
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  static const Model model;
  const server::ModelText text{&model.tokenizer, &model.chat_template, &model.config};
  server::RequestLimits limits;
  limits.max_context = 256;
  limits.vocab_size = model.config.vocab_size;
  limits.served_model_name = "tiny";
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::ordered_json parsed = server::parse_json_body(body);
    for (int route = 0; route < 4; ++route) {
      try {
        switch (route) {
          case 0: server::parse_chat_request(parsed, text, limits); break;
          case 1: server::parse_completion_request(parsed, text, limits); break;
          case 2: server::parse_tokenize_request(parsed, text, limits); break;
          default: server::parse_detokenize_request(parsed, text, limits); break;
        }
      } catch (const server::ApiError&) {
      } catch (const Error&) {
      }
    }
  } catch (const server::ApiError&) {
  } catch (const Error&) {
  }
  return 0;
}
