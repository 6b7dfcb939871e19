// Qwen's <think> and <tool_call> tags in streamed text, fed in every split a tokenizer could
// produce: the parsed result must not depend on where the text was cut, and nothing that
// is part of a tag may ever show up as content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/output_parser.h"

namespace qwenrt::server {
namespace {

struct Parsed {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

void add(Parsed& parsed, const ParsedDelta& delta) {
  parsed.content += delta.content;
  parsed.reasoning += delta.reasoning;
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (call.starts) {
      EXPECT_EQ(call.index, static_cast<int>(parsed.calls.size()));
      parsed.calls.emplace_back(call.name, call.arguments);
    } else {
      ASSERT_LT(call.index, static_cast<int>(parsed.calls.size()));
      parsed.calls[static_cast<size_t>(call.index)].second += call.arguments;
    }
  }
}

// `tags_hidden`: the text's tags are all parsed, so no delta may show part of one.
Parsed parse_in_pieces(const std::string& text, size_t piece, bool reasoning, bool tools, bool tags_hidden = true) {
  OutputParser parser(reasoning, tools);
  Parsed parsed;
  for (size_t i = 0; i < text.size(); i += piece) {
    ParsedDelta delta = parser.push(text.substr(i, piece));
    // A partial tag is held back, never shown.
    for (const char* fragment : {"<tool", "</think", "<thi", "_call>"}) {
      if (!tags_hidden) break;
      EXPECT_EQ(delta.content.find(fragment), std::string::npos) << "piece " << piece << ": " << delta.content;
    }
    add(parsed, delta);
  }
  add(parsed, parser.flush());
  return parsed;
}

TEST(OutputParser, ReasoningThenAnswerAtEverySplit) {
  const std::string text = "<think>\nStep one.\nStep two.\n</think>\n\nThe answer is 4.";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    Parsed parsed = parse_in_pieces(text, piece, true, false);
    EXPECT_EQ(parsed.reasoning, "\nStep one.\nStep two.\n") << piece;
    EXPECT_EQ(parsed.content, "The answer is 4.") << piece;
  }
}

TEST(OutputParser, ToolCallsAtEverySplit) {
  const std::string text =
      "I will look.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a<b\", \"n\": 3}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"noop\"}\n</tool_call>";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    Parsed parsed = parse_in_pieces(text, piece, true, true);
    EXPECT_EQ(parsed.content, "I will look.") << piece;
    ASSERT_EQ(parsed.calls.size(), 2u) << piece;
    EXPECT_EQ(parsed.calls[0].first, "search");
    EXPECT_EQ(nlohmann::json::parse(parsed.calls[0].second), nlohmann::json({{"q", "a<b"}, {"n", 3}}));
    EXPECT_EQ(parsed.calls[1].first, "noop");
    EXPECT_EQ(parsed.calls[1].second, "{}");
  }
}

TEST(OutputParser, InvalidCallsAndDisabledParsingStayText) {
  const std::string broken = "x <tool_call>{\"name\": 5}</tool_call> y";
  EXPECT_EQ(parse_in_pieces(broken, 2, false, true, false).content, broken);
  EXPECT_TRUE(parse_in_pieces(broken, 2, false, true, false).calls.empty());
  const std::string tagged = "<think>a</think>b<tool_call>{\"name\": \"f\"}</tool_call>";
  Parsed plain = parse_in_pieces(tagged, 3, false, false, false);
  EXPECT_EQ(plain.content, tagged);
  EXPECT_TRUE(plain.reasoning.empty());
}

TEST(OutputParser, UnfinishedTagsAtTheEnd) {
  // Cut off inside the reasoning: it is reasoning. Cut off inside a call: shown as text.
  Parsed thinking = parse_in_pieces("<think>still thinking", 4, true, true);
  EXPECT_EQ(thinking.reasoning, "still thinking");
  EXPECT_EQ(thinking.content, "");
  Parsed cut = parse_in_pieces("ok <tool_call>{\"name\": \"f\", \"argu", 4, true, true, false);
  EXPECT_EQ(cut.content, "ok <tool_call>{\"name\": \"f\", \"argu");
  // Text that only looks like the start of a tag is released at the end.
  EXPECT_EQ(parse_in_pieces("a <tool", 1, true, true, false).content, "a <tool");
  EXPECT_EQ(parse_in_pieces("<thi", 1, true, true, false).content, "<thi");
}

TEST(OutputParser, ReasoningOpenedByThePrompt) {
  const std::string text = "Let me think.\n</think>\n\nDone.";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    OutputParser parser(true, false, /*reasoning_open=*/true);
    Parsed parsed;
    for (size_t i = 0; i < text.size(); i += piece) add(parsed, parser.push(text.substr(i, piece)));
    add(parsed, parser.flush());
    EXPECT_EQ(parsed.reasoning, "Let me think.\n") << piece;
    EXPECT_EQ(parsed.content, "Done.") << piece;
  }
}

TEST(OutputParser, ArgumentsGivenAsTextAreKept) {
  Parsed parsed = parse_in_pieces("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", 5, true, true);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].second, "{\"a\": 1}");
}

TEST(OutputParser, ArgumentsKeepTheModelsKeyOrder) {
  // Sent back in the next turn, sorted keys would render other tokens than the model wrote.
  Parsed parsed = parse_in_pieces("<tool_call>{\"name\": \"f\", \"arguments\": {\"zeta\": 1, \"city\": "
                                  "\"Paris\", \"b\": {\"y\": 2, \"x\": 3}}}</tool_call>",
                                  7, true, true);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].second, "{\"zeta\": 1, \"city\": \"Paris\", \"b\": {\"y\": 2, \"x\": 3}}");
  // Read whole (the name after the arguments): as written too, numbers with all their digits.
  Parsed whole = parse_in_pieces("<tool_call>{\"arguments\": {\"zeta\": 1, \"id\": 123456789012345678901234567890, "
                                 "\"city\": \"Paris\"} , \"name\": \"f\"}</tool_call>",
                                 7, true, true);
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].second, "{\"zeta\": 1, \"id\": 123456789012345678901234567890, \"city\": \"Paris\"}");
}

TEST(OutputParser, ArgumentsStreamAsTheModelWritesThem) {
  // The call starts once its head is read; every later piece of text inside the arguments
  // object is given out with the piece that brought it, braces and quotes inside strings
  // included; the block's own closing brace and the whitespace around it are not.
  const std::string arguments = "{\"code\": \"if (a) { b(\\\"}\\\"); }\", \"list\": [1, {\"x\": []}], \"s\": \"]\"}";
  ASSERT_TRUE(nlohmann::json::accept(arguments));
  const std::string head = "<tool_call>\n{\"name\": \"run\", \"arguments\": ";
  const std::string text = "Sure.\n" + head + arguments + "}\n</tool_call>";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    OutputParser parser(true, true);
    Parsed parsed;
    size_t pushed = 0, started_at = 0, pieces = 0;
    for (size_t i = 0; i < text.size(); i += piece) {
      const ParsedDelta delta = parser.push(text.substr(i, piece));
      pushed = std::min(text.size(), i + piece);
      for (const ToolCallDelta& call : delta.tool_calls) {
        if (call.starts) started_at = pushed;
        ++pieces;
      }
      add(parsed, delta);
      // Everything of the arguments pushed so far is out (nothing is held back but a
      // possible "</tool_call>").
      if (started_at > 0 && pushed < text.size() - 14) {
        const size_t begin = ("Sure.\n" + head).size();
        ASSERT_EQ(parsed.calls.size(), 1u);
        EXPECT_EQ(parsed.calls[0].second, text.substr(begin, std::min(pushed - begin, arguments.size()))) << piece;
      }
    }
    add(parsed, parser.flush());
    // The head is read at the arguments' opening brace.
    EXPECT_GE(started_at, ("Sure.\n" + head).size() + 1) << piece;
    EXPECT_LT(started_at, ("Sure.\n" + head).size() + 1 + piece) << piece;
    if (piece < 8) {
      EXPECT_GT(pieces, 3u) << piece;
    }
    EXPECT_EQ(parsed.content, "Sure.") << piece;
    ASSERT_EQ(parsed.calls.size(), 1u) << piece;
    EXPECT_EQ(parsed.calls[0].first, "run");
    EXPECT_EQ(parsed.calls[0].second, arguments) << piece;
  }
}

TEST(OutputParser, AStreamedCallCutOffStaysACall) {
  // Streamed and whole answers agree: once started, a call stays one (its arguments as
  // far as the model wrote them).
  Parsed cut = parse_in_pieces("ok <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2", 3, true, true);
  EXPECT_EQ(cut.content, "ok");
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].first, "f");
  EXPECT_EQ(cut.calls[0].second, "{\"a\": [1, 2");
  // A block the model never closes: the text after the call is the answer's, at every split.
  const std::string unclosed = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}\nI will now wait.";
  for (size_t piece = 1; piece <= unclosed.size(); ++piece) {
    Parsed parsed = parse_in_pieces(unclosed, piece, true, true);
    ASSERT_EQ(parsed.calls.size(), 1u) << piece;
    EXPECT_EQ(parsed.calls[0].second, "{\"a\": 1}") << piece;
    EXPECT_EQ(parsed.content, "\nI will now wait.") << piece;  // as after a closed block
  }
  // Cut off inside the close: no text.
  Parsed cut_close = parse_in_pieces("ok <tool_call>{\"name\": \"f\", \"arguments\": {}}\n</tool_c", 3, true, true);
  ASSERT_EQ(cut_close.calls.size(), 1u);
  EXPECT_EQ(cut_close.content, "ok");
  // A block read whole (the name after the arguments) also ends at the next opening.
  const std::string whole_then_next =
      "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n"
      "</tool_call>";
  for (size_t piece = 1; piece <= whole_then_next.size(); ++piece) {
    Parsed parsed = parse_in_pieces(whole_then_next, piece, true, true);
    ASSERT_EQ(parsed.calls.size(), 2u) << piece;
    EXPECT_EQ(parsed.calls[0].first, "f") << piece;
    EXPECT_EQ(parsed.calls[1].first, "g") << piece;
    EXPECT_EQ(parsed.content, "") << piece;
  }
  // The next call opened before this one is closed: both are calls, at every split.
  const std::string two = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n<tool_call>{\"name\": \"g\", "
                          "\"arguments\": {}}</tool_call>done";
  for (size_t piece = 1; piece <= two.size(); ++piece) {
    Parsed parsed = parse_in_pieces(two, piece, true, true);
    ASSERT_EQ(parsed.calls.size(), 2u) << piece;
    EXPECT_EQ(parsed.calls[0].second, "{\"a\": 1}") << piece;
    EXPECT_EQ(parsed.calls[1].first, "g") << piece;
    EXPECT_EQ(parsed.content, "done") << piece;
  }
  // Closed: what lies between the arguments and the close (the block's brace, stray keys) is no text.
  Parsed closed = parse_in_pieces("<tool_call>{\"name\": \"f\", \"arguments\": {}, \"x\": 1}\n</tool_call>ok", 4, true, true);
  ASSERT_EQ(closed.calls.size(), 1u);
  EXPECT_EQ(closed.content, "ok");
  // Closed, with text after the call's own brace: that text is content, not lost (a second
  // object, words), at every split; a brace inside a stray key's string is no close.
  const std::vector<std::pair<std::string, std::string>> after = {
      {"<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}} trailing</tool_call>", " trailing"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {}} {\"name\": \"g\"}</tool_call>", " {\"name\": \"g\"}"},
      {"<tool_call>{\"name\": \"f\", \"arguments\": {}, \"x\": \"}\"}\nafter\n</tool_call>", "\nafter"},
  };
  for (const auto& [text, content] : after) {
    for (size_t piece = 1; piece <= text.size(); ++piece) {
      Parsed parsed = parse_in_pieces(text, piece, true, true);
      ASSERT_EQ(parsed.calls.size(), 1u) << text << " " << piece;
      EXPECT_EQ(parsed.calls[0].first, "f");
      EXPECT_EQ(parsed.content, content) << text << " " << piece;
    }
  }
  // Only its own bracket closes one: a stray "]" is text of the arguments, not their end.
  Parsed stray = parse_in_pieces("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ]}}\n</tool_call>", 3, true, true);
  ASSERT_EQ(stray.calls.size(), 1u);
  EXPECT_EQ(stray.calls[0].second, "{\"a\": ]}");
  EXPECT_EQ(stray.content, "");
  // A name with escapes is read as JSON.
  Parsed escaped = parse_in_pieces("<tool_call>{\"name\": \"a\\\"b\\u0041\", \"arguments\": {}}</tool_call>", 2, true, true);
  ASSERT_EQ(escaped.calls.size(), 1u);
  EXPECT_EQ(escaped.calls[0].first, "a\"bA");
  EXPECT_EQ(escaped.calls[0].second, "{}");
}

TEST(OutputParser, AForcedCallCutOffBeforeItsArgumentsStaysACall) {
  // tool_choice forced a call: the prompt ended with its opening, and the output broke off
  // (max_tokens, a stop string) before the arguments began. The opening is the server's
  // text: no content, a call with the name as far as it was written.
  struct Case {
    std::string opening, output, name;
  };
  const std::vector<Case> cases = {
      {"<tool_call>\n{\"name\": ", "", ""},                                    // nothing written
      {"<tool_call>\n{\"name\": \"", "ge", "ge"},                              // required: inside the name
      {"<tool_call>\n{\"name\": \"", "get_t\\u00", "get_t"},                  // an escape cut
      {"<tool_call>\n{\"name\": \"", "get_time\", \"argu", "get_time"},       // past the name
      {"<tool_call>\n{\"name\": \"get_time\", \"arguments\":", " ", "get_time"},  // named
  };
  for (const Case& c : cases) {
    for (size_t piece = 1; piece <= std::max<size_t>(c.output.size(), 1); ++piece) {
      OutputParser parser(true, true);
      parser.push_forced_opening(c.opening);
      Parsed parsed;
      for (size_t i = 0; i < c.output.size(); i += piece) add(parsed, parser.push(c.output.substr(i, piece)));
      add(parsed, parser.flush());
      EXPECT_EQ(parsed.content, "") << c.output;
      ASSERT_EQ(parsed.calls.size(), 1u) << c.output;
      EXPECT_EQ(parsed.calls[0].first, c.name) << c.output;
      EXPECT_EQ(parsed.calls[0].second, "") << c.output;
    }
  }
  // Once the arguments began it is an ordinary call; and the same text without the forced
  // opening (the model's own) stays text.
  OutputParser forced(true, true);
  forced.push_forced_opening("<tool_call>\n{\"name\": \"f\", \"arguments\":");
  Parsed begun;
  add(begun, forced.push(" {\"a\": 1"));
  add(begun, forced.flush());
  ASSERT_EQ(begun.calls.size(), 1u);
  EXPECT_EQ(begun.calls[0].second, "{\"a\": 1");
  Parsed own = parse_in_pieces("<tool_call>\n{\"name\": \"ge", 2, true, true, false);
  EXPECT_TRUE(own.calls.empty());
  EXPECT_EQ(own.content, "<tool_call>\n{\"name\": \"ge");
  // "required" lets the model write more calls, and nothing else: a later one cut off in its
  // head is a call too, and the layout between them no text.
  const std::string more = " {\"a\": 1}}\n</tool_call> \t<tool_call> \n{\n \"name\"\n: \"g";
  for (size_t piece = 1; piece <= more.size(); ++piece) {
    OutputParser parser(true, true);
    parser.push_forced_opening("<tool_call>\n{\"name\": \"f\", \"arguments\":");
    Parsed parsed;
    for (size_t i = 0; i < more.size(); i += piece) add(parsed, parser.push(more.substr(i, piece)));
    add(parsed, parser.flush());
    EXPECT_EQ(parsed.content, "") << piece;
    ASSERT_EQ(parsed.calls.size(), 2u) << piece;
    EXPECT_EQ(parsed.calls[1].first, "g") << piece;
    EXPECT_EQ(parsed.calls[1].second, "") << piece;
  }
  // A later block cut before any of its name is no call (a call to "" helps nobody).
  for (const std::string cut : {"", "\n{\"na", "\n{\"name\": "}) {
    OutputParser parser(true, true);
    parser.push_forced_opening("<tool_call>\n{\"name\": \"f\", \"arguments\":");
    Parsed parsed;
    add(parsed, parser.push(" {}}\n</tool_call>\n<tool_call>" + cut));
    add(parsed, parser.flush());
    EXPECT_EQ(parsed.content, "") << cut;
    ASSERT_EQ(parsed.calls.size(), 1u) << cut;
    EXPECT_EQ(parsed.calls[0].first, "f");
  }
}

TEST(OutputParser, WithoutToolsWhitespaceIsNotHeldBack) {
  // Nothing can follow as a call: a token's newline or indentation is content at once.
  OutputParser parser(true, false);
  EXPECT_EQ(parser.push("a\n").content, "a\n");
  EXPECT_EQ(parser.push("\t").content, "\t");
  OutputParser with_tools(true, true);
  EXPECT_EQ(with_tools.push("a\n").content, "a");  // may be the layout before a call
  EXPECT_EQ(with_tools.flush().content, "\n");
}

TEST(OutputParser, OneCallWhenParallelCallsAreOff) {
  const std::string text =
      "<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>{\"name\": \"b\"}</tool_call>\n<tool_call>{\"name\": "
      "\"c\"}</tool_call>";
  for (size_t piece : {1, 4, 1000}) {
    OutputParser parser(true, true, false, /*single_tool_call=*/true);
    Parsed parsed;
    for (size_t i = 0; i < text.size(); i += piece) add(parsed, parser.push(text.substr(i, piece)));
    add(parsed, parser.flush());
    ASSERT_EQ(parsed.calls.size(), 1u) << piece;
    EXPECT_EQ(parsed.calls[0].first, "a");
    EXPECT_EQ(parsed.content, "") << piece;  // the dropped calls are not shown as text either
    EXPECT_TRUE(parser.saw_tool_call());
  }
  // Dropped calls are read as any other: unclosed ones and those streamed piece by piece leave
  // only the answer's text.
  const std::string unclosed = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n<tool_call>\n{\"name\": \"g\", "
                               "\"arguments\": {\"b\": 2}} Done.";
  for (size_t piece = 1; piece <= unclosed.size(); ++piece) {
    for (const bool single : {false, true}) {
      OutputParser parser(true, true, false, single);
      Parsed parsed;
      for (size_t i = 0; i < unclosed.size(); i += piece) add(parsed, parser.push(unclosed.substr(i, piece)));
      add(parsed, parser.flush());
      ASSERT_EQ(parsed.calls.size(), single ? 1u : 2u) << piece;
      EXPECT_EQ(parsed.calls[0].second, "{\"a\": 1}") << piece;
      EXPECT_EQ(parsed.content, " Done.") << piece << " " << single;
    }
  }
}

TEST(OutputParser, TagsInsideTheCallsStringsAreText) {
  // Code or documentation in an argument may hold Qwen's own tags: the call's JSON strings
  // decide, not the first tag in sight.
  const std::string streamed =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"code\": \"a</tool_call>b<tool_call>\\\"c\"}}\n</tool_call> ok";
  const std::string whole = "<tool_call>{\"arguments\": {\"x\": \"<tool_call>\", \"y\": \"</tool_call>\"}, \"name\": \"g\"}</tool_call>";
  for (size_t piece = 1; piece <= streamed.size(); ++piece) {
    Parsed parsed = parse_in_pieces(streamed, piece, true, true, false);
    ASSERT_EQ(parsed.calls.size(), 1u) << piece;
    EXPECT_EQ(parsed.calls[0].second, "{\"code\": \"a</tool_call>b<tool_call>\\\"c\"}") << piece;
    EXPECT_EQ(parsed.content, " ok") << piece;
  }
  for (size_t piece = 1; piece <= whole.size(); ++piece) {
    Parsed parsed = parse_in_pieces(whole, piece, true, true, false);
    ASSERT_EQ(parsed.calls.size(), 1u) << piece;
    EXPECT_EQ(parsed.calls[0].first, "g");
    EXPECT_EQ(parsed.calls[0].second, "{\"x\": \"<tool_call>\", \"y\": \"</tool_call>\"}") << piece;
    EXPECT_EQ(parsed.content, "") << piece;
  }
  // Outside the strings a tag still ends the block: a call left open, then the next one.
  Parsed two = parse_in_pieces("<tool_call>{\"name\": \"a\"}<tool_call>{\"name\": \"b\"}</tool_call>", 3, true, true);
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].first, "b");
}

TEST(OutputParser, ACallWithOtherKeysThanArgumentsIsText) {
  // {"name", "parameters"} is no call of Qwen's: taken as one, its arguments would be lost.
  const std::string text = "<tool_call>{\"name\": \"f\", \"parameters\": {\"a\": 1}}</tool_call>";
  Parsed parsed = parse_in_pieces(text, 4, true, true, false);
  EXPECT_TRUE(parsed.calls.empty());
  EXPECT_EQ(parsed.content, text);
  // A name alone is a call without arguments.
  Parsed bare = parse_in_pieces("<tool_call>{\"name\": \"f\"}</tool_call>", 4, true, true);
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].second, "{}");
}

TEST(OutputParser, ALongHeadIsReadWholeAtItsClose) {
  // Whitespace without end after "{" is not matched again at every token.
  const std::string text = "<tool_call>{" + std::string(20000, '\n') + "\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>";
  for (size_t piece : {1, 7, 20000}) {
    Parsed parsed = parse_in_pieces(text, piece, true, true);
    ASSERT_EQ(parsed.calls.size(), 1u) << piece;
    EXPECT_EQ(parsed.calls[0].second, "{\"a\": 1}") << piece;
  }
}

TEST(OutputParser, AThinkTagRepeatedAfterThePromptOpenedItIsNotReasoning) {
  const std::string text = "<think>\nHmm.</think>\n\nYes.";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    OutputParser parser(true, false, /*reasoning_open=*/true);
    Parsed parsed;
    for (size_t i = 0; i < text.size(); i += piece) add(parsed, parser.push(text.substr(i, piece)));
    add(parsed, parser.flush());
    EXPECT_EQ(parsed.reasoning, "\nHmm.") << piece;
    EXPECT_EQ(parsed.content, "Yes.") << piece;
  }
}

}  // namespace
}  // namespace qwenrt::server
