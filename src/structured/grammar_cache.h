// Compiled grammars kept by what they were compiled from, so that requests with the same
// schema or tools share one Grammar: no second compile (a schema's patterns may take a good
// part of a second), and the same automata, whose token masks the mask cache then shares
// between the requests' sequences (token_mask.cpp). A refusal is kept too, so that a client
// repeating a schema the grammar refuses is answered without compiling it again.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "structured/json_grammar.h"

namespace qwenrt::structured {

// The grammar compiled from `key` (a canonical text of what `compile` reads: a schema's
// JSON dump with what kind of grammar it makes), compiling it on a miss. Throws what
// `compile` throws (Error), also when a refusal is found kept. Safe from several threads;
// the least recently used of kGrammarsKept entries go first.
std::shared_ptr<const Grammar> cached_grammar(const std::string& key, const std::function<Grammar()>& compile);

inline constexpr size_t kGrammarsKept = 64;
inline constexpr size_t kLongestKeyKept = size_t{256} << 10;  // longer ones are compiled each time

// Entries now kept, and lookups that found one (for tests).
size_t cached_grammars();
uint64_t cached_grammar_hits();

}  // namespace qwenrt::structured
