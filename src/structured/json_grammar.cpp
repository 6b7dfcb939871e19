#include "structured/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <optional>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"

namespace qwenrt::structured {

using nlohmann::ordered_json;

// ---- literal tries ----

void LiteralTrie::add(std::string_view text, int32_t tag) {
  int32_t node = 0;
  auto note = [&](int32_t at) {
    Node& n = nodes[static_cast<size_t>(at)];
    n.min_tag = std::min(n.min_tag, tag);
    n.max_tag = std::max(n.max_tag, tag);
    n.tags.insert(std::upper_bound(n.tags.begin(), n.tags.end(), tag), tag);
  };
  note(0);
  for (const char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes.size());
      nodes[static_cast<size_t>(node)].children.emplace_back(byte, next);
      nodes.emplace_back();
    }
    node = next;
    note(node);
  }
  if (nodes[static_cast<size_t>(node)].tag < 0) nodes[static_cast<size_t>(node)].tag = tag;
}

int32_t LiteralTrie::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : nodes[static_cast<size_t>(node)].children) {
    if (b == byte) return next;
  }
  return -1;
}

bool LiteralTrie::has_tag_in(int32_t node, int32_t lo, int32_t hi) const {
  const Node& n = nodes[static_cast<size_t>(node)];
  if (n.max_tag < lo || n.min_tag > hi) return false;
  if (n.min_tag >= lo && n.max_tag <= hi) return true;
  const auto it = std::lower_bound(n.tags.begin(), n.tags.end(), lo);
  return it != n.tags.end() && *it <= hi;
}

// ---- numbers with bounds ----

namespace {

enum NumberState : uint8_t { kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };

// A bounded number's text so far, as its frame keeps it: its digits as one integer (leading
// zeros dropped), the digits after the point, the bytes written, and its sign. Frame::a and
// Frame::b hold the digits, Frame::ws the rest.
struct Decimal {
  uint64_t digits = 0;
  int fraction = 0;
  int bytes = 0;
  bool negative = false;
};

Decimal read_decimal(const Frame& f) {
  Decimal d;
  std::memcpy(&d.digits, &f.a, sizeof(d.digits));
  d.bytes = f.ws & 63;
  d.fraction = (f.ws >> 6) & 63;
  d.negative = ((f.ws >> 12) & 1) != 0;
  return d;
}

void write_decimal(Frame& f, const Decimal& d) {
  static_assert(offsetof(Frame, b) == offsetof(Frame, a) + sizeof(int32_t), "the digits span a and b");
  std::memcpy(&f.a, &d.digits, sizeof(d.digits));
  f.ws = static_cast<uint16_t>(d.bytes | (d.fraction << 6) | (d.negative ? 1 << 12 : 0));
}

constexpr uint64_t kBoundedLimit = 1'000'000'000'000'000ull;  // 10^kMaxBoundedDigits

uint64_t power_of_ten(int n) {
  uint64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// 10^n as a double, exact for n <= 22.
double decimal_scale(int n) {
  static const auto table = [] {
    std::array<double, kMaxBoundedFraction + 1> t{};
    double p = 1;
    for (double& v : t) {
      v = p;
      p *= 10;
    }
    return t;
  }();
  return table[static_cast<size_t>(n)];
}

int digit_count(uint64_t v) {
  int n = 0;
  for (; v > 0; v /= 10) ++n;
  return n;
}

// A value lies in the node's bounds (a bounded number's, or an enum value's beside them).
bool within_bounds(const SchemaNode& node, double value) {
  if (node.exclusive_minimum ? !(value > node.minimum) : !(value >= node.minimum)) return false;
  return node.exclusive_maximum ? value < node.maximum : value <= node.maximum;
}

// The value of ±digits / 10^fraction lies in the node's bounds. Both are exact doubles
// (digits < 10^15, 10^fraction for fraction <= 22), so the quotient is the double a JSON
// parser reads from the text.
bool fits(const SchemaNode& node, bool negative, uint64_t digits, int fraction) {
  const double value = static_cast<double>(digits) / decimal_scale(fraction);
  return within_bounds(node, negative ? -value : value);
}

// Some value (base * 10^q + j) / 10^(fraction + q), j in [0, count), fits the bounds. The
// search for j is in doubles; the j found (and its neighbours, for rounding) are then checked
// exactly by `fits`.
bool grid_fits(const SchemaNode& node, bool negative, uint64_t base, int fraction, int q, uint64_t count) {
  if (count == 0) return false;
  const uint64_t scaled = base * power_of_ten(q);
  if (scaled >= kBoundedLimit || count > kBoundedLimit - scaled) {
    // more digits than a bounded number may have: only the ones that stay under the limit
    if (scaled >= kBoundedLimit) return false;
    count = kBoundedLimit - scaled;
  }
  // The magnitude's interval: [low, high] (ends as the bounds have them).
  const double low = negative ? -node.maximum : node.minimum;
  const double step = 1.0 / decimal_scale(fraction + q);
  const double start = static_cast<double>(scaled) * step;
  // The first j at or past `low`, give or take rounding.
  double first = std::ceil((low - start) / step);
  if (!(first > 0)) first = 0;  // also where low is -infinity
  if (first >= static_cast<double>(count)) first = static_cast<double>(count - 1);
  const auto j = static_cast<uint64_t>(first);
  for (uint64_t candidate = j > 0 ? j - 1 : 0; candidate <= j + 1 && candidate < count; ++candidate) {
    if (fits(node, negative, scaled + candidate, fraction + q)) return true;
  }
  return false;
}

// A bounded number's text read up to `state` can still end as a value inside its bounds,
// within the bytes and digits it may have.
bool reachable(const SchemaNode& node, uint8_t state, const Decimal& d) {
  const bool integer = node.kind == NodeKind::kInteger;
  const int bytes_left = kMaxNumberBytes - d.bytes;
  // Some value base / 10^fraction followed by up to `more` digits after the point (at least
  // one with `need`): base's digits and those that follow stay under kMaxBoundedDigits
  // (zeros before the first other digit do not count), the point's at most
  // kMaxBoundedFraction.
  const auto after_point = [&](uint64_t base, int fraction, int more, bool need) {
    const int most = std::min(more, kMaxBoundedFraction - fraction);
    if (base > 0) {
      const int q = std::min(most, kMaxBoundedDigits - digit_count(base));
      return q >= (need ? 1 : 0) && grid_fits(node, d.negative, base, fraction, q, power_of_ten(q));
    }
    // Zero so far: a value written with q more digits, for each q (the grid of one q holds
    // only the values of at most kMaxBoundedDigits digits).
    for (int q = need ? 1 : 0; q <= most; ++q) {
      const uint64_t count = q >= kMaxBoundedDigits ? kBoundedLimit : power_of_ten(q);
      if (grid_fits(node, d.negative, 0, fraction, q, count)) return true;
    }
    return false;
  };
  switch (state) {
    case kNumMinus:
    case kNumInt: {
      // k more digits before the point (none written yet after a minus: k >= 1, and only
      // "0" or a number without a leading zero), then maybe a point and digits after it.
      const bool none = state == kNumMinus;
      const int used = digit_count(d.digits);
      if (none) {
        // "0", then maybe a point and digits
        if (fits(node, d.negative, 0, 0)) return true;
        if (!integer && after_point(0, 0, bytes_left - 2, true)) return true;
      }
      for (int k = none ? 1 : 0; k <= std::min(bytes_left, kMaxBoundedDigits - used); ++k) {
        const uint64_t width = power_of_ten(k);
        uint64_t low = d.digits * width, count = width;
        if (none) {
          low = power_of_ten(k - 1);  // 1-9, 10-99, ...
          count = width - low;
        }
        if (grid_fits(node, d.negative, low, 0, 0, count)) return true;
        if (integer) continue;
        // The digits after the point: for every integer part of these k digits at once.
        const int q = std::min({bytes_left - k - 1, kMaxBoundedFraction, kMaxBoundedDigits - used - k});
        if (q > 0 && grid_fits(node, d.negative, low, 0, q, count * power_of_ten(q))) return true;
      }
      return false;
    }
    case kNumZero:
      return fits(node, d.negative, 0, 0) || (!integer && after_point(0, 0, bytes_left - 1, true));
    case kNumDot:
      return after_point(d.digits, 0, bytes_left, true);
    case kNumFrac:
      return after_point(d.digits, d.fraction, bytes_left, false);
    default:
      return false;
  }
}

// The next state of a bounded number's text after `byte` (its digits updated), or -1 where
// the byte does not continue it (the number may end there) or leads where no value fits:
// `ends` tells the two apart.
int bounded_number_byte(const SchemaNode& node, uint8_t state, uint8_t byte, Decimal& d, bool& ends) {
  ends = false;
  const bool integer = node.kind == NodeKind::kInteger;
  const bool digit = byte >= '0' && byte <= '9';
  int next = -1;
  switch (state) {
    case kNumMinus: next = byte == '0' ? kNumZero : digit ? kNumInt : -1; break;
    case kNumZero: next = byte == '.' && !integer ? kNumDot : -1; ends = next < 0; break;
    case kNumInt: next = digit ? kNumInt : byte == '.' && !integer ? kNumDot : -1; ends = next < 0; break;
    case kNumDot: next = digit ? kNumFrac : -1; break;
    case kNumFrac: next = digit ? kNumFrac : -1; ends = next < 0; break;
    default: return -1;
  }
  if (ends) {
    // An exponent is not written here; anything else ends the number, if its value fits.
    ends = byte != 'e' && byte != 'E' && fits(node, d.negative, d.digits, d.fraction);
    return -1;
  }
  if (next < 0 || d.bytes + 1 > kMaxNumberBytes) return -1;
  ++d.bytes;
  if (digit) {
    d.digits = d.digits * 10 + static_cast<uint64_t>(byte - '0');
    if (d.digits >= kBoundedLimit) return -1;
    if (next == kNumFrac && ++d.fraction > kMaxBoundedFraction) return -1;
  }
  return reachable(node, static_cast<uint8_t>(next), d) ? next : -1;
}

// The first byte of a bounded number, as bounded_number_byte.
int bounded_number_start(const SchemaNode& node, uint8_t byte, Decimal& d) {
  d = Decimal{};
  d.negative = byte == '-';
  bool ends = false;
  if (d.negative) {
    d.bytes = 1;
    return reachable(node, kNumMinus, d) ? kNumMinus : -1;
  }
  // As after a minus, without it.
  return bounded_number_byte(node, kNumMinus, byte, d, ends);
}

// Some value fits the node's bounds at all.
bool bounded_has_value(const SchemaNode& node) {
  Decimal positive, negative;
  negative.negative = true;
  negative.bytes = 1;
  return reachable(node, kNumMinus, positive) || reachable(node, kNumMinus, negative);
}

}  // namespace

// ---- compiling a schema ----

namespace {

Grammar base_grammar() {
  Grammar g;
  g.nodes.resize(7);
  g.nodes[kAnyNode].kind = NodeKind::kAny;
  g.nodes[kAnyObjectNode].kind = NodeKind::kObject;
  g.nodes[kAnyObjectNode].additional = kAnyNode;
  g.nodes[kAnyArrayNode].kind = NodeKind::kArray;
  g.nodes[kAnyArrayNode].items = kAnyNode;
  g.nodes[kStringNode].kind = NodeKind::kString;
  g.nodes[kNumberNode].kind = NodeKind::kNumber;
  LiteralTrie booleans;
  booleans.add("true", 0);
  booleans.add("false", 1);
  LiteralTrie null;
  null.add("null", 0);
  g.tries.push_back(std::move(booleans));
  g.tries.push_back(std::move(null));
  g.nodes[kBooleanNode].kind = NodeKind::kLiterals;
  g.nodes[kBooleanNode].literals = 0;
  g.nodes[kNullNode].kind = NodeKind::kLiterals;
  g.nodes[kNullNode].literals = 1;
  return g;
}

// Keywords that only annotate (or, for `format`, annotate by default since draft 2019-09).
const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "default",  "examples", "$schema", "$id",        "$comment",
    "deprecated", "readOnly",  "writeOnly", "format",  "$defs",   "definitions", "strict",
    "contentEncoding", "contentMediaType", "$anchor"};
// Keywords understood here.
const std::set<std::string, std::less<>> kHandled = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "pattern", "multipleOf"};
// Keywords that constrain values but are not enforced: refused by name.
const std::set<std::string, std::less<>> kRefused = {
    "minProperties",
    "maxProperties", "uniqueItems", "contains", "minContains", "maxContains", "prefixItems", "patternProperties",
    "propertyNames", "dependentRequired", "dependentSchemas", "dependencies", "allOf", "not", "if", "then",
    "else", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef"};

// The string `format`s enforced, as the patterns of the strings they name (in their common
// forms: a generated value always fits its format, not every value that fits can be generated),
// and the longest such string (-1: no bound). Others only annotate, as JSON Schema has them.
constexpr const char* kDate =
    "([12]\\d{3}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|[12]\\d{3}-(0[469]|11)-(0[1-9]|[12]\\d|30)|"
    "[12]\\d{3}-02-(0[1-9]|1\\d|2[0-8])|([12]\\d(0[48]|[2468][048]|[13579][26])|(1[26]|2[048])00)-02-29)";
constexpr const char* kTime = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
constexpr const char* kIpv4Part = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
constexpr const char* kHexGroup = "[0-9a-fA-F]{1,4}";
constexpr const char* kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
constexpr const char* kDurationTime = "T(\\d+H(\\d+M(\\d+S)?)?|\\d+M(\\d+S)?|\\d+S)";

const std::map<std::string, std::pair<std::string, int32_t>, std::less<>>& formats() {
  static const std::map<std::string, std::pair<std::string, int32_t>, std::less<>> table = [] {
    const std::string date = kDate, time = kTime, ipv4 = kIpv4Part, hex = kHexGroup, label = kLabel;
    const std::string duration_time = kDurationTime;
    // Eight groups; or fewer with "::" for one or more groups of zeros: `head` groups before
    // it and 1 to 7 - head after, or any of them before it and none after, or none before.
    std::string ipv6 = "(" + hex + ":){7}" + hex;
    for (int head = 1; head <= 6; ++head) {
      ipv6 += "|(" + hex + ":){" + std::to_string(head) + "}(:" + hex + "){1," + std::to_string(7 - head) + "}";
    }
    ipv6 += "|(" + hex + ":){1,7}:|:(:" + hex + "){1,7}|::";
    std::map<std::string, std::pair<std::string, int32_t>, std::less<>> out;
    out["date"] = {"^" + date + "$", -1};
    out["time"] = {"^" + time + "$", -1};
    out["date-time"] = {"^" + date + "T" + time + "$", -1};
    out["duration"] = {"^P((\\d+D|\\d+M(\\d+D)?|\\d+Y(\\d+M(\\d+D)?)?)(" + duration_time + ")?|" + duration_time +
                           "|\\d+W)$",
                       -1};
    out["uuid"] = {"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", -1};
    out["ipv4"] = {"^(" + ipv4 + "\\.){3}" + ipv4 + "$", -1};
    out["ipv6"] = {"^(" + ipv6 + ")$", -1};
    out["hostname"] = {"^" + label + "(\\." + label + ")*$", 253};
    out["email"] = {"^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@" + label + "(\\." + label + ")+$", 254};
    return out;
  }();
  return table;
}

// The enforced format a string schema names; null for none or one that only annotates.
const std::pair<std::string, int32_t>* enforced_format(const ordered_json& schema) {
  const auto it = schema.find("format");
  if (it == schema.end() || !it->is_string()) return nullptr;
  const auto known = formats().find(it->get_ref<const std::string&>());
  return known == formats().end() ? nullptr : &known->second;
}

constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxNodes = 20000;
constexpr int64_t kMaxPatternStatesInAll = 200000;  // automaton states of a schema's patterns together

// A pattern with its length bounds.
using PatternKey = std::tuple<std::string, int32_t, int32_t>;
// The patterns compiled for one request, shared by the compilers that build its grammar (a
// tool's parameters are compiled alone first, to see whether the grammar can hold them):
// each is compiled once, and all of them together within one budget of work.
struct Automata {
  std::map<PatternKey, BytePattern> compiled;
  size_t work_left = 4 * kMaxPatternWork;
};

class Compiler {
 public:
  explicit Compiler(std::shared_ptr<Automata> automata = std::make_shared<Automata>())
      : g_(base_grammar()), automata_(std::move(automata)) {}

  // A schema with its own root (what its references point into), compiled into this grammar.
  int32_t compile_root(const ordered_json& root, const std::string& path) {
    root_ = &root;
    refs_.clear();
    return compile(root, path, 0);
  }

  // {"name": <name>, "arguments": <that tool's parameters>} for one of the tools.
  int32_t tool_calls(const std::vector<std::pair<std::string, ordered_json>>& tools) {
    if (tools.size() > static_cast<size_t>(kMaxAlternatives)) {
      // More tools than alternatives a matcher follows: one of the names, with any object.
      std::vector<ordered_json> names;
      for (const auto& tool : tools) names.emplace_back(tool.first);
      return call_object(literals(names, "tools"), kAnyObjectNode, "tools");
    }
    std::vector<int32_t> calls;
    for (const auto& [name, parameters] : tools) {
      const std::string path = "tool '" + name + "' parameters #";
      // A tool's parameters describe it to the model; where they hold what the grammar cannot
      // enforce, the call is still held to its shape, with any object as its arguments.
      int32_t arguments = kAnyObjectNode;
      if (!parameters.is_null()) {
        bool usable = true;
        try {
          // Every check a schema of its own gets, the whole grammar's included, counting
          // what the grammar holds already (its parts and its patterns' states).
          Compiler alone(automata_);
          alone.node_base_ = g_.nodes.size() - alone.g_.nodes.size();
          alone.pattern_states_ = pattern_states_;
          alone.take(alone.compile_root(parameters, path));
        } catch (const Error&) {
          usable = false;
        }
        if (usable) arguments = compile_root(parameters, path);
      }
      calls.push_back(call_object(literals({ordered_json(name)}, path), arguments, path));
    }
    if (calls.size() == 1) return calls[0];
    const int32_t node = new_node(NodeKind::kAnyOf, "tools");
    g_.nodes[static_cast<size_t>(node)].alternatives = std::move(calls);
    return node;
  }

  int32_t call_object(int32_t name_node, int32_t arguments, const std::string& path) {
    LiteralTrie keys;
    keys.add(ordered_json("name").dump().substr(1), 0);
    keys.add(ordered_json("arguments").dump().substr(1), 1);
    g_.tries.push_back(std::move(keys));
    const int32_t node = new_node(NodeKind::kObject, path);
    SchemaNode& n = g_.nodes[static_cast<size_t>(node)];
    n.property_nodes = {name_node, arguments};
    n.required = {1, 1};
    n.key_trie = static_cast<int32_t>(g_.tries.size() - 1);
    return node;
  }

  Grammar take(int32_t root) {
    g_.root = root;
    flatten_alternatives();
    count_frames();
    for (SchemaNode& node : g_.nodes) {
      if (node.kind != NodeKind::kObject) continue;
      // next_required[i]: the first required property at or after i (the count: none).
      node.next_required.assign(node.property_nodes.size() + 1, static_cast<int32_t>(node.property_nodes.size()));
      for (size_t i = node.property_nodes.size(); i-- > 0;) {
        node.next_required[i] = node.required[i] != 0 ? static_cast<int32_t>(i) : node.next_required[i + 1];
      }
    }
    if (1 + g_.nodes[static_cast<size_t>(root)].min_frames > kMaxDepth) {
      fail("#", "the schema requires nesting deeper than " + std::to_string(kMaxDepth - 2) +
                    " levels, or without end (a required property or item that recurses)");
    }
    return std::move(g_);
  }

  // anyOf of anyOf becomes one list (a matcher never steps through an anyOf that holds
  // another: no nesting to multiply the work a byte costs); a cycle of them reads no byte.
  void flatten_alternatives() {
    std::vector<uint8_t> mark(g_.nodes.size(), 0);  // 1: being flattened, 2: done
    std::function<void(size_t)> flatten = [&](size_t v) {
      if (mark[v] == 2) return;
      if (mark[v] == 1) fail("#", "'anyOf' leads back to itself without a value in between");
      mark[v] = 1;
      std::vector<int32_t> flat;
      auto add = [&](int32_t a) {
        if (std::find(flat.begin(), flat.end(), a) == flat.end()) flat.push_back(a);
      };
      const std::vector<int32_t> alternatives = g_.nodes[v].alternatives;
      for (const int32_t a : alternatives) {
        if (g_.nodes[static_cast<size_t>(a)].kind == NodeKind::kAnyOf) {
          flatten(static_cast<size_t>(a));
          for (const int32_t b : g_.nodes[static_cast<size_t>(a)].alternatives) add(b);
        } else {
          add(a);
        }
      }
      if (flat.size() > static_cast<size_t>(kMaxAlternatives)) {
        fail("#", "'anyOf' (or a list of types) with over " + std::to_string(kMaxAlternatives) + " alternatives");
      }
      g_.nodes[v].alternatives = std::move(flat);
      mark[v] = 2;
    };
    for (size_t v = 0; v < g_.nodes.size(); ++v) {
      if (g_.nodes[v].kind == NodeKind::kAnyOf) flatten(v);
    }
  }

  // The frames a value of each node needs at least (itself, then what it must hold), so
  // that the matcher never enters a value the depth left cannot complete.
  void count_frames() {
    constexpr int32_t kTooDeep = kMaxDepth + 1;
    for (SchemaNode& node : g_.nodes) node.min_frames = kTooDeep;
    for (int round = 0; round <= kMaxDepth + 1; ++round) {
      bool changed = false;
      for (SchemaNode& node : g_.nodes) {
        int32_t need = 1;
        switch (node.kind) {
          case NodeKind::kObject:
            for (size_t i = 0; i < node.required.size(); ++i) {
              if (node.required[i] != 0) {
                need = std::max(need, 1 + g_.nodes[static_cast<size_t>(node.property_nodes[i])].min_frames);
              }
            }
            break;
          case NodeKind::kArray:
            if (node.min_items > 0) need = 1 + g_.nodes[static_cast<size_t>(node.items)].min_frames;
            break;
          case NodeKind::kAnyOf:
            need = kTooDeep;
            for (const int32_t a : node.alternatives) need = std::min(need, g_.nodes[static_cast<size_t>(a)].min_frames);
            break;
          default:
            break;
        }
        need = std::min(need, kTooDeep);
        if (need != node.min_frames) {
          node.min_frames = need;
          changed = true;
        }
      }
      if (!changed) break;
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw Error(ErrorCategory::kInvalidArgument, "schema at " + path + ": " + what);
  }

  int32_t new_node(NodeKind kind, const std::string& path) {
    if (node_base_ + g_.nodes.size() >= kMaxNodes) {
      fail(path, "the schema is too large (over " + std::to_string(kMaxNodes) + " parts)");
    }
    g_.nodes.emplace_back();
    g_.nodes.back().kind = kind;
    return static_cast<int32_t>(g_.nodes.size() - 1);
  }

  static int32_t count(const ordered_json& schema, const char* key, const std::string& path, int32_t fallback) {
    const auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    // A whole number written as one (5.0 too, as JSON Schema counts it).
    const bool whole = it->is_number_integer() || (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>());
    if (!whole || it->get<double>() < 0) fail(path, std::string("'") + key + "' must be a non-negative integer");
    if (it->get<double>() > 1'000'000) {
      fail(path, std::string("'") + key + "' over 1000000 is not supported");
    }
    return static_cast<int32_t>(it->get<double>());
  }

  // `multipleOf`: a positive integer up to 2^31 - 1 (as a number: 5.0 too); 0 where the
  // schema has none.
  static int64_t multiple_of(const ordered_json& schema, const std::string& path) {
    const auto it = schema.find("multipleOf");
    if (it == schema.end()) return 0;
    if (!it->is_number() || !(it->get<double>() > 0)) fail(path, "'multipleOf' must be a number above 0");
    const double value = it->get<double>();
    if (value != std::floor(value) || value > 2147483647.0) {
      fail(path, "'multipleOf' is supported only as a whole number up to 2147483647");
    }
    return static_cast<int64_t>(value);
  }

  // The schema's `pattern` (null where it has none) with its length bounds as an automaton,
  // each distinct one compiled once for the request.
  // `key` gets the automaton's key (pattern text and bounds) for the caller's own index.
  const BytePattern* automaton(const ordered_json& schema, const std::string& path, int32_t min_length,
                               int32_t max_length, PatternKey& key) {
    const auto it = schema.find("pattern");
    const std::pair<std::string, int32_t>* format = enforced_format(schema);
    if (it == schema.end() && format == nullptr) return nullptr;
    if (it != schema.end() && format != nullptr) fail(path, "'format' beside 'pattern' is not supported");
    if (it != schema.end() && !it->is_string()) fail(path, "'pattern' must be a string");
    const std::string& text = format != nullptr ? format->first : it->get_ref<const std::string&>();
    if (format != nullptr && format->second >= 0 && (max_length < 0 || max_length > format->second)) {
      max_length = format->second;
      if (min_length > max_length) fail(path, "'minLength' is over the longest string of its 'format'");
    }
    key = PatternKey(text, min_length, max_length);
    auto compiled = automata_->compiled.find(key);
    if (compiled == automata_->compiled.end()) {
      if (automata_->work_left == 0) fail(path, "the schema's patterns take too long to compile in all");
      const size_t allowed = std::min(automata_->work_left, kMaxPatternWork);
      try {
        BytePattern automaton = compile_pattern(text, min_length, max_length, allowed);
        automata_->work_left -= std::min(automata_->work_left, automaton.work());
        compiled = automata_->compiled.emplace(key, std::move(automaton)).first;
      } catch (const PatternError& error) {
        // A refusal may have spent all it was allowed (too much work, too many states).
        automata_->work_left -= allowed;
        fail(path, "'pattern' " + ordered_json(text).dump() + ": " + error.what());
      }
    }
    return &compiled->second;
  }

  // The schema's `pattern` with its length bounds in the grammar; -1 where it has none.
  int32_t pattern(const ordered_json& schema, const std::string& path, int32_t min_length, int32_t max_length) {
    PatternKey key;
    const BytePattern* compiled = automaton(schema, path, min_length, max_length, key);
    if (compiled == nullptr) return -1;
    if (const auto known = patterns_.find(key); known != patterns_.end()) return known->second;
    pattern_states_ += compiled->states();
    if (pattern_states_ > kMaxPatternStatesInAll) {
      fail(path, "the schema's patterns need over " + std::to_string(kMaxPatternStatesInAll) + " automaton states in all");
    }
    g_.patterns.push_back(*compiled);
    const auto index = static_cast<int32_t>(g_.patterns.size() - 1);
    patterns_.emplace(key, index);
    return index;
  }

  // minimum, maximum, exclusiveMinimum and exclusiveMaximum (numbers; or, as draft 4 has
  // them, exclusive* as booleans that make minimum and maximum exclusive): the bounds in the
  // fields of a SchemaNode, or nothing where the schema has none.
  static std::optional<SchemaNode> number_bounds(const ordered_json& schema, const std::string& path) {
    SchemaNode b;
    b.minimum = -std::numeric_limits<double>::infinity();
    b.maximum = std::numeric_limits<double>::infinity();
    bool any = false;
    const auto number = [&](const char* key) -> std::optional<double> {
      const auto it = schema.find(key);
      if (it == schema.end()) return std::nullopt;
      if (!it->is_number() || !std::isfinite(it->get<double>())) fail(path, std::string("'") + key + "' must be a number");
      any = true;
      return it->get<double>();
    };
    if (const auto v = number("minimum")) b.minimum = *v;
    if (const auto v = number("maximum")) b.maximum = *v;
    for (const bool lower : {true, false}) {
      const char* key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (it->is_boolean()) {
        if (!it->get<bool>()) continue;
        if (!schema.contains(lower ? "minimum" : "maximum")) {
          fail(path, std::string("'") + key + "': true needs '" + (lower ? "minimum" : "maximum") + "' beside it");
        }
        (lower ? b.exclusive_minimum : b.exclusive_maximum) = true;
        continue;
      }
      const double v = *number(key);
      if (lower && v >= b.minimum) {
        b.minimum = v;
        b.exclusive_minimum = true;
      } else if (!lower && v <= b.maximum) {
        b.maximum = v;
        b.exclusive_maximum = true;
      }
    }
    if (!any && !b.exclusive_minimum && !b.exclusive_maximum) return std::nullopt;
    return b;
  }

  int32_t literals(const std::vector<ordered_json>& values, const std::string& path) {
    if (values.empty()) fail(path, "'enum' is empty: no value could match");
    LiteralTrie trie;
    for (size_t i = 0; i < values.size(); ++i) trie.add(values[i].dump(), static_cast<int32_t>(i));
    g_.tries.push_back(std::move(trie));
    const int32_t node = new_node(NodeKind::kLiterals, path);
    g_.nodes[static_cast<size_t>(node)].literals = static_cast<int32_t>(g_.tries.size() - 1);
    return node;
  }

  // enum and const: the values (const, or enum's, or those of enum equal to const), less
  // those that an explicit `type`, a string's `minLength`/`maxLength`/`pattern` or a
  // number's bounds beside them refuse;
  // each is then written as its JSON text. (Other keywords beside them are not checked
  // against the values: an enum that holds a value they refuse allows it.)
  int32_t literal_values(const ordered_json& schema, const std::string& path) {
    std::vector<ordered_json> values;
    if (const auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array()) fail(path, "'enum' must be an array");
      values.assign(it->begin(), it->end());
      if (values.empty()) fail(path, "'enum' is empty: no value could match");
      if (const auto c = schema.find("const"); c != schema.end()) {
        std::erase_if(values, [&](const ordered_json& v) { return v.dump() != c->dump(); });
        if (values.empty()) fail(path, "'const' is not among 'enum': no value could match");
      }
    } else {
      values.push_back(schema["const"]);
    }
    for (const char* key : {"anyOf", "oneOf", "$ref"}) {
      if (schema.contains(key)) fail(path, std::string("'enum' or 'const' beside '") + key + "' is not supported");
    }
    std::vector<std::string> types;
    if (const auto it = schema.find("type"); it != schema.end()) {
      if (it->is_string()) types.push_back(it->get<std::string>());
      else if (it->is_array()) for (const auto& t : *it) if (t.is_string()) types.push_back(t.get<std::string>());
    }
    const int32_t min_length = count(schema, "minLength", path, 0);
    const int32_t max_length = count(schema, "maxLength", path, -1);
    const std::optional<SchemaNode> bounds = number_bounds(schema, path);
    const int64_t multiple = multiple_of(schema, path);
    PatternKey unused;
    const BytePattern* text_pattern = automaton(schema, path, 0, -1, unused);  // for checking only
    auto fits = [&](const ordered_json& v) {
      auto is = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
      bool typed = types.empty();
      if (v.is_null()) typed = typed || is("null");
      else if (v.is_boolean()) typed = typed || is("boolean");
      else if (v.is_number()) {
        const bool integral = v.is_number_integer() || std::floor(v.get<double>()) == v.get<double>();
        typed = typed || is("number") || (is("integer") && integral);
        if (bounds) {
          // As a validator compares them: the value as a double (an integer too).
          if (!within_bounds(*bounds, v.get<double>())) return false;
        }
        if (multiple > 0) {
          if (v.is_number_integer()) {
            const uint64_t raw = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
            const uint64_t magnitude = !v.is_number_unsigned() && v.get<int64_t>() < 0 ? 0 - raw : raw;
            if (magnitude % static_cast<uint64_t>(multiple) != 0) return false;
          } else {
            const double x = v.get<double>();
            if (x != std::floor(x) || std::fmod(x, static_cast<double>(multiple)) != 0) return false;
          }
        }
      } else if (v.is_string()) typed = typed || is("string");
      else if (v.is_array()) typed = typed || is("array");
      else if (v.is_object()) typed = typed || is("object");
      if (!typed) return false;
      if (v.is_string()) {
        // Characters as JSON Schema counts them: code points (the UTF-8 lead bytes).
        const std::string& text = v.get_ref<const std::string&>();
        const auto n = static_cast<int32_t>(
            std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; }));
        if (n < min_length || (max_length >= 0 && n > max_length)) return false;
        if (text_pattern != nullptr && !text_pattern->matches(text)) return false;
      }
      return true;
    };
    std::erase_if(values, [&](const ordered_json& v) { return !fits(v); });
    if (values.empty()) fail(path, "no value of 'enum' or 'const' fits the keywords beside it");
    return literals(values, path);
  }

  const ordered_json& resolve(const std::string& ref, const std::string& path) {
    if (ref == "#") return *root_;
    if (ref.rfind("#/", 0) != 0) fail(path, "'$ref' " + ref + " is not supported (only references inside the schema, \"#/...\")");
    const ordered_json* at = root_;
    size_t start = 2;
    while (start <= ref.size()) {
      size_t end = ref.find('/', start);
      if (end == std::string::npos) end = ref.size();
      std::string part = ref.substr(start, end - start);
      for (size_t p = 0; (p = part.find('~', p)) != std::string::npos; ++p) {
        if (p + 1 < part.size() && part[p + 1] == '1') part.replace(p, 2, "/");
        else if (p + 1 < part.size() && part[p + 1] == '0') part.replace(p, 2, "~");
      }
      if (!at->is_object() || !at->contains(part)) fail(path, "'$ref' " + ref + " points to nothing in the schema");
      at = &(*at)[part];
      start = end + 1;
    }
    return *at;
  }

  int32_t compile(const ordered_json& schema, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) fail(path, "nested too deeply (over " + std::to_string(kMaxSchemaDepth) + " levels)");
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return kAnyNode;
      fail(path, "the schema false allows no value");
    }
    if (!schema.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (kRefused.count(key) != 0) {
        fail(path, "'" + key + "' is not supported (this server cannot enforce it while generating)");
      }
    }
    if (const auto it = schema.find("$ref"); it != schema.end()) {
      if (!it->is_string()) fail(path, "'$ref' must be a string");
      for (const auto& [key, value] : schema.items()) {
        if (key != "$ref" && kHandled.count(key) != 0) fail(path, "'$ref' beside '" + key + "' is not supported");
      }
      const std::string ref = it->get<std::string>();
      if (const auto known = refs_.find(ref); known != refs_.end()) return known->second;
      // Reserved before compiling, so that a recursive reference finds it.
      const int32_t node = new_node(NodeKind::kAny, path);
      refs_[ref] = node;
      pending_.insert(node);
      const int32_t target = compile(resolve(ref, path), ref, depth + 1);
      pending_.erase(node);
      if (pending_.count(target) != 0 || target == node) {
        fail(path, "'$ref' " + ref + " leads back to itself without a value in between");
      }
      SchemaNode copy = g_.nodes[static_cast<size_t>(target)];
      g_.nodes[static_cast<size_t>(node)] = std::move(copy);
      return node;
    }
    if (schema.contains("const") || schema.contains("enum")) return literal_values(schema, path);
    for (const char* key : {"anyOf", "oneOf"}) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_array() || it->empty()) fail(path, std::string("'") + key + "' must be a non-empty array");
      for (const auto& [other, value] : schema.items()) {
        if (other != key && kHandled.count(other) != 0) fail(path, std::string("'") + key + "' beside '" + other + "' is not supported");
      }
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < it->size(); ++i) {
        alternatives.push_back(compile((*it)[i], path + "/" + key + "/" + std::to_string(i), depth + 1));
      }
      const int32_t node = new_node(NodeKind::kAnyOf, path);
      g_.nodes[static_cast<size_t>(node)].alternatives = std::move(alternatives);
      return node;
    }
    std::vector<std::string> types;
    if (const auto it = schema.find("type"); it != schema.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const auto& t : *it) {
          if (!t.is_string()) fail(path, "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        fail(path, "'type' must be a string or an array of strings");
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties") || schema.contains("required")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
      types.push_back("array");
    } else if (schema.contains("minLength") || schema.contains("maxLength") || schema.contains("pattern")) {
      types.push_back("string");
    } else if (schema.contains("minimum") || schema.contains("maximum") || schema.contains("exclusiveMinimum") ||
               schema.contains("exclusiveMaximum") || schema.contains("multipleOf")) {
      types.push_back("number");
    } else {
      return kAnyNode;
    }
    std::vector<int32_t> alternatives;
    for (const std::string& type : types) alternatives.push_back(typed(schema, type, path, depth));
    if (alternatives.size() == 1) return alternatives[0];
    const int32_t node = new_node(NodeKind::kAnyOf, path);
    g_.nodes[static_cast<size_t>(node)].alternatives = std::move(alternatives);
    return node;
  }

  int32_t typed(const ordered_json& schema, const std::string& type, const std::string& path, int depth) {
    if (type == "null") return kNullNode;
    if (type == "boolean") return kBooleanNode;
    if (type == "number" || type == "integer") {
      const std::optional<SchemaNode> bounds = number_bounds(schema, path);
      const int64_t multiple = multiple_of(schema, path);
      if (multiple > 0) {
        if (bounds) fail(path, "'multipleOf' beside 'minimum', 'maximum' or their exclusive forms is not supported");
        const int32_t node = new_node(NodeKind::kInteger, path);  // a number then written as an integer
        g_.nodes[static_cast<size_t>(node)].multiple_of = multiple;
        return node;
      }
      if (!bounds && type == "number") return kNumberNode;
      const int32_t node = new_node(type == "integer" ? NodeKind::kInteger : NodeKind::kNumber, path);
      SchemaNode& n = g_.nodes[static_cast<size_t>(node)];
      if (bounds) {
        n.bounded = true;
        n.minimum = bounds->minimum;
        n.maximum = bounds->maximum;
        n.exclusive_minimum = bounds->exclusive_minimum;
        n.exclusive_maximum = bounds->exclusive_maximum;
        if (!bounded_has_value(n)) {
          fail(path, std::string("no ") + (type == "integer" ? "integer" : "number") + " of at most " +
                         std::to_string(kMaxBoundedDigits) + " digits lies within its bounds");
        }
      }
      return node;
    }
    if (type == "string") {
      const int32_t min_length = count(schema, "minLength", path, 0);
      const int32_t max_length = count(schema, "maxLength", path, -1);
      if (max_length >= 0 && min_length > max_length) fail(path, "'minLength' is over 'maxLength'");
      const int32_t automaton = pattern(schema, path, min_length, max_length);
      if (min_length == 0 && max_length < 0 && automaton < 0) return kStringNode;
      const int32_t node = new_node(NodeKind::kString, path);
      SchemaNode& n = g_.nodes[static_cast<size_t>(node)];
      if (automaton >= 0) {
        n.pattern = automaton;  // the lengths are in the automaton
      } else {
        n.min_items = min_length;
        n.max_items = max_length;
      }
      return node;
    }
    if (type == "array") {
      int32_t items = kAnyNode;
      if (const auto it = schema.find("items"); it != schema.end()) {
        if (it->is_array()) fail(path, "'items' as an array (tuple form) is not supported");
        items = compile(*it, path + "/items", depth + 1);
      }
      const int32_t min_items = count(schema, "minItems", path, 0);
      const int32_t max_items = count(schema, "maxItems", path, -1);
      if (max_items >= 0 && min_items > max_items) fail(path, "'minItems' is over 'maxItems'");
      const int32_t node = new_node(NodeKind::kArray, path);
      SchemaNode& n = g_.nodes[static_cast<size_t>(node)];
      n.items = items;
      n.min_items = min_items;
      n.max_items = max_items;
      return node;
    }
    if (type == "object") return object(schema, path, depth);
    fail(path, "unknown type '" + type + "'");
  }

  int32_t object(const ordered_json& schema, const std::string& path, int depth) {
    std::vector<std::string> names;
    std::vector<int32_t> nodes;
    if (const auto it = schema.find("properties"); it != schema.end()) {
      if (!it->is_object()) fail(path, "'properties' must be an object");
      if (it->size() > 10000) fail(path, "over 10,000 properties");
      for (const auto& [name, value] : it->items()) {
        names.push_back(name);
        nodes.push_back(compile(value, path + "/properties/" + name, depth + 1));
      }
    }
    std::vector<uint8_t> required(names.size(), 0);
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) fail(path, "'required' must be an array of property names");
      for (const auto& name : *it) {
        if (!name.is_string()) fail(path, "'required' must be an array of property names");
        const auto at = std::find(names.begin(), names.end(), name.get<std::string>());
        if (at == names.end()) {
          fail(path, "required property '" + name.get<std::string>() + "' is not among 'properties' (declare it there)");
        }
        required[static_cast<size_t>(at - names.begin())] = 1;
      }
    }
    // Left out, additionalProperties counts as false where properties are declared (the
    // OpenAI API's strict mode) and as any value where none are ({"type": "object"}).
    int32_t additional = names.empty() ? kAnyNode : -1;
    if (const auto it = schema.find("additionalProperties"); it != schema.end()) {
      if (it->is_boolean()) {
        additional = it->get<bool>() ? kAnyNode : -1;
      } else {
        additional = compile(*it, path + "/additionalProperties", depth + 1);
      }
    }
    LiteralTrie keys;
    for (size_t i = 0; i < names.size(); ++i) {
      // A key is matched after its opening quote: its JSON text less that quote.
      keys.add(ordered_json(names[i]).dump().substr(1), static_cast<int32_t>(i));
    }
    g_.tries.push_back(std::move(keys));
    const int32_t node = new_node(NodeKind::kObject, path);
    SchemaNode& n = g_.nodes[static_cast<size_t>(node)];
    n.property_nodes = std::move(nodes);
    n.required = std::move(required);
    n.key_trie = static_cast<int32_t>(g_.tries.size() - 1);
    n.additional = additional;
    return node;
  }

  const ordered_json* root_ = nullptr;
  std::set<int32_t> pending_;  // references being compiled
  Grammar g_;
  std::map<std::string, int32_t> refs_;
  std::map<PatternKey, int32_t> patterns_;  // in this grammar
  int64_t pattern_states_ = 0;
  size_t node_base_ = 0;  // parts of the grammar this one's schema will join (a tool's, compiled alone first)
  std::shared_ptr<Automata> automata_;
};

}  // namespace

Grammar compile_json_schema(const ordered_json& schema) {
  Compiler compiler;
  const int32_t root = compiler.compile_root(schema, "#");
  return compiler.take(root);
}

Grammar compile_tool_calls(const std::vector<std::pair<std::string, ordered_json>>& tools) {
  QWENRT_CHECK(!tools.empty(), "a tool-call grammar without tools");
  Compiler compiler;
  const int32_t root = compiler.tool_calls(tools);
  return compiler.take(root);
}

Grammar any_json_object_grammar() { return Compiler().take(kAnyObjectNode); }

// ---- UTF-8 inside strings ----

// States: 0 between characters; 1 one continuation byte to come (80-BF); 2 two (80-BF);
// 3 two after E0 (A0-BF first); 4 two after ED (80-9F first); 5 three (80-BF); 6 three after
// F0 (90-BF first); 7 three after F4 (80-8F first).
int next_utf8_state(int state, uint8_t byte) {
  switch (state) {
    case 0:
      if (byte < 0x80) return 0;
      if (byte >= 0xC2 && byte <= 0xDF) return 1;
      if (byte == 0xE0) return 3;
      if (byte == 0xED) return 4;
      if (byte >= 0xE1 && byte <= 0xEF) return 2;
      if (byte == 0xF0) return 6;
      if (byte >= 0xF1 && byte <= 0xF3) return 5;
      if (byte == 0xF4) return 7;
      return -1;
    case 1: return byte >= 0x80 && byte <= 0xBF ? 0 : -1;
    case 2: return byte >= 0x80 && byte <= 0xBF ? 1 : -1;
    case 3: return byte >= 0xA0 && byte <= 0xBF ? 1 : -1;
    case 4: return byte >= 0x80 && byte <= 0x9F ? 1 : -1;
    case 5: return byte >= 0x80 && byte <= 0xBF ? 2 : -1;
    case 6: return byte >= 0x90 && byte <= 0xBF ? 2 : -1;
    case 7: return byte >= 0x80 && byte <= 0x8F ? 2 : -1;
    default: return -1;
  }
}

int plain_string_byte(int state, uint8_t byte) {
  if (byte == '"' || byte == '\\' || byte < 0x20) return -1;
  return next_utf8_state(state, byte);
}

// ---- the matcher ----

namespace {

enum FrameType : uint8_t { kRootEnd, kValue, kObject, kKey, kArray, kString, kNumber, kLiteral };

// A string's content state (Frame::state of kString and kKey): 0-7 UTF-8 states, then the
// escape states.
constexpr uint8_t kAfterBackslash = 8;
constexpr uint8_t kHex1 = 9;  // 9..12: hex digits of \uXXXX still to come, 4..1

enum ObjectState : uint8_t { kObjOpen, kObjAfterComma, kObjColon, kObjAfterValue };
enum ArrayState : uint8_t { kArrOpen, kArrAfterComma, kArrAfterValue };

bool is_ws(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// A string's content after `byte` from content state `state`: the new state, or -1 when the
// byte is refused; `closed` when it was the closing quote; `started` when it began a character.
// With `value` (a string's frame), \uXXXX escapes are decoded: a high surrogate must be
// followed by an escaped low one (the pair is one character), a low one alone is refused;
// *value holds the digits read so far, and is 0 between characters.
constexpr uint8_t kAfterHighSurrogate = 13;  // "\" of the low surrogate to come
constexpr uint8_t kLowSurrogateU = 14;       // its "u"
constexpr uint8_t kLowHex1 = 15;             // 15..18: its hex digits

int hex_value(uint8_t b) { return is_digit(b) ? b - '0' : (b | 0x20) - 'a' + 10; }

int string_byte(uint8_t state, uint8_t byte, bool& closed, bool& started, int32_t* value) {
  closed = false;
  started = false;
  if (state == kAfterBackslash) {
    if (byte == 'u') {
      if (value != nullptr) *value = 0;
      return kHex1;
    }
    return std::strchr("\"\\/bfnrt", byte) != nullptr && byte != 0 ? 0 : -1;
  }
  if (state == kAfterHighSurrogate) return byte == '\\' ? kLowSurrogateU : -1;
  if (state == kLowSurrogateU) {
    if (byte != 'u') return -1;
    *value = 0;
    return kLowHex1;
  }
  if (state >= kHex1) {
    if (!is_hex(byte)) return -1;
    // The low half of a pair is DC00-DFFF: its first digits are fixed on the way, so that no
    // digit is taken that no ending could make one.
    if (state == kLowHex1 && hex_value(byte) != 0xD) return -1;
    if (state == kLowHex1 + 1 && hex_value(byte) < 0xC) return -1;
    // Nor does a first escape start a low half (DC00-DFFF alone is refused at its end).
    if (state == kHex1 + 1 && value != nullptr && *value == 0xD && hex_value(byte) >= 0xC) return -1;
    const bool low = state >= kLowHex1;
    const uint8_t last = low ? kLowHex1 + 3 : kHex1 + 3;
    if (value == nullptr) return state == last ? 0 : state + 1;
    *value = *value * 16 + hex_value(byte);
    if (state != last) return state + 1;
    const int32_t code = *value;
    *value = 0;
    if (low) return code >= 0xDC00 && code <= 0xDFFF ? 0 : -1;
    if (code >= 0xD800 && code <= 0xDBFF) return kAfterHighSurrogate;
    return code >= 0xDC00 && code <= 0xDFFF ? -1 : 0;
  }
  if (state == 0) {
    if (byte == '"') {
      closed = true;
      return 0;
    }
    if (byte == '\\') {
      started = true;
      return kAfterBackslash;
    }
    if (byte < 0x20) return -1;
    const int next = next_utf8_state(0, byte);
    if (next >= 0) started = true;
    return next;
  }
  return next_utf8_state(state, byte);
}

// The fewest digits that, written after digits whose value is r modulo k, make a multiple
// of k (0 where r is 0). Appending m digits gives r·10^m + x for any x below 10^m, so m
// digits suffice where the x that completes r·10^m to a multiple is below 10^m.
int digits_to_multiple(int64_t r, int64_t k) {
  if (r == 0) return 0;
  int64_t power = 1, power_mod = 1 % k;  // 10^m (capped), 10^m mod k
  for (int m = 1; m <= 19; ++m) {
    power = std::min<int64_t>(power * 10, int64_t{1} << 40);
    power_mod = power_mod * 10 % k;
    const int64_t x = (k - r * power_mod % k) % k;
    if (x < power) return m;
  }
  return kMaxNumberBytes + 1;
}

// A digit of an integer under multipleOf after a sign (or before any byte: Frame::a 0) or
// after digits: Frame::b keeps the value modulo it. False where no multiple could then be
// written within the number's bytes.
bool multiple_digit(const SchemaNode& node, Frame& f, uint8_t byte) {
  const int64_t r = (int64_t{f.b} * 10 + (byte - '0')) % node.multiple_of;
  if (f.a + 1 + digits_to_multiple(r, node.multiple_of) > kMaxNumberBytes) return false;
  f.state = static_cast<uint8_t>(f.state == kNumMinus && byte == '0' ? kNumZero : kNumInt);
  f.a += 1;
  f.b = static_cast<int32_t>(r);
  return true;
}

// A string with a pattern (Frame::a: the automaton's state, Frame::b: the characters read,
// as BytePattern counts them; Frame::state: where in an escape, Frame::ws: the escape's digit
// so far). Its bytes are decoded (escapes into the characters they stand for) and fed to the
// automaton, which takes only what some string that fits can follow. "\uXXXX" is taken only
// for control characters ("\u00" and two digits), which JSON has no other way to write: any
// other character comes as itself, so the escape's digits never lead where no string ends.
enum PatternEscape : uint8_t { kPatPlain, kPatBackslash, kPatU, kPatU0, kPatU00, kPatU00X };

// Feeds `byte` to `f`; false when it is refused, `closed` when it was the closing quote.
bool pattern_string_byte(const BytePattern& p, Frame& f, uint8_t byte, bool& closed) {
  auto feed = [&](uint8_t decoded) {
    if (!p.step(f.a, f.b, decoded)) return false;
    f.state = kPatPlain;
    return true;
  };
  auto takes = [&](uint8_t decoded) {
    int32_t state = f.a, count = f.b;
    return p.step(state, count, decoded);
  };
  switch (f.state) {
    case kPatPlain:
      if (byte == '"') {
        if (!p.accepting(f.a, f.b)) return false;
        closed = true;
        return true;
      }
      if (byte == '\\') {
        if (!takes('"') && !takes('\\') && !takes('/') && p.controls(f.a, f.b) == 0) return false;
        f.state = kPatBackslash;
        return true;
      }
      if (byte < 0x20) return false;
      return feed(byte);
    case kPatBackslash:
      switch (byte) {
        case '"': case '\\': case '/': return feed(byte);
        case 'b': return feed('\b');
        case 'f': return feed('\f');
        case 'n': return feed('\n');
        case 'r': return feed('\r');
        case 't': return feed('\t');
        case 'u':
          if (p.controls(f.a, f.b) == 0) return false;
          f.state = kPatU;
          return true;
        default: return false;
      }
    case kPatU:
    case kPatU0:
      if (byte != '0') return false;
      f.state = f.state == kPatU ? kPatU0 : kPatU00;
      return true;
    case kPatU00:
      if (byte != '0' && byte != '1') return false;
      if ((p.controls(f.a, f.b) >> (byte == '1' ? 16 : 0) & 0xFFFF) == 0) return false;
      f.ws = static_cast<uint16_t>(byte - '0');
      f.state = kPatU00X;
      return true;
    case kPatU00X: {
      if (!is_hex(byte)) return false;
      const auto decoded = static_cast<uint8_t>(f.ws * 16 + hex_value(byte));
      if (!feed(decoded)) return false;
      f.ws = 0;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

bool Stack::operator==(const Stack& other) const {
  return depth == other.depth &&
         std::memcmp(frames.data(), other.frames.data(), static_cast<size_t>(depth) * sizeof(Frame)) == 0;
}

JsonMatcher::JsonMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {}

namespace {

uint64_t stack_hash(const Stack& stack) {
  static_assert(sizeof(Frame) == 16);
  uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(stack.depth + 1);
  for (int i = 0; i < stack.depth; ++i) {
    uint64_t words[2];
    std::memcpy(words, &stack.frames[static_cast<size_t>(i)], sizeof(words));
    h = (h ^ words[0]) * 0xFF51AFD7ED558CCDull;
    h = (h ^ (h >> 29) ^ words[1]) * 0xC4CEB9FE1A85EC53ull;
  }
  return h ^ (h >> 32);
}

}  // namespace

// Hashes first: a state may hold up to kMaxAlternatives stacks, and the vocabulary mask adds
// each of them at every trie node it walks.
void add_stack(MatchState& out, const Stack& stack) {
  static_assert(kMaxAlternatives < 255 && (kMaxAlternatives & (kMaxAlternatives - 1)) == 0);
  constexpr size_t kSlots = 2 * kMaxAlternatives;
  const uint64_t hash = stack_hash(stack);
  size_t slot = hash % kSlots;
  for (; out.slots[slot] != 0; slot = (slot + 1) % kSlots) {
    const size_t i = out.slots[slot] - 1u;
    if (out.hashes[i] == hash && out.storage[i] == stack) return;
  }
  if (out.count < static_cast<size_t>(kMaxAlternatives)) {
    if (out.count == out.storage.size()) out.storage.emplace_back();
    out.storage[out.count] = stack;
    out.hashes[out.count] = hash;
    out.slots[slot] = static_cast<uint8_t>(++out.count);
  }
}

namespace {

// 1: `byte` is whitespace the frame takes; -1: whitespace refused there; 0: not whitespace.
// Around the root value (`outer`, or a grammar with free whitespace) any whitespace up to
// kMaxWhitespace bytes; between the tokens inside it, what JSON writers put there: nothing,
// one space, or one line break ("\n" or "\r\n") and an indent of spaces and tabs. Frame::ws
// then holds 0 (nothing yet), 1 (a space: the gap is done), 2 (after "\r"), or 3 + the
// indent's length.
constexpr uint16_t kAfterCarriageReturn = 2;

int whitespace(Frame& f, uint8_t byte, bool free) {
  if (!is_ws(byte)) return 0;
  if (free) return ++f.ws <= kMaxWhitespace ? 1 : -1;
  int next = -1;
  if (f.ws == 0) next = byte == ' ' ? 1 : byte == '\n' ? 3 : byte == '\r' ? 2 : -1;
  else if (f.ws == 2) next = byte == '\n' ? 3 : -1;
  else if (f.ws >= 3 && (byte == ' ' || byte == '\t') && f.ws - 3 < kMaxIndent) next = f.ws + 1;
  if (next < 0) return -1;
  f.ws = static_cast<uint16_t>(next);
  return 1;
}

}  // namespace

MatchState JsonMatcher::start() const {
  MatchState state;
  Stack stack;
  stack.frames[0] = Frame{kRootEnd, 0, 0, 0, 0, 0};
  stack.frames[1] = Frame{kValue, 0, 0, grammar_->root, 0, 0};
  stack.depth = 2;
  add_stack(state, stack);
  return state;
}

// Feeds one byte to one stack; each stack it may become goes to `out`.
void JsonMatcher::step(const Stack& in, uint8_t byte, MatchState& out) const {
  const Grammar& g = *grammar_;
  // Alternatives met on the way (anyOf) are stepped through `pending`.
  Stack stack = in;
  for (;;) {
    if (stack.depth == 0) return;
    Frame& f = stack.frames[static_cast<size_t>(stack.depth - 1)];
    const SchemaNode& node = g.nodes[static_cast<size_t>(f.node)];
    switch (f.type) {
      case kRootEnd:
        if (whitespace(f, byte, true) > 0) add_stack(out, stack);
        return;
      case kValue: {
        const bool free = g.free_whitespace || stack.depth == 2;
        if (const int ws = whitespace(f, byte, free); ws != 0) {
          if (ws > 0) add_stack(out, stack);
          return;
        }
        if (!free && f.ws == kAfterCarriageReturn) return;  // "\r" without its "\n"
        const uint16_t ws = f.ws;
        switch (node.kind) {
          case NodeKind::kAnyOf:
            for (const int32_t alternative : node.alternatives) {
              if (stack.depth - 1 + g.nodes[static_cast<size_t>(alternative)].min_frames > kMaxDepth) continue;
              Stack branch = stack;
              branch.frames[static_cast<size_t>(branch.depth - 1)] = Frame{kValue, 0, ws, alternative, 0, 0};
              step(branch, byte, out);
            }
            return;
          case NodeKind::kAny: {
            int32_t next = -1;
            if (byte == '{') next = kAnyObjectNode;
            else if (byte == '[') next = kAnyArrayNode;
            else if (byte == '"') next = kStringNode;
            else if (byte == '-' || is_digit(byte)) next = kNumberNode;
            else if (byte == 't' || byte == 'f') next = kBooleanNode;
            else if (byte == 'n') next = kNullNode;
            if (next < 0) return;
            f = Frame{kValue, 0, ws, next, 0, 0};
            continue;
          }
          case NodeKind::kObject:
            if (byte != '{') return;
            f = Frame{kObject, kObjOpen, 0, f.node, 0, -1};
            add_stack(out, stack);
            return;
          case NodeKind::kArray:
            if (byte != '[') return;
            f = Frame{kArray, kArrOpen, 0, f.node, 0, 0};
            add_stack(out, stack);
            return;
          case NodeKind::kString:
            if (byte != '"') return;
            f = Frame{kString, 0, 0, f.node, 0, 0};
            add_stack(out, stack);
            return;
          case NodeKind::kNumber:
          case NodeKind::kInteger:
            if (node.bounded) {
              Decimal d;
              const int next = bounded_number_start(node, byte, d);
              if (next < 0) return;
              f = Frame{kNumber, static_cast<uint8_t>(next), 0, f.node, 0, 0};
              write_decimal(f, d);
              add_stack(out, stack);
              return;
            }
            if (byte == '-') f = Frame{kNumber, kNumMinus, 0, f.node, 1, 0};
            else if (byte == '0') f = Frame{kNumber, kNumZero, 0, f.node, 1, 0};
            else if (is_digit(byte)) f = Frame{kNumber, kNumInt, 0, f.node, 1, 0};
            else return;
            if (node.multiple_of > 0 && f.state != kNumMinus) {
              // The first digit, as after a sign: no bytes yet, the value 0 so far.
              f = Frame{kNumber, kNumMinus, 0, f.node, 0, 0};
              if (!multiple_digit(node, f, byte)) return;
            }
            add_stack(out, stack);
            return;
          case NodeKind::kLiterals: {
            const int32_t next = g.tries[static_cast<size_t>(node.literals)].child(0, byte);
            if (next < 0) return;
            f = Frame{kLiteral, 0, 0, f.node, next, 0};
            const LiteralTrie::Node& at = g.tries[static_cast<size_t>(node.literals)].nodes[static_cast<size_t>(next)];
            if (at.tag >= 0 && at.children.empty()) --stack.depth;
            add_stack(out, stack);
            return;
          }
        }
        return;
      }
      case kLiteral: {
        const LiteralTrie& trie = g.tries[static_cast<size_t>(node.literals)];
        const int32_t next = trie.child(f.a, byte);
        if (next >= 0) {
          f.a = next;
          const LiteralTrie::Node& at = trie.nodes[static_cast<size_t>(next)];
          if (at.tag >= 0 && at.children.empty()) --stack.depth;
          add_stack(out, stack);
          return;
        }
        if (trie.nodes[static_cast<size_t>(f.a)].tag < 0) return;
        --stack.depth;  // complete; the byte is the parent's
        continue;
      }
      case kNumber: {
        if (node.bounded) {
          Decimal d = read_decimal(f);
          bool ends = false;
          const int next = bounded_number_byte(node, f.state, byte, d, ends);
          if (ends) {
            --stack.depth;  // complete; the byte is the parent's
            continue;
          }
          if (next < 0) return;
          f.state = static_cast<uint8_t>(next);
          write_decimal(f, d);
          add_stack(out, stack);
          return;
        }
        if (node.multiple_of > 0) {
          // An integer that must be a multiple: a digit only where one can still be
          // written in the bytes left, the end only at one.
          if (is_digit(byte) && (f.state == kNumMinus || f.state == kNumInt)) {
            if (multiple_digit(node, f, byte)) add_stack(out, stack);
            return;
          }
          if ((f.state != kNumZero && f.state != kNumInt) || f.b != 0) return;
          --stack.depth;  // complete; the byte is the parent's
          continue;
        }
        const bool integer = node.kind == NodeKind::kInteger;
        int next = -1;
        bool ends = false;
        switch (f.state) {
          case kNumMinus: next = byte == '0' ? kNumZero : is_digit(byte) ? kNumInt : -1; break;
          case kNumZero:
          case kNumInt:
          case kNumFrac:
            if (f.state == kNumInt && is_digit(byte)) next = kNumInt;
            else if (f.state == kNumFrac && is_digit(byte)) next = kNumFrac;
            else if (byte == '.' && f.state != kNumFrac && !integer) next = kNumDot;
            else if ((byte == 'e' || byte == 'E') && !integer) next = kNumE;
            else ends = true;
            break;
          case kNumDot: next = is_digit(byte) ? kNumFrac : -1; break;
          case kNumE: next = byte == '+' || byte == '-' ? kNumESign : is_digit(byte) ? kNumExp : -1; break;
          case kNumESign: next = is_digit(byte) ? kNumExp : -1; break;
          case kNumExp:
            // At most kMaxExponentDigits: every number written stays a finite double.
            if (is_digit(byte)) next = f.b < kMaxExponentDigits ? kNumExp : -1;
            else ends = true;
            break;
          default: return;
        }
        if (ends) {
          --stack.depth;  // complete; the byte is the parent's
          continue;
        }
        if (next < 0 || ++f.a > kMaxNumberBytes) return;
        // A sign, point or exponent mark needs a digit after it: room for one more byte.
        const bool unfinished = next == kNumDot || next == kNumE || next == kNumESign;
        if (unfinished && f.a + 1 > kMaxNumberBytes) return;
        if (next == kNumExp) ++f.b;
        f.state = static_cast<uint8_t>(next);
        add_stack(out, stack);
        return;
      }
      case kString: {
        if (node.pattern >= 0) {
          bool closed = false;
          if (pattern_string_byte(g.patterns[static_cast<size_t>(node.pattern)], f, byte, closed)) {
            if (closed) --stack.depth;
            add_stack(out, stack);
          }
          return;
        }
        bool closed = false, started = false;
        const int next = string_byte(f.state, byte, closed, started, &f.b);
        if (next < 0) return;
        if (closed) {
          if (f.a < node.min_items) return;
          --stack.depth;
          add_stack(out, stack);
          return;
        }
        // Characters are counted only where the schema bounds them (a free string's frame
        // stays the same through plain text: the vocabulary mask's shortcut needs that).
        if (started && (node.min_items > 0 || node.max_items >= 0)) {
          if (node.max_items >= 0 && f.a >= node.max_items) return;
          f.a = std::min(f.a + 1, 1 << 30);
        }
        f.state = static_cast<uint8_t>(next);
        add_stack(out, stack);
        return;
      }
      case kKey: {
        // f.node: the object; f.a: the position in its name trie (-1: off the names);
        // f.b: the parent object's declared names allowed here, packed lo << 16 | hi (hi
        // 0xFFFF: none).
        Frame& parent = stack.frames[static_cast<size_t>(stack.depth - 2)];
        const int32_t lo = f.b >> 16, hi = f.b & 0xFFFF;
        bool closed = false, started = false;
        // \uXXXX escapes are decoded as in values (a lone surrogate is refused); their digits
        // so far are kept in the frame's whitespace count, which a key does not use.
        int32_t escaped = f.ws;
        const int next_state = string_byte(f.state, byte, closed, started, &escaped);
        if (next_state < 0) return;
        f.ws = static_cast<uint16_t>(escaped);
        // The value's frame will take the key's place: it must fit the depth left.
        const auto fits = [&](int32_t value) {
          return stack.depth - 1 + g.nodes[static_cast<size_t>(value)].min_frames <= kMaxDepth;
        };
        if (f.a >= 0) {
          const LiteralTrie& names = g.tries[static_cast<size_t>(node.key_trie)];
          const int32_t next = names.child(f.a, byte);
          if (next >= 0) {
            // Some name below may come here and its value fits.
            bool allowed_below = false;
            if (hi != 0xFFFF && names.has_tag_in(next, lo, hi)) {
              const std::vector<int32_t>& tags = names.nodes[static_cast<size_t>(next)].tags;
              for (auto t = std::lower_bound(tags.begin(), tags.end(), lo); t != tags.end() && *t <= hi && !allowed_below; ++t) {
                allowed_below = fits(node.property_nodes[static_cast<size_t>(*t)]);
              }
            }
            if (closed) {
              // A declared name, whole: its property if it may come here, else refused (a
              // name repeated or out of its order is never another key).
              const int32_t tag = names.nodes[static_cast<size_t>(next)].tag;
              const int32_t value = node.property_nodes[static_cast<size_t>(tag)];
              if (!allowed_below || tag < lo || tag > hi || !fits(value)) return;
              parent.a = tag + 1;
              parent.b = value;
              parent.state = kObjColon;
              --stack.depth;
              add_stack(out, stack);
              return;
            }
            if (!allowed_below && node.additional < 0) return;
            f.a = next;
            f.state = static_cast<uint8_t>(next_state);
            add_stack(out, stack);
            return;
          }
          // Off the names: another key, where the schema allows them. Not by an escape: that
          // could spell a declared name another way ("\u0061ge" for "age", whose value would
          // then go unchecked). Past the first byte no name has there, escapes are free.
          if (byte == '\\' || f.state >= kAfterBackslash) return;
          f.a = -1;
        }
        if (node.additional < 0) return;
        if (closed) {
          if (!fits(node.additional)) return;
          parent.b = node.additional;
          parent.state = kObjColon;
          --stack.depth;
        } else {
          f.state = static_cast<uint8_t>(next_state);
        }
        add_stack(out, stack);
        return;
      }
      case kObject: {
        // f.a: the next declared property that may come; f.b: the schema of the value after
        // the colon.
        const auto properties = static_cast<int32_t>(node.property_nodes.size());
        // The names allowed next: a..last, no required one skipped.
        const int32_t next_required = node.next_required[static_cast<size_t>(f.a)];
        const int32_t last = next_required < properties ? next_required : properties - 1;
        const bool required_left = next_required < properties;
        // A key may open only where one can finish with a value that fits the depth left
        // (the value takes the key's frame, one above this object's).
        const auto key_may_come = [&] {
          const auto fits = [&](int32_t value) {
            return stack.depth + g.nodes[static_cast<size_t>(value)].min_frames <= kMaxDepth;
          };
          if (node.additional >= 0 && fits(node.additional)) return true;
          for (int32_t i = f.a; i <= last; ++i) {
            if (fits(node.property_nodes[static_cast<size_t>(i)])) return true;
          }
          return false;
        };
        if (const int ws = whitespace(f, byte, g.free_whitespace); ws != 0) {
          if (ws > 0) add_stack(out, stack);
          return;
        }
        if (!g.free_whitespace && f.ws == kAfterCarriageReturn) return;  // "\r" without its "\n"
        f.ws = 0;
        switch (f.state) {
          case kObjOpen:
          case kObjAfterComma:
            if (byte == '"' && key_may_come()) {
              if (stack.depth >= kMaxDepth) return;
              const int32_t range = f.a < properties ? (f.a << 16 | last) : 0xFFFF;
              const int32_t on_names = properties > 0 && node.key_trie >= 0 ? 0 : -1;
              stack.frames[static_cast<size_t>(stack.depth)] = Frame{kKey, 0, 0, f.node, on_names, range};
              ++stack.depth;
              add_stack(out, stack);
            } else if (byte == '}' && f.state == kObjOpen && !required_left) {
              --stack.depth;
              add_stack(out, stack);
            }
            return;
          case kObjColon:
            if (byte != ':' || stack.depth >= kMaxDepth) return;
            f.state = kObjAfterValue;
            stack.frames[static_cast<size_t>(stack.depth)] = Frame{kValue, 0, 0, f.b, 0, 0};
            ++stack.depth;
            add_stack(out, stack);
            return;
          case kObjAfterValue:
            if (byte == ',' && key_may_come()) {
              f.state = kObjAfterComma;
              add_stack(out, stack);
            } else if (byte == '}' && !required_left) {
              --stack.depth;
              add_stack(out, stack);
            }
            return;
          default: return;
        }
      }
      case kArray: {
        if (const int ws = whitespace(f, byte, g.free_whitespace); ws != 0) {
          if (ws > 0) add_stack(out, stack);
          return;
        }
        if (!g.free_whitespace && f.ws == kAfterCarriageReturn) return;  // "\r" without its "\n"
        f.ws = 0;
        const bool more = node.max_items < 0 || f.a < node.max_items;
        if (f.state == kArrAfterValue) {
          if (byte == ',' && more) {
            f.state = kArrAfterComma;
            add_stack(out, stack);
          } else if (byte == ']' && f.a >= node.min_items) {
            --stack.depth;
            add_stack(out, stack);
          }
          return;
        }
        if (f.state == kArrOpen && byte == ']') {
          if (node.min_items == 0) {
            --stack.depth;
            add_stack(out, stack);
          }
          return;
        }
        if (!more || stack.depth + g.nodes[static_cast<size_t>(node.items)].min_frames > kMaxDepth) return;
        ++f.a;
        f.state = kArrAfterValue;
        stack.frames[static_cast<size_t>(stack.depth)] = Frame{kValue, 0, 0, node.items, 0, 0};
        ++stack.depth;
        continue;  // the byte starts the item
      }
      default:
        return;
    }
  }
}

void JsonMatcher::advance(const MatchState& in, uint8_t byte, MatchState& out) const {
  out.clear();
  for (const Stack& stack : in.stacks()) step(stack, byte, out);
}

bool JsonMatcher::advance_all(MatchState& state, std::string_view bytes) const {
  MatchState next;
  for (const char c : bytes) {
    advance(state, static_cast<uint8_t>(c), next);
    std::swap(state, next);
    if (state.dead()) return false;
  }
  return true;
}

namespace {

// The stack with its finished number or literal on top taken off (they end only when the
// next byte is not theirs); false when the top cannot end here.
bool settle(const Grammar& g, Stack& stack) {
  while (stack.depth > 0) {
    const Frame& f = stack.frames[static_cast<size_t>(stack.depth - 1)];
    if (f.type == kNumber) {
      if (f.state != kNumZero && f.state != kNumInt && f.state != kNumFrac && f.state != kNumExp) return false;
      const SchemaNode& node = g.nodes[static_cast<size_t>(f.node)];
      if (node.multiple_of > 0 && f.b != 0) return false;
      if (node.bounded) {
        const Decimal d = read_decimal(f);
        if (!fits(node, d.negative, d.digits, d.fraction)) return false;
      }
      --stack.depth;
    } else if (f.type == kLiteral) {
      const SchemaNode& node = g.nodes[static_cast<size_t>(f.node)];
      if (g.tries[static_cast<size_t>(node.literals)].nodes[static_cast<size_t>(f.a)].tag < 0) return false;
      --stack.depth;
    } else {
      return true;
    }
  }
  return true;
}

}  // namespace

bool JsonMatcher::accepting(const MatchState& state) const {
  for (Stack stack : state.stacks()) {
    if (settle(*grammar_, stack) && stack.depth == 1 && stack.frames[0].type == kRootEnd) return true;
  }
  return false;
}

const BytePattern* JsonMatcher::pattern_string(const Stack& stack, int32_t& state, int32_t& count) const {
  const Frame& top = stack.frames[static_cast<size_t>(stack.depth - 1)];
  if (top.type != kString || top.state != kPatPlain) return nullptr;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(top.node)];
  if (node.pattern < 0) return nullptr;
  state = top.a;
  count = top.b;
  return &grammar_->patterns[static_cast<size_t>(node.pattern)];
}

int JsonMatcher::free_string(const Stack& stack, int32_t& room) const {
  const Frame& top = stack.frames[static_cast<size_t>(stack.depth - 1)];
  if (top.state >= kUtf8States) return -1;
  if (top.type == kKey && top.a < 0) {
    room = INT32_MAX;  // a key off the declared names: any key
    return top.state;
  }
  if (top.type == kString) {
    const SchemaNode& node = grammar_->nodes[static_cast<size_t>(top.node)];
    if (node.pattern >= 0) return -1;  // its bytes go through its automaton
    room = node.max_items >= 0 ? node.max_items - top.a : INT32_MAX;
    return top.state;
  }
  return -1;
}

}  // namespace qwenrt::structured
