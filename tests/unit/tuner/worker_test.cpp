// The parent's side of measuring in child processes, against a scripted worker
// (fake_worker.py) that crashes, hangs, faults and fails checks on cue: each such
// config is recorded as failed with its reason, a fresh worker measures the rest.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>

#include "kjit/support/error.h"
#include "kjit/support/options.h"
#include "kjit/tuner/worker.h"

namespace kjit::tuner {
namespace {

WorkerOptions scripted(double check_timeout_s = 30) {
  WorkerOptions o;
  o.argv = {"/usr/bin/env", "python3", *env("KJIT_TEST_SCRIPTS") + "/fake_worker.py"};
  o.check_timeout_s = check_timeout_s;
  o.timing_timeout_s = 30;
  return o;
}

std::map<std::string, Measured> by_config(const std::vector<Measured>& results) {
  std::map<std::string, Measured> out;
  for (const Measured& m : results) out[m.config] = m;
  return out;
}

TEST(Worker, MeasuresThroughTheProtocol) {
  MeasureWorker worker(scripted());
  std::vector<std::string> events;
  const auto r =
      by_config(worker.measure({{"family", "fake"}}, {"a", "bb"}, TimerOptions(), 0,
                               [&](const MeasureEvent& e) { events.push_back(e.phase); }));
  ASSERT_TRUE(r.at("a").ok()) << r.at("a").error;
  EXPECT_NEAR(r.at("a").summary.median_ms, 1.1, 1e-9);
  EXPECT_NEAR(r.at("bb").summary.median_ms, 1.2, 1e-9);
  EXPECT_EQ(r.at("a").summary.runs, 25);
  EXPECT_EQ(r.at("a").resources.registers, 32);
  EXPECT_EQ(events, (std::vector<std::string>{"checking", "checked", "checking", "checked", "timed",
                                              "timed"}));
  EXPECT_EQ(r.at("a").summary.clock_mhz, 0);  // not asked for
  // The worker serves the next job without a restart; the timer's options travel
  // with the job, and the clock the runs were scaled from comes back.
  TimerOptions at_peak;
  at_peak.at_peak_clock = true;
  const auto c = worker.measure({{"family", "fake"}}, {"c"}, at_peak);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].summary.clock_mhz, 1700);
  EXPECT_EQ(worker.starts(), 1);
}

TEST(Worker, TimerOptionsRoundTripThroughJson) {
  TimerOptions o;
  o.warmup = 3;
  o.rounds = 7;
  o.runs_per_round = 2;
  o.flush_l2 = false;
  o.hopeless = 1.5;
  o.at_peak_clock = true;
  const TimerOptions back = timer_options_from_json(to_json(o));
  EXPECT_EQ(back.warmup, 3);
  EXPECT_EQ(back.rounds, 7);
  EXPECT_EQ(back.runs_per_round, 2);
  EXPECT_FALSE(back.flush_l2);
  EXPECT_EQ(back.hopeless, 1.5);
  EXPECT_TRUE(back.at_peak_clock);
  EXPECT_FALSE(timer_options_from_json(nlohmann::json::object()).at_peak_clock);
}

TEST(Worker, CrashesHangsAndFaultsCostOnlyTheirConfig) {
  MeasureWorker worker(scripted(/*check_timeout_s=*/1.0));
  const auto started = std::chrono::steady_clock::now();
  const auto r = by_config(worker.measure(
      {{"family", "fake"}}, {"a", "crash", "b", "hang", "wrong", "fault", "c"}, TimerOptions()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 20);  // the hang cost its timeout, not the tune
  for (const char* ok : {"a", "b", "c"}) EXPECT_TRUE(r.at(ok).ok()) << ok << ": " << r.at(ok).error;
  EXPECT_NE(r.at("crash").error.find("signal 11"), std::string::npos) << r.at("crash").error;
  EXPECT_NE(r.at("hang").error.find("hung"), std::string::npos) << r.at("hang").error;
  EXPECT_NE(r.at("fault").error.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
      << r.at("fault").error;
  EXPECT_NE(r.at("wrong").error.find("wrong result"), std::string::npos);
  // Its infinite check error came as null (JSON has no infinity): it failed its
  // config, not the job.
  EXPECT_TRUE(std::isinf(r.at("wrong").check_error));
  EXPECT_EQ(worker.starts(), 4);  // the first, then after the crash, the hang and the fault
}

// The check's timeout runs from the last event: a worker hung in a kernel that
// prints a stray line every 0.2 s (a driver's warning) was never stopped, since
// each line started the timeout again.
TEST(Worker, StrayOutputDoesNotKeepAHungCheckAlive) {
  MeasureWorker worker(scripted(/*check_timeout_s=*/1.0));
  const auto started = std::chrono::steady_clock::now();
  const auto r =
      by_config(worker.measure({{"family", "fake"}}, {"noisy-hang", "a"}, TimerOptions()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 10);
  EXPECT_NE(r.at("noisy-hang").error.find("hung"), std::string::npos) << r.at("noisy-hang").error;
  EXPECT_TRUE(r.at("a").ok()) << r.at("a").error;
}

// An event of the wrong shape is the worker's error, naming what is wrong: a
// median that is a string ended the run as an internal error (the JSON library's
// type error), and a time of -1 ms was a result.
TEST(Worker, MalformedEventsAreTheWorkersError) {
  for (const char* config : {"typed", "negative"}) {
    SCOPED_TRACE(config);
    MeasureWorker worker(scripted());
    try {
      worker.measure({{"family", "fake"}}, {config}, TimerOptions());
      ADD_FAILURE() << "no error";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("sent an event kjit cannot read"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Worker, AWorkerThatCannotStartIsAnError) {
  WorkerOptions o;
  o.argv = {"/nonexistent/kjit", "__tune-worker"};
  MeasureWorker worker(o);
  EXPECT_THROW(worker.measure({{"family", "fake"}}, {"a"}, TimerOptions()), UserError);
}

}  // namespace
}  // namespace kjit::tuner
