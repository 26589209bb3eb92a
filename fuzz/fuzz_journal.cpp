// Sweep journals: the grid line, then one row per line (a resumed sweep reads them).
#include <nlohmann/json.hpp>

#include "capsim/io/sweep.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  // The grid the journal must belong to: hash 0x1 (the seeds' first line) and 8 rows.
  return fuzz::reader(
      [&] { (void)io::read_journal(fuzz::write_input(fuzz::as_text(data, size), "rows.jsonl.journal"), 1, 8); });
}
