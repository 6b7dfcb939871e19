// Byte counts as people read them, for messages and reports.
#pragma once

#include <string>

namespace qwenrt {

// "1.50 GiB": always in GiB with two decimals (messages that compare sizes read best in one unit).
std::string format_gib(double bytes);

// The largest unit that keeps the figure at or above one: "1.50 GiB", "12.0 MiB", "3.0 KiB".
std::string format_bytes(double bytes);

}  // namespace qwenrt
