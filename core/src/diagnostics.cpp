#include "capsim/core/diagnostics.hpp"

namespace capsim {

std::string format_issue(const Issue& i) {
  std::string s = i.pointer.empty() ? std::string("(input)") : i.pointer;
  s += ": ";
  s += i.rule;
  if (!i.value.empty()) s += " (got " + i.value + ")";
  if (!i.hint.empty()) s += "; " + i.hint;
  return s;
}

namespace {
std::string join(const std::vector<Issue>& issues) {
  std::string s;
  for (const auto& i : issues) {
    if (!s.empty()) s += "\n";
    s += format_issue(i);
  }
  return s;
}
}  // namespace

InputError::InputError(std::vector<Issue> issues)
    : std::runtime_error(join(issues)), issues_(std::move(issues)) {}

}  // namespace capsim
