#pragma once
/// Timelines of a discrete-event run as Chrome trace JSON (opens in ui.perfetto.dev), and
/// the engine's extra report keys.

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "capsim/core/pipeline_sim.hpp"
#include "capsim/core/serving.hpp"

namespace capsim::io {

/// One process per GPU (pipeline rank, sorted by stage), one thread per stream, complete
/// events with microbatch, chunk and FLOPs/bytes in args, flow arrows from each send to
/// the computation it feeds, and a counter track of activation memory in use.
std::string chrome_trace(const DesStep& d);

/// A serving run's timeline: one process per replica with a slice per engine iteration
/// (decodes and prefill tokens in args) and counters of KV-cache use and batch size.
std::string serving_trace(const ServingResult& r);

/// `des` report section: schedule, per-stage busy/idle seconds, peak activation bytes read
/// off the timeline, critical-path composition.
nlohmann::json des_json(const DesStep& d);

}  // namespace capsim::io
