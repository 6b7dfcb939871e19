// Include first in each chat_template source. GCC 12 reports a false -Wrestrict inside
// std::string's operator+ at -O3 (GCC bug 105329); it fires on ordinary string building.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
