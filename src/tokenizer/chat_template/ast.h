// Syntax tree of a parsed template. One node type for expressions and one for statements
// keeps the parser and the interpreter small; `kind` says which fields are used.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/value.h"

namespace qwenrt::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // children
  kTuple,     // children
  kDict,      // children: key, value, key, value...
  kGetAttr,   // children[0] . name
  kGetItem,   // children[0] [ children[1] ]
  kSlice,     // children[0] [ children[1] : children[2] : children[3] ], absent parts null
  kCall,      // children[0] ( children[1..], keywords )
  kFilter,    // children[0] | name ( children[1..], keywords ); children[0] null in {% filter %}
  kTest,      // children[0] is [not] name ( children[1..], keywords )
  kNot,       // not children[0]
  kNegate,    // - children[0]
  kPlus,      // + children[0]
  kBinary,    // children[0] op children[1]: + - * / // % **
  kAnd,       // children[0] and children[1]
  kOr,        // children[0] or children[1]
  kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
  kConcat,    // children joined with ~
  kCondition  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  int depth = 1;  // height of this subtree, bounded by the parser
  Value value;
  std::string name;  // variable, attribute, filter or test name; binary operator
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;  // kCompare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,        // text
  kOutput,      // {{ expr }}
  kIf,          // conditions[i] -> bodies[i]; else_body
  kFor,         // targets in expr [if condition]: body; else_body
  kSet,         // targets (or name.attr via attribute) = expr
  kSetBlock,    // {% set x %}body{% endset %}, optional filter expr
  kMacro,       // name(params) body
  kCallBlock,   // {% call(params) expr %}body{% endcall %}
  kFilterBlock, // {% filter expr %}body{% endfilter %}
  kBreak,
  kContinue,
  kBlock,       // a plain body: {% generation %} (transformers' extension) renders its content
  kWith,        // {% with targets[i] = values[i], ... %}body{% endwith %}: a scope
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;              // kText
  std::string name;              // kMacro; kSetBlock/kSet target; kSet namespace attribute owner
  std::string attribute;         // kSet `ns.attr = ...`
  std::vector<std::string> targets;  // kFor / kSet unpacking targets
  bool unpack = false;           // targets came from a tuple (a, b)
  ExprPtr expr;                  // kOutput, kFor iterable, kSet value, kCallBlock call, kFilterBlock/kSetBlock filter
  ExprPtr condition;             // kFor filter
  std::vector<ExprPtr> conditions;  // kIf conditions; kWith values (targets in `targets`)
  std::vector<Body> bodies;         // kIf
  Body body;
  Body else_body;
  std::vector<Param> params;  // kMacro, kCallBlock
};

struct Template {
  Body body;
};

}  // namespace qwenrt::chat_template
