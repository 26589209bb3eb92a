// Raw measurement file (docs/calibration.md, schema capsim-calibration-raw/1): one JSON object
// per line, written with a small writer of our own so that calibrate needs no JSON library.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace capsim::calibrate {

/// One flat JSON object; keys keep insertion order, so equal inputs give equal bytes.
class JsonLine {
 public:
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  /// Printed with %.9g: nine significant digits keep a nanosecond out of ten seconds.
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, bool value);

  /// The object on one line, without the newline.
  std::string str() const;
  /// `kind` plus the listed fields' raw JSON text: the identity a resumed run compares.
  std::string key(const std::vector<std::string>& fields) const;

  /// Raw JSON text of a field, or empty when absent.
  std::string raw(const std::string& field) const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  ///< key, raw JSON text
  friend JsonLine parse_flat_json(const std::string& line, bool* ok);
};

/// Parses one flat JSON object (strings, numbers, true/false/null; no nesting).
JsonLine parse_flat_json(const std::string& line, bool* ok);

/// Shape fields that identify a measurement of each kind (docs/calibration.md); `kind` is implied.
const std::vector<std::string>& key_fields(const std::string& kind);

/// All lines of the raw file, kept in memory and rewritten atomically after each measurement.
class RawFile {
 public:
  explicit RawFile(std::string path) : path_(std::move(path)) {}

  /// Loads an existing file for --resume; false with `why` when it cannot be read or parsed.
  bool load(std::string* why);
  bool has_header() const { return has_header_; }
  /// True when a measurement with the same kind and shape fields is already present.
  bool has(const JsonLine& id) const;
  /// Appends a line and rewrites the file; false with `why` when writing fails.
  bool append(const JsonLine& line, std::string* why);
  size_t measurements() const { return lines_.empty() ? 0 : lines_.size() - (has_header_ ? 1 : 0); }

 private:
  /// Writes FILE.tmp in the same folder, fsyncs it and renames it over FILE.
  bool rewrite(std::string* why) const;

  std::string path_;
  std::vector<std::string> lines_;
  std::set<std::string> keys_;
  bool has_header_ = false;
};

}  // namespace capsim::calibrate
