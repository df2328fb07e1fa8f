#include "operator/kube/label_selector.h"

#include <algorithm>
#include <cctype>

#include "common/str_util.h"

namespace lockstep::kube {
namespace {

bool IsKeyChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
         c == '/';
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}
  void SkipSpace() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool Done() {
    SkipSpace();
    return pos_ >= text_.size();
  }
  bool Consume(std::string_view token) {
    SkipSpace();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  // A key or a value: [A-Za-z0-9-_./]*
  std::string Word() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && IsKeyChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

absl::Status Error(std::string_view text, size_t pos, std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("label selector \"", text, "\": ", what, " at offset ", pos));
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector s;
  Lexer lex(text);
  if (lex.Done()) return s;
  while (true) {
    Requirement r;
    if (lex.Consume("!")) {
      r.key = lex.Word();
      r.op = Op::kDoesNotExist;
    } else {
      r.key = lex.Word();
      if (lex.Consume("==") || lex.Consume("=")) {
        r.op = Op::kEquals;
        r.values.push_back(lex.Word());
      } else if (lex.Consume("!=")) {
        r.op = Op::kNotEquals;
        r.values.push_back(lex.Word());
      } else if (lex.Consume("notin") || lex.Consume("in")) {
        std::string_view consumed = text.substr(0, lex.pos());
        r.op = consumed.ends_with("notin") ? Op::kNotIn : Op::kIn;
        if (!lex.Consume("(")) return Error(text, lex.pos(), "want '(' after in/notin");
        while (true) {
          r.values.push_back(lex.Word());
          if (lex.Consume(")")) break;
          if (!lex.Consume(",")) return Error(text, lex.pos(), "want ',' or ')' in a value set");
        }
      } else {
        r.op = Op::kExists;
      }
    }
    if (r.key.empty()) return Error(text, lex.pos(), "want a label key");
    s.requirements_.push_back(std::move(r));
    if (lex.Done()) break;
    if (!lex.Consume(",")) return Error(text, lex.pos(), "want ',' between requirements");
  }
  return s;
}

LabelSelector LabelSelector::FromMap(const std::map<std::string, std::string>& labels) {
  LabelSelector s;
  for (const auto& [k, v] : labels) s.requirements_.push_back({k, Op::kEquals, {v}});
  return s;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Requirement& r : requirements_) {
    auto it = labels.find(r.key);
    bool has = it != labels.end();
    auto in_values = [&] {
      return has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    };
    switch (r.op) {
      case Op::kEquals:
      case Op::kIn:
        if (!in_values()) return false;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        if (in_values()) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kDoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

std::string LabelSelector::ToString() const {
  std::vector<std::string> parts;
  for (const Requirement& r : requirements_) {
    switch (r.op) {
      case Op::kEquals:
        parts.push_back(StrCat(r.key, "=", r.values[0]));
        break;
      case Op::kNotEquals:
        parts.push_back(StrCat(r.key, "!=", r.values[0]));
        break;
      case Op::kIn:
        parts.push_back(StrCat(r.key, " in (", StrJoin(r.values, ","), ")"));
        break;
      case Op::kNotIn:
        parts.push_back(StrCat(r.key, " notin (", StrJoin(r.values, ","), ")"));
        break;
      case Op::kExists:
        parts.push_back(r.key);
        break;
      case Op::kDoesNotExist:
        parts.push_back("!" + r.key);
        break;
    }
  }
  return StrJoin(parts, ",");
}

}  // namespace lockstep::kube
