#pragma once
/// Helpers for reading our own JSON files strictly: every problem is collected as an
/// Issue with its JSON pointer; unknown keys get the nearest valid key as a hint.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsim/core/diagnostics.hpp"

namespace capsim::io {

/// Deepest nesting of arrays and objects an input may have (real files nest under 10).
inline constexpr int kMaxJsonDepth = 256;

/// Largest input file read whole: scenarios, sweeps, plans, profiles, validation files.
inline constexpr std::uintmax_t kMaxInputFileBytes = std::uintmax_t{64} << 20;

/// Largest data file read whole: request traces and sweep row files.
inline constexpr std::uintmax_t kMaxDataFileBytes = std::uintmax_t{1} << 30;

/// Parse JSON text; malformed input throws InputError naming `origin`, line and column.
/// Also rejected, with line and column: nesting deeper than kMaxJsonDepth, a key twice in
/// one object (parsers disagree on which wins), and a number beyond the range of a double.
nlohmann::json parse_json(std::string_view text, const std::string& origin);

/// Read and parse a file; a missing or unreadable file throws InputError.
nlohmann::json read_json_file(const std::filesystem::path& path);

/// Read a whole file as text, or throw InputError: also for something that is not a
/// regular file (a folder, FIFO or device) and for a file larger than `max_bytes`.
std::string read_text_file(const std::filesystem::path& path, std::uintmax_t max_bytes = kMaxInputFileBytes);

/// Levenshtein edit distance (for "did you mean").
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate nearest to `word`, or "" when none is close (distance > max(2, |word|/2)).
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

/// Escape a key for use in a JSON pointer (RFC 6901).
std::string pointer_escape(std::string_view key);

/// JSON text of `v` (indented when indent >= 0) with bytes that are not UTF-8 replaced by
/// U+FFFD: strings from the command line, file names and foreign logs can hold any bytes,
/// and a report must stay valid JSON.
std::string dump_text(const nlohmann::json& v, int indent = -1);

/// Short text form of a JSON value for messages.
std::string brief(const nlohmann::json& v);

/// Write `text` to `path` atomically: a temporary file `.<name>.tmp<PID>` in the same
/// folder, synced, then renamed over `path`. Temporary files of the same name left by a
/// process that no longer runs (one killed mid-write) are removed first; those of a live
/// process are left alone. A failed write (disk full) throws InputError and leaves `path`
/// as it was.
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

/// Remove the temporary file of a write_file_atomic in progress, if any. Async-signal-safe:
/// for a signal handler that is about to end the process.
void remove_pending_temp_file() noexcept;

/// Strict reader of one JSON object: typed getters record issues instead of throwing;
/// `finish()` reports keys that were never asked for as unknown.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& obj, std::string pointer, std::vector<Issue>& issues);

  bool has(const std::string& key) const;
  /// Marks a key as known without reading it.
  void allow(const std::string& key);
  /// Whether the key holds the string "auto" (SCHEMA.md: not published); marks it known when
  /// it does, so that a typed getter reads it otherwise.
  bool left_auto(const std::string& key);
  const nlohmann::json* get(const std::string& key);  ///< nullptr when absent

  bool integer(const std::string& key, int64_t& out, bool required = false, int64_t min = 1);
  bool number(const std::string& key, double& out, bool required = false, double min = 0);
  bool boolean(const std::string& key, bool& out, bool required = false);
  bool string(const std::string& key, std::string& out, bool required = false);
  /// Integer or the string "auto" (out = nullopt).
  bool integer_or_auto(const std::string& key, std::optional<int64_t>& out, int64_t min = 1);
  /// A share in (0, 1], or "auto" (out left nullopt).
  bool fraction_or_auto(const std::string& key, std::optional<double>& out);
  /// One of `choices` (or "auto" when allow_auto; then out = "auto").
  bool choice(const std::string& key, std::string& out, const std::vector<std::string>& choices,
              bool required = false, bool allow_auto = false);

  void finish();  ///< record unknown keys
  std::string at(const std::string& key) const { return pointer_ + "/" + pointer_escape(key); }
  const std::string& pointer() const { return pointer_; }

 private:
  void type_issue(const std::string& key, const char* expected);
  const nlohmann::json& obj_;
  std::string pointer_;
  std::vector<Issue>& issues_;
  std::vector<std::string> known_;
};

}  // namespace capsim::io
