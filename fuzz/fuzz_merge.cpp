// capsim merge: a part's summary (the first line of the input) and its rows (the rest).
#include "capsim/io/sweep.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  const std::string_view text = fuzz::as_text(data, size);
  const size_t nl = text.find('\n');
  const std::string_view summary = text.substr(0, nl), rows = nl == std::string_view::npos ? "" : text.substr(nl + 1);
  return fuzz::reader([&] {
    fuzz::write_input(summary, "rows.jsonl.summary.json");
    io::merge_parts({fuzz::write_input(rows, "rows.jsonl")}, fuzz::scratch_dir() / "merged.jsonl");
  });
}
