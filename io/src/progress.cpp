#include "capsim/io/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace capsim::io {

namespace {

std::atomic<bool> g_line_open{false};

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string rate_text(double rate) {
  if (rate >= 100) return printf_string("%.0f", rate);
  if (rate >= 1) return printf_string("%.1f", rate);
  return printf_string("%.2f", rate);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string progress_duration(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  if (s < 60) return std::to_string(s) + " s";
  char buf[64];
  if (s < 3600) std::snprintf(buf, sizeof buf, "%lld min %02lld s", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lld h %02lld min", s / 3600, (s % 3600) / 60);
  return buf;
}

std::string progress_line(std::string_view what, std::string_view unit, int64_t done, int64_t total, int64_t done_before,
                          double phase_s, double elapsed_s) {
  std::string s(what);
  if (!s.empty()) s += ' ';
  s += std::to_string(done);
  if (total > 0) s += "/" + std::to_string(total);
  if (!unit.empty()) s += " " + std::string(unit);
  const double fresh = static_cast<double>(std::max<int64_t>(0, done - done_before));
  const double rate = phase_s > 0 ? fresh / phase_s : 0.0;
  s += ", " + rate_text(rate) + "/s";
  if (total > 0 && done < total && rate > 0) s += ", ETA " + progress_duration(static_cast<double>(total - done) / rate);
  s += ", " + progress_duration(elapsed_s) + " elapsed";
  return s;
}

bool progress_line_open() { return g_line_open.load(); }

namespace {
ProgressReporter::Options terminal_options() {
  ProgressReporter::Options opt;
  opt.terminal = ::isatty(STDERR_FILENO) != 0;
  return opt;
}
}  // namespace

ProgressReporter::ProgressReporter(std::string what, std::string unit)
    : ProgressReporter(std::move(what), std::move(unit), terminal_options()) {}

ProgressReporter::ProgressReporter(std::string what, std::string unit, Options opt)
    : opt_(std::move(opt)), what_(std::move(what)), unit_(std::move(unit)) {
  if (!opt_.terminal) return;  // silent: no clock reads, no thread
  if (!opt_.clock) opt_.clock = steady_seconds;
  if (!opt_.write)
    opt_.write = [](const std::string& text) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    };
  start_ = phase_start_ = opt_.clock();
  if (opt_.ticker)
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cv_.wait_for(lock, std::chrono::duration<double>(opt_.interval_s));
        if (stop_) break;
        lock.unlock();
        tick();
        lock.lock();
      }
    });
}

ProgressReporter::~ProgressReporter() { finish(); }

void ProgressReporter::phase(std::string what, std::string unit, int64_t total, int64_t already_done) {
  if (!opt_.terminal) return;
  const std::lock_guard<std::mutex> lock(mu_);
  what_ = std::move(what);
  unit_ = std::move(unit);
  counter_.done.store(already_done);
  counter_.total.store(total);
  done_before_ = already_done;
  phase_start_ = opt_.clock();
}

std::string ProgressReporter::render_locked(double now) const {
  return "capsim: " + progress_line(what_, unit_, counter_.done.load(std::memory_order_relaxed),
                                    counter_.total.load(std::memory_order_relaxed), done_before_, now - phase_start_,
                                    now - start_);
}

void ProgressReporter::draw_locked(const std::string& line) {
  // Spaces over what a longer earlier line left behind.
  std::string text = "\r" + line;
  if (line.size() < drawn_width_) text.append(drawn_width_ - line.size(), ' ');
  drawn_width_ = line.size();
  opt_.write(text);
  shown_ = true;
  g_line_open.store(true);
}

void ProgressReporter::tick() {
  if (!opt_.terminal) return;
  const std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  const double now = opt_.clock();
  if (now - start_ < opt_.delay_s) return;
  if (last_draw_ >= 0 && now - last_draw_ < opt_.interval_s * 0.5) return;
  last_draw_ = now;
  draw_locked(render_locked(now));
}

void ProgressReporter::finish() {
  if (!opt_.terminal) return;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  const std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  if (!shown_) return;  // a quick run leaves no trace
  draw_locked(render_locked(opt_.clock()));
  opt_.write("\n");
  g_line_open.store(false);
}

}  // namespace capsim::io
