#pragma once
/// Problems with user input, collected so that all of them are reported at once.

#include <stdexcept>
#include <string>
#include <vector>

namespace capsim {

/// One problem: where (a JSON pointer into the scenario), the offending value, the rule
/// it breaks, and optionally a hint (e.g. the nearest valid key).
struct Issue {
  std::string pointer;
  std::string value;
  std::string rule;
  std::string hint;
  bool operator==(const Issue&) const = default;
};

/// "pointer: rule (got value); hint" on one line.
std::string format_issue(const Issue& i);

/// Thrown when input is invalid; carries every problem found.
class InputError : public std::runtime_error {
 public:
  explicit InputError(std::vector<Issue> issues);
  const std::vector<Issue>& issues() const { return issues_; }

 private:
  std::vector<Issue> issues_;
};

}  // namespace capsim
