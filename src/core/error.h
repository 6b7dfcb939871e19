// qwenrt::Error: the one exception type thrown inside the engine. It carries a category
// so the CLI and the server can map it to an exit code / HTTP status, and a message
// that names the file, tensor, option or op concerned.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace qwenrt {

enum class ErrorCategory {
  kInvalidArgument,  // bad command-line value or request field
  kInvalidModel,     // malformed or unsupported model folder/file
  kIo,               // file missing, unreadable
  kUnsupported,      // valid input we do not handle (architecture, dtype)
  kOutOfMemory,      // plan does not fit
  kDevice,           // GPU runtime failure
  kInternal,         // broken invariant: a bug
};

const char* error_category_name(ErrorCategory category);

class Error : public std::runtime_error {
 public:
  // `param`: the request field a refusal of bad input is about, where one is ("" for none);
  // the server answers it as the OpenAI error's `param`.
  Error(ErrorCategory category, const std::string& message, std::string param = "")
      : std::runtime_error(message), category_(category), message_(message), param_(std::move(param)) {}
  ErrorCategory category() const { return category_; }
  // The whole message: what() ends at a NUL that quoted input put in it (a schema's key "a\u0000b").
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }

 private:
  ErrorCategory category_;
  std::string message_;
  std::string param_;
};

[[noreturn]] void throw_check_failure(const char* expr, const char* file, int line,
                                      const std::string& message);

}  // namespace qwenrt

// Always-on invariant check (also in release builds): a failure is a bug, reported with
// the expression and location.
#define QWENRT_CHECK(cond, msg)                                                    \
  do {                                                                             \
    if (!(cond)) ::qwenrt::throw_check_failure(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
