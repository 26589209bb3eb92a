#include "capsim/io/json_read.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unistd.h>
#include <csignal>
#include <cerrno>
#include <fcntl.h>
#include <mutex>

namespace capsim::io {

using nlohmann::json;

namespace {

/// Line and column (1-based) of byte offset `pos` in `text`.
std::pair<size_t, size_t> line_col(std::string_view text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

/// A JSON integer, or a float with no fractional part that fits an int64_t, into `out`.
bool whole_number(const json& v, int64_t& out) {
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return true;
  }
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  if (!(d >= -9.2e18 && d <= 9.2e18) || d != std::trunc(d)) return false;  // also rejects NaN
  out = static_cast<int64_t>(d);
  return true;
}

}  // namespace

namespace {

std::string at_line_col(std::string_view text, size_t pos) {
  auto [line, col] = line_col(text, pos);
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

enum class Token { open, key, bad_number };

/// Byte offset of the `nth` (0-based) token of `kind` in `text` (an opening bracket, an
/// object key, or a number beyond the range of a double), scanning outside strings. The
/// parser has accepted the text up to that token, so the scan need not check the grammar.
size_t locate(std::string_view text, Token kind, size_t nth) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      if (kind == Token::key) {
        size_t k = j + 1;
        while (k < text.size() && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' || text[k] == '\r')) ++k;
        if (k < text.size() && text[k] == ':' && seen++ == nth) return i;
      }
      i = j;
    } else if (c == '{' || c == '[') {
      if (kind == Token::open && seen++ == nth) return i;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < text.size() && text[j] != '\0' && std::strchr("0123456789+-.eE", text[j])) ++j;
      if (kind == Token::bad_number && !std::isfinite(std::strtod(std::string(text.substr(i, j - i)).c_str(), nullptr)))
        return i;
      i = j - 1;
    }
  }
  return text.size();
}

struct TooDeep {
  size_t nth_open;
};
struct DuplicateKey {
  std::string key;
  size_t first, second;  // indices of the two keys among all keys of the text
  std::string pointer;   // JSON pointer of the key
};

/// One open array or object while parsing: the key being read, or the element index.
struct OpenContainer {
  bool array = false;
  std::string key;
  size_t index = 0;
};

}  // namespace

json parse_json(std::string_view text, const std::string& origin) {
  // The callback sees every bracket and key as the parser meets it: nesting and duplicate
  // keys are rejected before the tree grows deep (a deep tree overflows the stack when
  // copied or printed). Positions are found afterwards by counting tokens.
  size_t opened = 0, keys = 0;
  std::vector<std::unordered_map<std::string, size_t>> objects;
  std::vector<OpenContainer> path;  // where the parser is, for a duplicate key's pointer
  const auto element_done = [&] {
    if (!path.empty() && path.back().array) ++path.back().index;
  };
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) throw TooDeep{opened};
        ++opened;
        if (event == json::parse_event_t::object_start) objects.emplace_back();
        path.push_back({event == json::parse_event_t::array_start, {}, 0});
        break;
      case json::parse_event_t::key: {
        const std::string key = parsed.get<std::string>();
        auto [it, fresh] = objects.back().emplace(key, keys);
        if (!fresh) {
          std::string pointer;
          for (size_t i = 0; i + 1 < path.size(); ++i)
            pointer += "/" + (path[i].array ? std::to_string(path[i].index) : pointer_escape(path[i].key));
          throw DuplicateKey{it->first, it->second, keys, pointer + "/" + pointer_escape(key)};
        }
        path.back().key = key;
        ++keys;
        break;
      }
      case json::parse_event_t::object_end:
        objects.pop_back();
        path.pop_back();
        element_done();
        break;
      case json::parse_event_t::array_end:
        path.pop_back();
        element_done();
        break;
      case json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::parse_error& e) {
    // nlohmann reports the byte index just past the offending character.
    const size_t pos = e.byte > 0 ? e.byte - 1 : 0;
    // "[json.exception.parse_error.101] parse error at line L, column C: <reason>"; the reason
    // itself may hold ": " (e.g. "invalid literal; last read: 'tru'"), so cut at the first one.
    std::string what = e.what();
    const auto colon = what.find(": ");
    std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    throw InputError({{origin, "", "malformed JSON at " + at_line_col(text, pos) + ": " + reason, {}}});
  } catch (const json::out_of_range&) {
    // The only range error of the parser: a number that overflows a double (1e309).
    const size_t pos = locate(text, Token::bad_number, 0);
    size_t end = pos;
    while (end < text.size() && text[end] != '\0' && std::strchr("0123456789+-.eE", text[end])) ++end;
    std::string number(text.substr(pos, std::min<size_t>(end - pos, 40)));
    throw InputError({{origin, number,
                       "number at " + at_line_col(text, pos) + " is beyond the range of a double (about 1.8e308)", {}}});
  } catch (const TooDeep& e) {
    throw InputError({{origin, "",
                       "arrays and objects nested deeper than " + std::to_string(kMaxJsonDepth) + " levels at " +
                           at_line_col(text, locate(text, Token::open, e.nth_open)),
                       {}}});
  } catch (const DuplicateKey& e) {
    throw InputError({{origin + "#" + e.pointer, "\"" + e.key + "\"",
                       "key appears twice in one object, at " + at_line_col(text, locate(text, Token::key, e.first)) +
                           " and " + at_line_col(text, locate(text, Token::key, e.second)),
                       "keep one of them"}});
  }
}

std::string read_text_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    throw InputError({{path.string(), "", "is not a regular file (a folder, FIFO or device)", {}}});
  if (const std::uintmax_t size = fs::file_size(path, ec); !ec && size > max_bytes)
    throw InputError({{path.string(), std::to_string(size) + " bytes",
                       "is larger than the limit of " + std::to_string(max_bytes >> 20) + " MiB for this kind of input",
                       {}}});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError({{path.string(), "", "cannot open file", {}}});
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json_file(const std::filesystem::path& path) { return parse_json(read_text_file(path), path.string()); }

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 2) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string pointer_escape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string dump_text(const json& v, int indent) { return v.dump(indent, ' ', false, json::error_handler_t::replace); }

std::string brief(const json& v) {
  std::string s = dump_text(v);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

namespace {

/// The temporary file of the write_file_atomic in progress, for a signal handler that ends
/// the process: a fixed buffer, armed only while the name in it is complete.
char g_pending_temp[4096];
volatile std::sig_atomic_t g_pending_armed = 0;
std::mutex g_write_mutex;

/// Whether process `pid` is gone (a process of another user still counts as alive).
bool process_gone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH; }

/// Remove `.<name>.tmp<PID>` files in `dir` left by writes whose process was killed: a
/// temporary file of a live process (another capsim writing the same file) is kept.
void remove_stale_temps(const std::filesystem::path& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const std::string prefix = "." + name + ".tmp";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (f.size() <= prefix.size() || f.size() > prefix.size() + 10 || f.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = f.substr(prefix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const long pid = std::stol(digits);
    if (pid == static_cast<long>(::getpid()) || !process_gone(pid)) continue;
    std::error_code rm;
    if (it->is_regular_file(rm)) fs::remove(it->path(), rm);
  }
}

}  // namespace

void remove_pending_temp_file() noexcept {
  if (g_pending_armed) ::unlink(g_pending_temp);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  namespace fs = std::filesystem;
  std::lock_guard<std::mutex> lock(g_write_mutex);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()));
  const std::string tmp_name = tmp.string();
  remove_stale_temps(dir, path.filename().string());
  // Armed before the file exists, so an interrupt at any point leaves no temporary file.
  if (tmp_name.size() < sizeof g_pending_temp) {
    std::memcpy(g_pending_temp, tmp_name.c_str(), tmp_name.size() + 1);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g_pending_armed = 1;
  }
  struct Disarm {
    ~Disarm() { g_pending_armed = 0; }
  } disarm;
  const int fd = ::open(tmp_name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;
    throw InputError({{path.string(), "", std::string("cannot write file (") + std::strerror(e) + ")", {}}});
  }
  // Every byte written and on the disk before the rename, or the file is left as it was.
  auto fail = [&](int e) {
    ::close(fd);
    ::unlink(tmp_name.c_str());
    throw InputError({{path.string(), "", std::string("write failed: ") + std::strerror(e), "free space and run again"}});
  };
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) fail(errno);
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp_name.c_str());
    throw InputError({{path.string(), "", std::string("write failed: ") + std::strerror(e), "free space and run again"}});
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code rm;
    fs::remove(tmp, rm);
    throw InputError({{path.string(), "", "cannot replace file: " + ec.message(), {}}});
  }
}

ObjectReader::ObjectReader(const json& obj, std::string pointer, std::vector<Issue>& issues)
    : obj_(obj), pointer_(std::move(pointer)), issues_(issues) {}

bool ObjectReader::has(const std::string& key) const { return obj_.is_object() && obj_.contains(key); }

void ObjectReader::allow(const std::string& key) { known_.push_back(key); }

bool ObjectReader::left_auto(const std::string& key) {
  if (!has(key) || !obj_[key].is_string() || obj_[key] != "auto") return false;
  allow(key);
  return true;
}

const json* ObjectReader::get(const std::string& key) {
  known_.push_back(key);
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  return it == obj_.end() ? nullptr : &*it;
}

void ObjectReader::type_issue(const std::string& key, const char* expected) {
  issues_.push_back({at(key), brief(obj_.at(key)), std::string("must be ") + expected, {}});
}

bool ObjectReader::integer(const std::string& key, int64_t& out, bool required, int64_t min) {
  const json* v = get(key);
  if (!v) {
    if (required) issues_.push_back({at(key), "", "is required (an integer)", {}});
    return false;
  }
  if (int64_t x = 0; whole_number(*v, x)) {
    if (x < min) {
      issues_.push_back({at(key), brief(*v), "must be an integer >= " + std::to_string(min), {}});
      return false;
    }
    out = x;
    return true;
  }
  type_issue(key, ("an integer >= " + std::to_string(min)).c_str());
  return false;
}

bool ObjectReader::number(const std::string& key, double& out, bool required, double min) {
  const json* v = get(key);
  if (!v) {
    if (required) issues_.push_back({at(key), "", "is required (a number)", {}});
    return false;
  }
  if (!v->is_number()) {
    type_issue(key, "a number");
    return false;
  }
  const double x = v->get<double>();
  if (x < min) {
    std::ostringstream ss;
    ss << "must be a number >= " << min;
    issues_.push_back({at(key), brief(*v), ss.str(), {}});
    return false;
  }
  out = x;
  return true;
}

bool ObjectReader::boolean(const std::string& key, bool& out, bool required) {
  const json* v = get(key);
  if (!v) {
    if (required) issues_.push_back({at(key), "", "is required (true or false)", {}});
    return false;
  }
  if (!v->is_boolean()) {
    type_issue(key, "true or false");
    return false;
  }
  out = v->get<bool>();
  return true;
}

bool ObjectReader::string(const std::string& key, std::string& out, bool required) {
  const json* v = get(key);
  if (!v) {
    if (required) issues_.push_back({at(key), "", "is required (a string)", {}});
    return false;
  }
  if (!v->is_string()) {
    type_issue(key, "a string");
    return false;
  }
  out = v->get<std::string>();
  return true;
}

bool ObjectReader::integer_or_auto(const std::string& key, std::optional<int64_t>& out, int64_t min) {
  const json* v = get(key);
  if (!v) return false;
  if (v->is_string() && v->get<std::string>() == "auto") {
    out = std::nullopt;
    return true;
  }
  if (int64_t x = 0; whole_number(*v, x) && x >= min) {
    out = x;
    return true;
  }
  issues_.push_back({at(key), brief(*v), "must be an integer >= " + std::to_string(min) + " or \"auto\"", {}});
  return false;
}

bool ObjectReader::fraction_or_auto(const std::string& key, std::optional<double>& out) {
  const json* v = get(key);
  if (!v) return false;
  if (v->is_string() && v->get<std::string>() == "auto") {
    out = std::nullopt;
    return true;
  }
  if (v->is_number() && v->get<double>() > 0.0 && v->get<double>() <= 1.0) {
    out = v->get<double>();
    return true;
  }
  issues_.push_back({at(key), brief(*v), "must be a share in (0, 1] or \"auto\"", {}});
  return false;
}

bool ObjectReader::choice(const std::string& key, std::string& out, const std::vector<std::string>& choices,
                          bool required, bool allow_auto) {
  const json* v = get(key);
  if (!v) {
    if (required) issues_.push_back({at(key), "", "is required", {}});
    return false;
  }
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + ("\"" + c + "\"");
  if (allow_auto) list += ", \"auto\"";
  if (!v->is_string()) {
    issues_.push_back({at(key), brief(*v), "must be one of " + list, {}});
    return false;
  }
  const std::string s = v->get<std::string>();
  if (allow_auto && s == "auto") {
    out = s;
    return true;
  }
  if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
    const std::string n = nearest(s, choices);
    issues_.push_back({at(key), brief(*v), "must be one of " + list, n.empty() ? "" : "did you mean \"" + n + "\"?"});
    return false;
  }
  out = s;
  return true;
}

void ObjectReader::finish() {
  if (!obj_.is_object()) return;
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
    const std::string n = nearest(it.key(), known_);
    issues_.push_back({at(it.key()), "", "unknown key", n.empty() ? "" : "did you mean \"" + n + "\"?"});
  }
}

}  // namespace capsim::io
