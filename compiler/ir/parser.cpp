#include "kjit/compiler/ir/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "kjit/support/error.h"

namespace kjit::ir {

namespace {

enum class Tok { Ident, Number, Punct, Separator, End };

struct Token {
  Tok kind = Tok::End;
  std::string text;
  size_t offset = 0;  // into the source
};

class Parser {
 public:
  Parser(const std::string& text, const ParseOptions& options) : text_(text), options_(options) {
    if (text_.size() > kMaxTextBytes)
      throw UserError("the expression is " + std::to_string(text_.size()) +
                      " bytes; kjit parses at most " + std::to_string(kMaxTextBytes));
    tokenize();
    for (const Predeclared& input : options_.inputs)
      add_input(Token{}, input.name, input.dtype, input.shape);
  }

  Graph run() {
    std::vector<std::string> assigned;     // in order
    std::unordered_set<std::string> read;  // names read by a later statement
    std::vector<std::string> returned;
    bool have_return = false;
    while (peek().kind != Tok::End) {
      if (peek().kind == Tok::Separator) {
        next();
        continue;
      }
      if (have_return) fail(peek(), "nothing may follow the return line");
      const Token& first = peek();
      if (first.kind == Tok::Ident && first.text == "return") {
        next();
        have_return = true;
        do {
          const Token& name = expect_ident("an output name");
          if (!values_.count(name.text)) fail(name, "'" + name.text + "' is not assigned");
          returned.push_back(name.text);
          output_at_[name.text] = name.offset;
        } while (accept(","));
        continue;
      }
      if (first.kind == Tok::Ident && peek(1).text == ":") {
        declaration();
        continue;
      }
      std::string name = "y";
      const size_t statement_at = first.offset;
      if (first.kind == Tok::Ident && peek(1).text == "=") {
        name = next().text;
        next();
        if (graph_.find_input(name) >= 0)
          fail(first, "'" + name + "' is an input; an assignment needs a new name");
        if (values_.count(name)) fail(first, "'" + name + "' is assigned twice");
      } else if (statements_ > 0 || has_more_statements()) {
        fail(first, "expected a declaration (x:bf16[n]) or an assignment (y = ...)");
      }
      reads_.clear();
      Value v = expression();
      for (const std::string& r : reads_) read.insert(r);
      if (peek().kind != Tok::Separator && peek().kind != Tok::End)
        fail(peek(), "expected an operator, ';' or the end of the line");
      values_[name] = v.id;
      assigned.push_back(name);
      output_at_.emplace(name, statement_at);
      ++statements_;
    }
    if (assigned.empty()) fail(peek(), "expected at least one assignment, e.g. y = sin(x)");
    std::vector<std::string> outputs;
    if (have_return) {
      outputs = returned;
    } else {
      for (const std::string& name : assigned)
        if (!read.count(name)) outputs.push_back(name);
    }
    // One kernel writes every output over one shape: outputs that do not
    // broadcast together are an error here, where the statement can be shown,
    // rather than in verify() or the lowering.
    Shape shape;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const std::string& name = outputs[k];
      const size_t at = output_at_.at(name);
      if (static_cast<int>(k) == kMaxOutputs)
        fail_at(at, "more than " + std::to_string(kMaxOutputs) +
                        " outputs; one expression writes at most " + std::to_string(kMaxOutputs));
      const Node& node = graph_.node(values_.at(name));
      std::optional<Shape> both = broadcast(shape, node.shape);
      if (!both)
        fail_at(at, "output '" + name + "' has shape " + to_string(node.shape) +
                        ", which does not broadcast with " + to_string(shape) +
                        " of the outputs before it (one kernel writes every output over one "
                        "shape)");
      shape = *both;
      try {
        graph_.output(name, graph_.value(values_.at(name)));
      } catch (const UserError& e) {
        fail_at(at, e.what());
      }
    }
    return std::move(graph_);
  }

  // The text with one spelling per meaning (see canonical_text in parser.h).
  std::string canonical() const {
    std::string out;
    const Token* previous = nullptr;  // within the statement
    bool separate = false;
    int in_shape = 0;  // inside [...]: "[m,n]" as the printer writes shapes
    for (const Token& t : tokens_) {
      if (t.kind == Tok::End) break;
      if (t.kind == Tok::Separator) {
        separate = !out.empty();
        previous = nullptr;
        continue;
      }
      if (separate) out += "; ";
      separate = false;
      const bool after_operand =
          previous != nullptr && (previous->kind == Tok::Ident || previous->kind == Tok::Number ||
                                  previous->text == ")" || previous->text == "]");
      const std::string& p = t.text;
      if (t.kind != Tok::Punct) {
        if (after_operand) out += ' ';  // `return y`
        out += p;
      } else if (p == "^" || p == "**") {
        out += '^';
      } else if (p == ",") {
        out += in_shape > 0 ? "," : ", ";
      } else if ((p == "+" || p == "-") && !after_operand) {
        out += p;  // unary
      } else if (p == "(" || p == ")" || p == "[" || p == "]" || p == ":") {
        in_shape += p == "[" ? 1 : p == "]" && in_shape > 0 ? -1 : 0;
        out += p;
      } else {
        out += ' ' + p + ' ';  // a binary operator or '='
      }
      previous = &t;
    }
    return out;
  }

 private:
  // ---- tokens
  void tokenize() {
    size_t i = 0;
    int depth = 0;
    while (i < text_.size()) {
      char c = text_[i];
      if (c == '#') {
        while (i < text_.size() && text_[i] != '\n') ++i;
        continue;
      }
      if (c == '\n' || c == ';') {
        if (depth == 0) tokens_.push_back({Tok::Separator, std::string(1, c), i});
        ++i;
        continue;
      }
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
        continue;
      }
      size_t start = i;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (i < text_.size() &&
               (std::isalnum(static_cast<unsigned char>(text_[i])) || text_[i] == '_'))
          ++i;
        tokens_.push_back({Tok::Ident, text_.substr(start, i - start), start});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c)) ||
          (c == '.' && i + 1 < text_.size() &&
           std::isdigit(static_cast<unsigned char>(text_[i + 1])))) {
        while (i < text_.size() &&
               (std::isdigit(static_cast<unsigned char>(text_[i])) || text_[i] == '.'))
          ++i;
        if (i < text_.size() && (text_[i] == 'e' || text_[i] == 'E')) {
          size_t j = i + 1;
          if (j < text_.size() && (text_[j] == '+' || text_[j] == '-')) ++j;
          if (j < text_.size() && std::isdigit(static_cast<unsigned char>(text_[j]))) {
            i = j;
            while (i < text_.size() && std::isdigit(static_cast<unsigned char>(text_[i]))) ++i;
          }
        }
        tokens_.push_back({Tok::Number, text_.substr(start, i - start), start});
        continue;
      }
      static const char* two[] = {"<=", ">=", "==", "!=", "**"};
      bool matched = false;
      for (const char* t : two) {
        if (text_.compare(i, 2, t) == 0) {
          tokens_.push_back({Tok::Punct, t, i});
          i += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string("+-*/^()[],:=<>").find(c) == std::string::npos)
        fail_at(i, std::isprint(static_cast<unsigned char>(c))
                       ? std::string("unexpected character '") + c + "'"
                       : fmt::format("unexpected byte 0x{:02x}", static_cast<unsigned char>(c)));
      if (c == '(' || c == '[') ++depth;
      if ((c == ')' || c == ']') && depth > 0) --depth;
      tokens_.push_back({Tok::Punct, std::string(1, c), i});
      ++i;
    }
    // The end points just past the last visible character, so a message about a
    // missing ')' shows the line that needs it.
    size_t end = text_.size();
    while (end > 0 &&
           (std::isspace(static_cast<unsigned char>(text_[end - 1])) || text_[end - 1] == ';'))
      --end;
    tokens_.push_back({Tok::End, "", end});
  }

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(position_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[position_];
    if (position_ + 1 < tokens_.size()) ++position_;
    return t;
  }
  bool accept(const char* punct) {
    if (peek().kind == Tok::Punct && peek().text == punct) {
      next();
      return true;
    }
    return false;
  }
  void expect(const char* punct) {
    if (!accept(punct)) fail(peek(), std::string("expected '") + punct + "'");
  }
  const Token& expect_ident(const char* what) {
    if (peek().kind != Tok::Ident) fail(peek(), std::string("expected ") + what);
    return next();
  }
  bool has_more_statements() const {
    for (size_t i = position_; i < tokens_.size(); ++i) {
      if (tokens_[i].kind == Tok::Separator) {
        for (size_t j = i + 1; j < tokens_.size(); ++j) {
          if (tokens_[j].kind != Tok::Separator && tokens_[j].kind != Tok::End) return true;
        }
        return false;
      }
    }
    return false;
  }

  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    fail_at(at.offset, at.kind == Tok::End ? message + " at the end of the input" : message);
  }
  [[noreturn]] void fail_at(size_t offset, const std::string& message) const {
    size_t line_start = text_.rfind('\n', offset == 0 ? 0 : offset - 1);
    line_start = (line_start == std::string::npos || offset == 0) ? 0 : line_start + 1;
    if (offset < text_.size() && text_[offset] == '\n' && offset > 0) {
      // A separator: point at the end of its line.
      size_t previous = text_.rfind('\n', offset - 1);
      line_start = previous == std::string::npos ? 0 : previous + 1;
    }
    size_t line_end = text_.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text_.size();
    int line = 1;
    for (size_t i = 0; i < line_start; ++i) line += text_[i] == '\n';
    size_t column = offset - line_start + 1;
    // The line as shown under the message: at most ~100 characters around the
    // column (a megabyte on one line was echoed whole), control bytes as '?' and tabs
    // as spaces, one column each, so the caret stays under the place.
    constexpr size_t kShown = 100;
    std::string shown = text_.substr(line_start, line_end - line_start);
    size_t caret = column - 1;
    if (shown.size() > kShown) {
      const size_t from = caret > kShown / 2 ? caret - kShown / 2 : 0;
      const size_t length = std::min(kShown, shown.size() - from);
      const std::string before = from > 0 ? "..." : "";
      shown = before + shown.substr(from, length) + (from + length < shown.size() ? "..." : "");
      caret = caret - from + before.size();
    }
    for (char& ch : shown) {
      const auto byte = static_cast<unsigned char>(ch);
      if (ch == '\t') ch = ' ';
      if (byte < 0x20 || byte == 0x7f) ch = '?';
    }
    throw UserError("parse error at line " + std::to_string(line) + ", column " +
                    std::to_string(column) + ": " + shorten_quoted(message) + "\n  " + shown +
                    "\n  " + std::string(caret, ' ') + "^");
  }

  // The message with every quoted name or number past 64 characters cut to its
  // first 48 ('fff...' (1000000 characters)): the whole token was echoed, a megabyte
  // of stderr for a megabyte-long name.
  static std::string shorten_quoted(const std::string& message) {
    constexpr size_t kLongest = 64, kKept = 48;
    std::string out;
    size_t at = 0;
    for (size_t open; (open = message.find('\'', at)) != std::string::npos;) {
      const size_t close = message.find('\'', open + 1);
      if (close == std::string::npos) break;
      const size_t length = close - open - 1;
      out += message.substr(at, open + 1 - at);
      out += length > kLongest ? message.substr(open + 1, kKept) + "...' (" +
                                     std::to_string(length) + " characters)"
                               : message.substr(open + 1, length) + "'";
      at = close + 1;
    }
    return out + message.substr(at);
  }

  // ---- statements
  void declaration() {
    const Token& name = next();
    next();  // ':'
    for (const Predeclared& input : options_.inputs)
      if (input.name == name.text)
        fail(name, "'" + name.text + "' is given: " + name.text + ":" + to_string(input.dtype) +
                       to_string(input.shape) + "; it cannot be declared again");
    if (values_.count(name.text) || graph_.find_input(name.text) >= 0)
      fail(name, "'" + name.text + "' is declared after it was used or assigned");
    DType dtype = options_.default_dtype;
    Shape shape = options_.default_shape;
    bool any = false;
    if (peek().kind == Tok::Ident) {
      const Token& t = next();
      std::optional<DType> d = parse_dtype(t.text);
      if (!d) fail(t, "unknown dtype '" + t.text + "'; the dtypes are " + dtype_names());
      dtype = *d;
      any = true;
    }
    if (accept("[")) {
      shape.clear();
      if (!accept("]")) {
        do {
          const Token& t = next();
          if (t.kind == Tok::Ident) {
            shape.push_back(Dim::named(t.text));
          } else if (t.kind == Tok::Number) {
            int64_t size = 0;
            auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), size);
            if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size() || size < 1)
              fail(t, "a dim is a positive integer or a name");
            shape.push_back(Dim::of(size));
          } else {
            fail(t, "expected a dim (a positive integer or a name)");
          }
        } while (accept(","));
        expect("]");
      }
      any = true;
    }
    if (!any) fail(peek(), "expected a dtype (" + dtype_names() + ") or a shape such as [n]");
    add_input(name, name.text, dtype, shape);
  }

  // Every input goes through here, to count them. `at` is where the text names
  // it (a predeclared input has no place in the text).
  Value add_input(const Token& at, const std::string& name, DType dtype, const Shape& shape) {
    if (++inputs_ > kMaxInputs)
      fail(at, "more than " + std::to_string(kMaxInputs) +
                   " inputs; one expression reads at most " + std::to_string(kMaxInputs));
    return graph_.input(name, dtype, shape);
  }

  // ---- expressions, lowest precedence first
  Value expression() {
    const Token& at = peek();
    Value left = additive();
    static const std::map<std::string, OpCode> compare = {{"<", OpCode::Lt},  {"<=", OpCode::Le},
                                                          {">", OpCode::Gt},  {">=", OpCode::Ge},
                                                          {"==", OpCode::Eq}, {"!=", OpCode::Ne}};
    if (peek().kind == Tok::Punct && compare.count(peek().text)) {
      OpCode op = compare.at(next().text);
      Value right = additive();
      return apply(at, op, {left, right});
    }
    return left;
  }
  Value additive() {
    Value left = multiplicative();
    while (peek().text == "+" || peek().text == "-") {
      const Token& op = next();
      Value right = multiplicative();
      left = apply(op, op.text == "+" ? OpCode::Add : OpCode::Sub, {left, right});
    }
    return left;
  }
  Value multiplicative() {
    Value left = unary();
    while (peek().text == "*" || peek().text == "/") {
      const Token& op = next();
      Value right = unary();
      left = apply(op, op.text == "*" ? OpCode::Mul : OpCode::Div, {left, right});
    }
    return left;
  }
  Value unary() {
    if (peek().kind == Tok::Punct && peek().text == "-") {
      Nesting guard(*this);  // a minus is a level; an operand's primary() counts its own
      const Token& minus = next();
      // "-2.5" is a literal, so printed negative constants read back as constants.
      if (peek().kind == Tok::Number && peek(1).text != "^" && peek(1).text != "**")
        return number(next(), true);
      return apply(minus, OpCode::Neg, {unary()});
    }
    return power();
  }
  Value power() {
    Value base = primary();
    if (peek().text == "^" || peek().text == "**") {
      // Right-associative (2^-x, a^b^c = a^(b^c)): a chain of powers nests, each
      // exponent a level (x^x^...^x recursed past the limit and overflowed the stack).
      Nesting guard(*this);
      const Token& op = next();
      Value exponent = unary();
      return apply(op, OpCode::Pow, {base, exponent});
    }
    return base;
  }
  // Guards the recursion: a hostile input of a million '(' must be an error, not a
  // stack overflow.
  struct Nesting {
    explicit Nesting(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting)
        parser.fail(parser.peek(),
                    "expression nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Nesting() { --parser.nesting_; }
    Parser& parser;
  };

  Value primary() {
    Nesting guard(*this);
    const Token& t = peek();
    if (t.kind == Tok::Number) return number(next(), false);
    if (accept("(")) {
      Value v = expression();
      expect(")");
      return v;
    }
    if (t.kind != Tok::Ident) fail(t, "expected a name, a number, a call or '('");
    next();
    if (t.text == "true" || t.text == "false")
      return graph_.constant(t.text == "true" ? 1 : 0, DType::Bool);
    if (accept("(")) return call(t);
    return name(t);
  }
  Value call(const Token& function) {
    std::string op_name = function.text == "where" ? "select" : function.text;
    const OpInfo* info = find_op(op_name);
    if (!info) {
      std::string suggestions;
      for (const std::string& s : nearest_op_names(function.text)) {
        suggestions += (suggestions.empty() ? "" : ", ") + s;
      }
      fail(function, "unknown op '" + function.text + "'; did you mean " + suggestions + "?");
    }
    std::vector<Value> operands;
    DType cast_to = DType::F32;
    if (info->code == OpCode::Cast) {
      operands.push_back(expression());
      expect(",");
      const Token& d = expect_ident("a dtype");
      std::optional<DType> dtype = parse_dtype(d.text);
      if (!dtype) fail(d, "unknown dtype '" + d.text + "'; the dtypes are " + dtype_names());
      cast_to = *dtype;
    } else if (!(peek().text == ")")) {
      do operands.push_back(expression());
      while (accept(","));
    }
    expect(")");
    if (static_cast<int>(operands.size()) != info->arity)
      fail(function, std::string(info->name) + " takes " + std::to_string(info->arity) +
                         " operand(s), got " + std::to_string(operands.size()));
    return apply(function, info->code, operands, cast_to);
  }
  Value name(const Token& t) {
    auto it = values_.find(t.text);
    if (it != values_.end()) {
      reads_.push_back(t.text);
      return graph_.value(it->second);
    }
    int input = graph_.find_input(t.text);
    if (input >= 0) return graph_.value(input);
    if (t.text == "return") fail(t, "'return' starts a line: return y, z");
    if (find_op(t.text) || t.text == "where")
      fail(t, "'" + t.text + "' is an op; call it: " + t.text + "(...)");
    // An undeclared name: an input of the default dtype and shape.
    return add_input(t, t.text, options_.default_dtype, options_.default_shape);
  }
  Value number(const Token& t, bool negative) {
    double value = 0;
    const char* begin = t.text.data();
    const char* end = begin + t.text.size();
    auto r = std::from_chars(begin, end, value);
    if (r.ec != std::errc() || r.ptr != end) fail(t, "'" + t.text + "' is not a number");
    if (negative) value = -value;
    bool integral = t.text.find_first_of(".eE") == std::string::npos;
    if (integral && (value >= 2147483648.0 || value < -2147483648.0))
      fail(t, "integer literal out of the i32 range; write it as a float (" + t.text + ".0)");
    if (!std::isfinite(value)) fail(t, "literal is not finite");
    if (!integral && std::abs(value) > std::numeric_limits<float>::max())
      fail(t, fmt::format("literal is past the f32 range (magnitudes up to {:g})",
                          std::numeric_limits<float>::max()));
    return graph_.constant(value, integral ? DType::I32 : DType::F32);
  }
  Value apply(const Token& at, OpCode op, const std::vector<Value>& operands,
              DType cast_to = DType::F32) {
    if (++ops_ > kMaxOps)
      fail(at, "more than " + std::to_string(kMaxOps) + " ops; one expression holds at most " +
                   std::to_string(kMaxOps) + " (split the work into several expressions)");
    try {
      return graph_.apply(op, operands, cast_to);
    } catch (const UserError& e) {
      fail(at, e.what());
    }
  }

  const std::string& text_;
  ParseOptions options_;
  std::vector<Token> tokens_;
  size_t position_ = 0;
  Graph graph_;
  std::unordered_map<std::string, int> values_;        // assigned names -> node
  std::unordered_map<std::string, size_t> output_at_;  // assigned names -> offset of the statement
  std::vector<std::string> reads_;
  int statements_ = 0;
  int nesting_ = 0;
  int ops_ = 0;
  int inputs_ = 0;
};

}  // namespace

Graph parse(const std::string& text, const ParseOptions& options) {
  return Parser(text, options).run();
}

std::string canonical_text(const std::string& text) {
  return Parser(text, {}).canonical();
}

}  // namespace kjit::ir
