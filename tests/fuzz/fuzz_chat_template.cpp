// A chat template, then messages as JSON (an array, or an object with "messages", "tools"
// and "vars"). Rendering runs under a smaller budget than the default so each input stays
// fast; the limits are enforced by the same code at any size.
#include "core/json.h"
#include "fuzz_util.h"
#include "tokenizer/chat_template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwenrt;
  const auto parts = fuzz::split_parts(data, size, 2);
  fuzz::refused_cleanly_or_ran([&] {
    SpecialTokens tokens;
    tokens.bos_token = "<|endoftext|>";
    tokens.eos_token = "<|im_end|>";
    const ChatTemplate tmpl(parts[0], tokens);
    nlohmann::ordered_json input = parts[1].empty() ? nlohmann::ordered_json::array()
                                                    : parse_ordered_json(parts[1], "messages");
    nlohmann::ordered_json messages = input, tools, vars = nlohmann::ordered_json::object();
    if (input.is_object()) {
      messages = input.value("messages", nlohmann::ordered_json::array());
      tools = input.value("tools", nlohmann::ordered_json());
      vars = input.value("vars", nlohmann::ordered_json::object());
    }
    chat_template::RenderLimits limits;
    limits.max_steps = 2'000'000;
    limits.max_value_bytes = 4 << 20;
    limits.max_output_bytes = 4 << 20;
    for (bool add_generation_prompt : {false, true}) {
      fuzz::refused_cleanly_or_ran([&] { tmpl.render(messages, tools, add_generation_prompt, vars, limits); });
    }
  });
  return 0;
}
