#include "structured/grammar_cache.h"

#include <list>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace qwenrt::structured {
namespace {

struct Entry {
  std::string key;
  std::shared_ptr<const Grammar> grammar;  // null: refused
  ErrorCategory category = ErrorCategory::kInvalidArgument;
  std::string refusal;
};

struct Cache {
  std::mutex mutex;
  std::list<Entry> entries;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index;
  uint64_t hits = 0;
};

Cache& cache() {
  static Cache instance;
  return instance;
}

std::shared_ptr<const Grammar> found(const Entry& entry) {
  if (entry.grammar == nullptr) throw Error(entry.category, entry.refusal);
  return entry.grammar;
}

}  // namespace

std::shared_ptr<const Grammar> cached_grammar(const std::string& key, const std::function<Grammar()>& compile) {
  if (key.size() > kLongestKeyKept) return std::make_shared<const Grammar>(compile());
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    const auto it = c.index.find(key);
    if (it != c.index.end()) {
      ++c.hits;
      c.entries.splice(c.entries.begin(), c.entries, it->second);
      return found(*it->second);
    }
  }
  // Compiled outside the lock: other requests go on meanwhile (two alike at once may both
  // compile; the second's result is the one kept).
  Entry entry;
  entry.key = key;
  try {
    entry.grammar = std::make_shared<const Grammar>(compile());
  } catch (const Error& error) {
    // A schema the grammar refuses is refused again; anything else is not kept.
    if (error.category() != ErrorCategory::kInvalidArgument) throw;
    entry.category = error.category();
    entry.refusal = error.message();
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  const auto it = c.index.find(key);
  if (it != c.index.end()) {
    c.entries.erase(it->second);
    c.index.erase(it);
  }
  c.entries.push_front(std::move(entry));
  c.index[key] = c.entries.begin();
  while (c.entries.size() > kGrammarsKept) {
    c.index.erase(c.entries.back().key);
    c.entries.pop_back();
  }
  return found(c.entries.front());
}

size_t cached_grammars() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().entries.size();
}

uint64_t cached_grammar_hits() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().hits;
}

}  // namespace qwenrt::structured
