#pragma once
/// A serving engine's iterations recovered from its clients' streamed token times.
///
/// Every running request receives one token at the end of each engine step, so the gaps
/// between a request's streamed tokens are the durations of the steps it ran in, and two
/// requests that ran together see the same durations over the steps they shared (up to the
/// client's timing jitter). Matching each request's gaps against the others' places every
/// request on one sequence of steps: how long each step took, how many requests it decoded
/// and which requests' prompts it finished. A benchmark client that saves per-request
/// timings (vLLM's and SGLang's benchmark_serving.py --save-result) thus yields the engine's
/// step time against its batch, with no access to the server.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "capsim/core/progress.hpp"

namespace capsim {

/// One request as the client timed it.
struct StreamedRequest {
  double ttft_s = 0;           ///< sending the request to its first token
  std::vector<double> itl_s;   ///< gaps between its later tokens (output tokens - 1)
  int64_t prompt_tokens = 0;   ///< its prompt's length
};

/// The steps recovered from a set of StreamedRequest.
struct StepTimeline {
  static constexpr size_t kUnplaced = std::numeric_limits<size_t>::max();
  std::vector<double> step_s;          ///< each step's duration: the median of the gaps placed on it
  std::vector<int64_t> decodes;        ///< placed requests that received a later token in the step
  std::vector<double> decode_context;  ///< the sum of their cached tokens (prompt and tokens so far)
  std::vector<int64_t> first_tokens;   ///< placed requests whose first token the step produced
  std::vector<int64_t> prompt_tokens;  ///< the sum of those requests' prompt tokens
  /// Per request: the step that produced its second token (its first gap), or kUnplaced.
  std::vector<size_t> position;
  size_t placed = 0;  ///< requests placed on the steps
  /// The search stopped at StepRecovery::max_comparisons with requests still to place.
  bool truncated = false;
};

/// Options of recover_steps.
struct StepRecovery {
  /// Largest mean |difference| between a request's gaps and the steps they are matched to.
  double tolerance_s = 0.5e-3;
  /// Fewest gaps a request must share with the steps placed so far to be matched; requests
  /// with fewer gaps are not placed (too short to tell one position from another).
  size_t min_overlap = 15;
  /// Most gap comparisons the search makes. Real runs' gaps tell positions apart within a
  /// few comparisons per offset; gaps that are all alike (a flat synthetic file) would make
  /// every offset match fully, so the search stops here and says so.
  uint64_t max_comparisons = uint64_t{2} << 30;
};

/// Places the requests on one sequence of steps, starting from the request with the most
/// gaps and extending the sequence as requests overlap its ends, until no further request
/// matches. A request is placed where its gaps differ least from the steps (mean absolute
/// difference, within `tolerance_s`). Deterministic: the same requests give the same steps.
/// `progress`, where given, counts the requests tried in each pass against the requests.
StepTimeline recover_steps(const std::vector<StreamedRequest>& requests, const StepRecovery& options = {},
                           ProgressCounter* progress = nullptr);

}  // namespace capsim
