#include "tokenizer/chat_template/gcc_workarounds.h"  // first: see there

#include "tokenizer/chat_template/parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "tokenizer/chat_template/lexer.h"

namespace qwenrt::chat_template {

namespace {

// Deeper nesting than this is not a real template; refusing it keeps the recursion bounded.
constexpr int kMaxNesting = 200;
// Height of one expression tree. Operator chains (a + b + c ...) nest without parser
// recursion, so their height is checked separately; jinja2 fails near 200 as well.
constexpr int kMaxExprDepth = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Template run() {
    Template tmpl;
    tmpl.body = parse_body({});
    return tmpl;
  }

 private:
  // ---- token helpers ----
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[pos_ + ahead < tokens_.size() ? pos_ + ahead : tokens_.size() - 1];
  }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return current().type == TokenType::kOperator && current().text == op; }
  bool is_name(const char* name) const { return current().type == TokenType::kName && current().text == name; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block '%}'";
      case TokenType::kVarEnd: return "end of print statement '}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kData: return "template data";
      case TokenType::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }

  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    throw Error(ErrorCategory::kInvalidModel,
                "chat template syntax error at " + where(at.line, at.column) + ": " + message);
  }
  [[noreturn]] void unsupported(const Token& at, const std::string& construct) const {
    throw Error(ErrorCategory::kUnsupported,
                "chat template at " + where(at.line, at.column) + ": " + construct + " is not supported");
  }

  void expect_op(const char* op) {
    if (!is_op(op)) fail(current(), std::string("expected '") + op + "', got " + describe(current()));
    advance();
  }
  std::string expect_name() {
    if (current().type != TokenType::kName) fail(current(), "expected a name, got " + describe(current()));
    return advance().text;
  }
  void expect_block_end() {
    if (current().type != TokenType::kBlockEnd) fail(current(), "expected end of statement block, got " + describe(current()));
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.fail(parser.current(), "template nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // Records the subtree height of a node whose children are complete; refuses deep trees.
  ExprPtr finish(ExprPtr e) {
    int height = 0;
    for (const auto& child : e->children) {
      if (child) height = std::max(height, child->depth);
    }
    for (const auto& [key, value] : e->keywords) height = std::max(height, value->depth);
    e->depth = height + 1;
    if (e->depth > kMaxExprDepth) {
      throw Error(ErrorCategory::kInvalidModel, "chat template syntax error at " + where(e->line, e->column) +
                                                    ": expression nested too deeply");
    }
    return e;
  }

  ExprPtr make(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  StmtPtr make_stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    return s;
  }

  // ---- statements ----

  // Parses until a `{% name %}` tag whose name is in `end_names`; leaves pos_ on that name.
  Body parse_body(std::initializer_list<const char*> end_names) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = current();
      switch (t.type) {
        case TokenType::kData: {
          auto s = make_stmt(StmtKind::kText, t);
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenType::kVarBegin: {
          advance();
          auto s = make_stmt(StmtKind::kOutput, t);
          s->expr = parse_tuple(true, {});
          if (current().type != TokenType::kVarEnd) fail(current(), "expected end of print statement, got " + describe(current()));
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          const Token& name = peek();
          if (name.type != TokenType::kName) fail(name, "expected a tag name, got " + describe(name));
          for (const char* end : end_names) {
            if (name.text == end) {
              advance();  // now on the name
              return body;
            }
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        case TokenType::kEof: {
          if (end_names.size() != 0) {
            std::string expected;
            for (const char* end : end_names) expected += (expected.empty() ? "'" : " or '") + std::string(end) + "'";
            fail(t, "unexpected end of template, expected " + expected);
          }
          return body;
        }
        default: fail(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = current();
    const std::string& name = t.text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(t, "'" + name + "' outside of a loop");
      advance();
      expect_block_end();
      return make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, t);
    }
    if (name == "generation") {
      advance();
      expect_block_end();
      auto s = make_stmt(StmtKind::kBlock, t);
      s->body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    if (name == "with") return parse_with();
    static constexpr const char* kUnsupported[] = {"extends", "include", "import", "from", "block",
                                                   "autoescape", "do", "trans", "pluralize"};
    for (const char* tag : kUnsupported) {
      if (name == tag) unsupported(t, "the '" + name + "' tag");
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") fail(t, "unexpected '" + name + "' tag");
    fail(t, "unknown tag '" + name + "'");
  }

  StmtPtr parse_if() {
    auto s = make_stmt(StmtKind::kIf, current());
    advance();  // if
    while (true) {
      s->conditions.push_back(parse_tuple(true, {}));
      expect_block_end();
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      const std::string tag = advance().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        advance();
      }
      break;
    }
    expect_block_end();
    return s;
  }

  // Assignment targets: `a`, `a, b`, `(a, b)`.
  void parse_targets(Stmt& s) {
    auto read_list = [&](bool parenthesised) {
      while (true) {
        if (is_op("(")) unsupported(current(), "nested tuple unpacking");
        s.targets.push_back(expect_name());
        if (!is_op(",")) break;
        s.unpack = true;
        advance();
        if (parenthesised ? is_op(")") : (is_name("in") || is_op("="))) break;
      }
    };
    if (is_op("(")) {
      advance();
      s.unpack = true;
      read_list(true);
      expect_op(")");
    } else {
      read_list(false);
    }
  }

  StmtPtr parse_with() {
    auto s = make_stmt(StmtKind::kWith, current());
    advance();  // with
    while (current().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->conditions.push_back(parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_for() {
    auto s = make_stmt(StmtKind::kFor, current());
    advance();  // for
    parse_targets(*s);
    if (!is_name("in")) fail(current(), "expected 'in', got " + describe(current()));
    advance();
    s->expr = parse_tuple(false, {"recursive"});
    if (is_name("if")) {
      advance();
      s->condition = parse_expression(true);
    }
    if (is_name("recursive")) unsupported(current(), "recursive for loops");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (advance().text == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
      advance();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token& start = current();
    advance();  // set
    if (current().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == ".") {
      auto s = make_stmt(StmtKind::kSet, start);
      s->name = advance().text;
      advance();  // .
      s->attribute = expect_name();
      expect_op("=");
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    auto s = make_stmt(StmtKind::kSet, start);
    parse_targets(*s);
    if (is_op("=")) {
      advance();
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    if (s->unpack) fail(current(), "expected '=' after the assignment targets");
    s->kind = StmtKind::kSetBlock;
    s->name = s->targets[0];
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_body({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (is_op("=")) {
        advance();
        p.default_value = parse_expression(true);
      }
      s.params.push_back(std::move(p));
    }
    advance();
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(StmtKind::kMacro, current());
    advance();  // macro
    s->name = expect_name();
    parse_params(*s);
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved_loops;
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(StmtKind::kCallBlock, current());
    advance();  // call
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail(current(), "expected a call after 'call'");
    expect_block_end();
    s->body = parse_body({"endcall"});
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(StmtKind::kFilterBlock, current());
    advance();  // filter
    s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    s->body = parse_body({"endfilter"});
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  bool at_tuple_end(std::initializer_list<const char*> extra_end) const {
    const Token& t = current();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kOperator && t.text == ")") return true;
    for (const char* name : extra_end) {
      if (t.type == TokenType::kName && t.text == name) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool with_condition, std::initializer_list<const char*> extra_end,
                      bool explicit_parentheses = false) {
    const Token& start = current();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condition));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail(current(), "expected an expression, got " + describe(current()));
    }
    auto e = make(ExprKind::kTuple, start);
    e->children = std::move(items);
    return finish(std::move(e));
  }

  ExprPtr parse_expression(bool with_condition) {
    DepthGuard guard(*this);
    if (!with_condition) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& at = advance();
      auto cond = make(ExprKind::kCondition, at);
      cond->children.push_back(parse_or());
      cond->children.push_back(std::move(expr));
      if (is_name("else")) {
        advance();
        cond->children.push_back(parse_expression(true));
      } else {
        cond->children.push_back(nullptr);
      }
      expr = finish(std::move(cond));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = "") {
    auto e = make(kind, at);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return finish(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = advance();
      left = binary(ExprKind::kOr, at, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = advance();
      left = binary(ExprKind::kAnd, at, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      const Token& at = advance();
      auto e = make(ExprKind::kNot, at);
      e->children.push_back(parse_not());
      return finish(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& start = current();
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      const Token& t = current();
      std::string op;
      if (t.type == TokenType::kOperator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(ExprKind::kCompare, start);
    e->children.push_back(std::move(first));
    for (auto& operand : operands) e->children.push_back(std::move(operand));
    e->ops = std::move(ops);
    return finish(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_concat(), at.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& start = current();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::kConcat, start);
    e->children.push_back(std::move(first));
    while (is_op("~")) {
      advance();
      e->children.push_back(parse_math2());
    }
    return finish(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_pow(), at.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& at = advance();
      node = make(at.text == "-" ? ExprKind::kNegate : ExprKind::kPlus, at);
      node->children.push_back(parse_unary(false));
      node = finish(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = current();
    switch (t.type) {
      case TokenType::kName: {
        advance();
        auto e = make(ExprKind::kLiteral, t);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::from_bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::from_bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenType::kString: {
        std::string joined;
        while (current().type == TokenType::kString) joined += advance().text;  // adjacent literals concatenate
        auto e = make(ExprKind::kLiteral, t);
        e->value = Value::from_string(std::move(joined));
        return e;
      }
      case TokenType::kInteger: {
        advance();
        auto e = make(ExprKind::kLiteral, t);
        e->value = Value::from_int(t.integer);
        return e;
      }
      case TokenType::kFloat: {
        advance();
        auto e = make(ExprKind::kLiteral, t);
        e->value = Value::from_float(t.number);
        return e;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, {}, /*explicit_parentheses=*/true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto e = make(ExprKind::kList, current());
    advance();  // [
    while (!is_op("]")) {
      if (!e->children.empty()) expect_op(",");
      if (is_op("]")) break;
      e->children.push_back(parse_expression(true));
    }
    advance();
    return finish(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = make(ExprKind::kDict, current());
    advance();  // {
    while (!is_op("}")) {
      if (!e->children.empty()) expect_op(",");
      if (is_op("}")) break;
      e->children.push_back(parse_expression(true));
      expect_op(":");
      e->children.push_back(parse_expression(true));
    }
    advance();
    return finish(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const Token& t = current();
      if (t.type != TokenType::kOperator) break;
      if (t.text == ".") {
        advance();
        if (current().type == TokenType::kName) {
          auto e = make(ExprKind::kGetAttr, t);
          e->name = advance().text;
          e->children.push_back(std::move(node));
          node = finish(std::move(e));
        } else if (current().type == TokenType::kInteger) {
          auto e = make(ExprKind::kGetItem, t);
          auto index = make(ExprKind::kLiteral, current());
          index->value = Value::from_int(advance().integer);
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index));
          node = finish(std::move(e));
        } else {
          fail(current(), "expected an attribute name after '.'");
        }
      } else if (t.text == "[") {
        node = parse_subscript(std::move(node));
      } else if (t.text == "(") {
        node = parse_call(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& at = advance();  // [
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (is_op(":")) {
      advance();
      is_slice = true;
      if (++part > 2) fail(current(), "too many ':' in subscript");
      if (!is_op(":") && !is_op("]")) parts[part] = parse_expression(true);
    }
    if (is_op(",")) unsupported(current(), "tuple subscripts");
    expect_op("]");
    auto e = make(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, at);
    e->children.push_back(std::move(node));
    if (is_slice) {
      for (auto& p : parts) e->children.push_back(std::move(p));
    } else {
      e->children.push_back(std::move(parts[0]));
    }
    return finish(std::move(e));
  }

  // Arguments `(a, b, key=value)` into e->children (after the callee/operand) and e->keywords.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) unsupported(current(), "*args/**kwargs in calls");
      if (current().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        std::string key = advance().text;
        advance();  // =
        e.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.keywords.empty()) fail(current(), "positional argument after keyword argument");
        e.children.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, current());
    e->children.push_back(std::move(node));
    parse_call_args(*e);
    return finish(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node), true, /*single=*/true);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  // `| name(args) | name2 ...` applied to `node` (null inside {% filter %} / {% set %} blocks).
  ExprPtr parse_filter_chain(ExprPtr node, bool leading_pipe = true, bool single = false) {
    bool first = true;
    while (first || is_op("|")) {
      if (!first || leading_pipe) expect_op("|");
      first = false;
      const Token& at = current();
      auto e = make(ExprKind::kFilter, at);
      e->name = expect_name();
      while (is_op(".")) {
        advance();
        e->name += "." + expect_name();
      }
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = finish(std::move(e));
      if (single) break;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Token& at = advance();  // is
    auto e = make(ExprKind::kTest, at);
    if (is_name("not")) {
      advance();
      e->negated = true;
    }
    e->name = expect_name();
    while (is_op(".")) {
      advance();
      e->name += "." + expect_name();
    }
    e->children.push_back(std::move(node));
    const Token& t = current();
    const bool starts_argument =
        t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
        t.type == TokenType::kFloat ||
        (t.type == TokenType::kOperator && (t.text == "(" || t.text == "[" || t.text == "{"));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if (starts_argument && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(t, "tests cannot be chained with 'is'");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    return finish(std::move(e));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Template parse_template(const std::string& source) { return Parser(tokenize(source)).run(); }

}  // namespace qwenrt::chat_template
