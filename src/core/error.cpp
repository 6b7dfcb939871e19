#include "core/error.h"

namespace qwenrt {

const char* error_category_name(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidArgument: return "invalid argument";
    case ErrorCategory::kInvalidModel: return "invalid model";
    case ErrorCategory::kIo: return "i/o error";
    case ErrorCategory::kUnsupported: return "unsupported";
    case ErrorCategory::kOutOfMemory: return "out of memory";
    case ErrorCategory::kDevice: return "device error";
    case ErrorCategory::kInternal: return "internal error";
  }
  return "error";
}

void throw_check_failure(const char* expr, const char* file, int line,
                         const std::string& message) {
  throw Error(ErrorCategory::kInternal, std::string("check failed: ") + expr + " at " + file +
                                            ":" + std::to_string(line) + ": " + message);
}

}  // namespace qwenrt
