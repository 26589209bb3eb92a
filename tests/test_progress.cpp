// The progress line of long commands: its text for fixed counts and times, when it shows,
// and that it stays silent off a terminal.

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capsim/io/progress.hpp"

using capsim::io::progress_duration;
using capsim::io::progress_line;
using capsim::io::ProgressReporter;

TEST(Progress, LineHasCountsRateEtaAndElapsed) {
  // 12 of 40 cases in 12/3.1 s: 3.1 per second, 28 left take 9 s.
  EXPECT_EQ(progress_line("validate", "cases", 12, 40, 0, 12 / 3.1, 4.2), "validate 12/40 cases, 3.1/s, ETA 9 s, 4 s elapsed");
  // Fast and slow rates keep a readable number of digits.
  EXPECT_EQ(progress_line("search", "layouts", 31000, 100000, 0, 10, 10), "search 31000/100000 layouts, 3100/s, ETA 22 s, 10 s elapsed");
  EXPECT_EQ(progress_line("max-qps", "probes", 1, 30, 0, 4, 4), "max-qps 1/30 probes, 0.25/s, ETA 1 min 56 s, 4 s elapsed");
}

TEST(Progress, LineWithoutEtaWhenUnknownOrDone) {
  EXPECT_EQ(progress_line("des", "tasks", 0, 100, 0, 3, 3), "des 0/100 tasks, 0.00/s, 3 s elapsed");
  EXPECT_EQ(progress_line("des", "tasks", 500, 0, 0, 2, 2), "des 500 tasks, 250/s, 2 s elapsed");
  EXPECT_EQ(progress_line("des", "tasks", 100, 100, 0, 2, 2), "des 100/100 tasks, 50.0/s, 2 s elapsed");
}

TEST(Progress, RateLeavesOutWorkDoneBefore) {
  // 90 rows resumed from a journal, 10 run in 5 s: 2 per second, 100 left take 50 s.
  EXPECT_EQ(progress_line("sweep", "rows", 100, 200, 90, 5, 5), "sweep 100/200 rows, 2.0/s, ETA 50 s, 5 s elapsed");
}

TEST(Progress, Durations) {
  EXPECT_EQ(progress_duration(0.4), "0 s");
  EXPECT_EQ(progress_duration(59.4), "59 s");
  EXPECT_EQ(progress_duration(125), "2 min 05 s");
  EXPECT_EQ(progress_duration(3720), "1 h 02 min");
}

namespace {

struct Fake {
  double now = 0;
  std::vector<std::string> written;
  ProgressReporter::Options options(bool terminal) {
    ProgressReporter::Options o;
    o.terminal = terminal;
    o.write = [this](const std::string& s) { written.push_back(s); };
    o.clock = [this] { return now; };
    o.ticker = false;
    return o;
  }
};

}  // namespace

TEST(Progress, ShowsOnlyAfterTheDelayAndEndsWithANewline) {
  Fake f;
  ProgressReporter rep("validate a.json", "cases", f.options(true));
  ASSERT_NE(rep.counter(), nullptr);
  rep.counter()->set_total(40);
  rep.counter()->add(5);
  f.now = 1.0;
  rep.tick();
  EXPECT_TRUE(f.written.empty()) << "nothing before ~2 s";
  rep.counter()->add(7);
  f.now = 12 / 3.1;
  rep.tick();
  ASSERT_EQ(f.written.size(), 1u);
  EXPECT_EQ(f.written[0], "\rcapsim: validate a.json 12/40 cases, 3.1/s, ETA 9 s, 4 s elapsed");
  EXPECT_TRUE(capsim::io::progress_line_open());
  f.now += 0.01;
  rep.tick();
  EXPECT_EQ(f.written.size(), 1u) << "a few redraws a second at most";
  rep.counter()->add(28);
  f.now = 10;
  rep.finish();
  ASSERT_EQ(f.written.size(), 3u);
  EXPECT_EQ(f.written[1], "\rcapsim: validate a.json 40/40 cases, 4.0/s, 10 s elapsed        ");
  EXPECT_EQ(f.written[2], "\n");
  EXPECT_FALSE(capsim::io::progress_line_open());
  rep.finish();
  EXPECT_EQ(f.written.size(), 3u);
}

TEST(Progress, QuickRunLeavesNoTrace) {
  Fake f;
  {
    ProgressReporter rep("search", "layouts", f.options(true));
    rep.counter()->set_total(10);
    rep.counter()->add(10);
    f.now = 1.5;
    rep.tick();
  }
  EXPECT_TRUE(f.written.empty());
}

TEST(Progress, PhaseRestartsTheRate) {
  Fake f;
  ProgressReporter rep("validate a.json", "cases", f.options(true));
  rep.counter()->set_total(4);
  rep.counter()->add(4);
  f.now = 3;
  rep.phase("validate b.json", "cases", 10);
  rep.counter()->add(2);
  f.now = 4;
  rep.tick();
  ASSERT_EQ(f.written.size(), 1u);
  EXPECT_EQ(f.written[0], "\rcapsim: validate b.json 2/10 cases, 2.0/s, ETA 4 s, 4 s elapsed");
}

TEST(Progress, SilentOffATerminal) {
  Fake f;
  {
    ProgressReporter rep("search", "layouts", f.options(false));
    EXPECT_EQ(rep.counter(), nullptr) << "core skips counting";
    f.now = 100;
    rep.tick();
    rep.phase("other", "things", 5);
    rep.finish();
  }
  EXPECT_TRUE(f.written.empty());
}

TEST(Progress, TickerThreadDrawsWhileWorkersCount) {
  std::vector<std::string> written;
  std::mutex mu;
  ProgressReporter::Options o;
  o.terminal = true;
  o.write = [&](const std::string& s) {
    const std::lock_guard<std::mutex> lock(mu);
    written.push_back(s);
  };
  o.delay_s = 0;
  o.interval_s = 0.01;
  {
    ProgressReporter rep("search", "layouts", o);
    rep.counter()->set_total(4000);
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
      workers.emplace_back([&] {
        for (int i = 0; i < 1000; ++i) rep.counter()->add(1);
      });
    for (auto& t : workers) t.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(written.size(), 2u);
  EXPECT_EQ(written.back(), "\n");
  EXPECT_NE(written[written.size() - 2].find("4000/4000 layouts"), std::string::npos) << written[written.size() - 2];
}
