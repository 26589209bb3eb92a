#pragma once
/// Shared by the fuzz targets: the bytes of one input as a file (most readers take a path:
/// the name carries meaning, e.g. a trace's extension), and the rule that an input error is
/// an answer while any other exception is a bug and must crash the run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

#include "capsim/core/diagnostics.hpp"

namespace capsim::fuzz {

/// A folder of this process, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/capsim-fuzz-XXXXXX";
    if (!::mkdtemp(templ.data())) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

/// Writes `bytes` to `name` in the scratch folder and returns its path.
inline std::filesystem::path write_input(std::string_view bytes, const std::string& name) {
  const std::filesystem::path p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) std::abort();
  return p;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Runs `read`; an InputError is the answer to a bad input, anything else escapes (libFuzzer
/// reports an uncaught exception as a crash).
template <class F>
int reader(F&& read) {
  try {
    read();
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace capsim::fuzz
