#include "raw_writer.hpp"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <unistd.h>

namespace capsim::calibrate {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace

JsonLine& JsonLine::add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, quote(value));
  return *this;
}

JsonLine& JsonLine::add(const std::string& key, int64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64, value);
  fields_.emplace_back(key, buf);
  return *this;
}

JsonLine& JsonLine::add(const std::string& key, double value) {
  if (!std::isfinite(value)) {
    fields_.emplace_back(key, "null");
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  fields_.emplace_back(key, buf);
  return *this;
}

JsonLine& JsonLine::add(const std::string& key, bool value) {
  fields_.emplace_back(key, value ? "true" : "false");
  return *this;
}

std::string JsonLine::str() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out += ", ";
    out += quote(fields_[i].first) + ": " + fields_[i].second;
  }
  return out + "}";
}

std::string JsonLine::raw(const std::string& field) const {
  for (const auto& [k, v] : fields_)
    if (k == field) return v;
  return {};
}

std::string JsonLine::key(const std::vector<std::string>& fields) const {
  std::string out = raw("kind");
  for (const auto& f : fields) out += "|" + f + "=" + raw(f);
  return out;
}

JsonLine parse_flat_json(const std::string& line, bool* ok) {
  JsonLine out;
  *ok = false;
  size_t i = 0;
  const auto skip_ws = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) ++i;
  };
  // Returns the raw text of a string token, quotes included, re-quoted canonically.
  const auto read_string = [&](std::string* decoded) -> bool {
    if (i >= line.size() || line[i] != '"') return false;
    ++i;
    decoded->clear();
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\') {
        if (i + 1 >= line.size()) return false;
        const char e = line[i + 1];
        if (e == 'u') {
          if (i + 5 >= line.size()) return false;
          const unsigned long cp = std::strtoul(line.substr(i + 2, 4).c_str(), nullptr, 16);
          *decoded += cp < 0x80 ? static_cast<char>(cp) : '?';
          i += 6;
          continue;
        }
        *decoded += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
        i += 2;
      } else {
        *decoded += line[i++];
      }
    }
    if (i >= line.size()) return false;
    ++i;
    return true;
  };
  skip_ws();
  if (i >= line.size() || line[i] != '{') return out;
  ++i;
  skip_ws();
  if (i < line.size() && line[i] == '}') {
    *ok = true;
    return out;
  }
  while (i < line.size()) {
    skip_ws();
    std::string key;
    if (!read_string(&key)) return out;
    skip_ws();
    if (i >= line.size() || line[i] != ':') return out;
    ++i;
    skip_ws();
    if (i < line.size() && line[i] == '"') {
      std::string value;
      if (!read_string(&value)) return out;
      out.add(key, value);
    } else {
      const size_t start = i;
      while (i < line.size() && line[i] != ',' && line[i] != '}' && line[i] != ' ') ++i;
      if (i == start) return out;
      out.fields_.emplace_back(key, line.substr(start, i - start));
    }
    skip_ws();
    if (i < line.size() && line[i] == ',') {
      ++i;
      continue;
    }
    if (i < line.size() && line[i] == '}') {
      *ok = true;
      return out;
    }
    return out;
  }
  return out;
}

const std::vector<std::string>& key_fields(const std::string& kind) {
  static const std::map<std::string, std::vector<std::string>> fields = {
      {"gemm", {"dtype", "m", "n", "k"}},
      {"attention", {"pass", "causal", "batch", "heads", "kv_heads", "head_dim", "seq_q", "seq_kv", "dtype"}},
      {"memory", {"op", "bytes"}},
      {"launch", {}},
      {"collective", {"op", "ranks", "nodes", "bytes", "dtype", "in_place"}},
  };
  static const std::vector<std::string> none;
  const auto it = fields.find(kind);
  return it == fields.end() ? none : it->second;
}

namespace {
std::string unquoted(const std::string& raw) {
  return raw.size() >= 2 && raw.front() == '"' ? raw.substr(1, raw.size() - 2) : raw;
}
}  // namespace

bool RawFile::load(std::string* why) {
  std::ifstream in(path_);
  if (!in) return true;  // nothing to resume: start a new file
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    bool ok = false;
    const JsonLine parsed = parse_flat_json(line, &ok);
    if (!ok) {
      *why = path_ + ":" + std::to_string(number) + ": not a flat JSON object";
      return false;
    }
    const std::string kind = unquoted(parsed.raw("kind"));
    if (kind == "header") {
      has_header_ = true;
    } else {
      keys_.insert(parsed.key(key_fields(kind)));
    }
    lines_.push_back(line);
  }
  return true;
}

bool RawFile::has(const JsonLine& id) const {
  return keys_.count(id.key(key_fields(unquoted(id.raw("kind"))))) > 0;
}

bool RawFile::append(const JsonLine& line, std::string* why) {
  const std::string kind = unquoted(line.raw("kind"));
  if (kind == "header") {
    has_header_ = true;
    lines_.insert(lines_.begin(), line.str());
  } else {
    keys_.insert(line.key(key_fields(kind)));
    lines_.push_back(line.str());
  }
  return rewrite(why);
}

bool RawFile::rewrite(std::string* why) const {
  const std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = true;
  for (const auto& l : lines_) {
    ok = ok && std::fwrite(l.data(), 1, l.size(), f) == l.size();
    ok = ok && std::fputc('\n', f) != EOF;
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    *why = "cannot write " + path_ + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace capsim::calibrate
