// tune() with a scripted measurer: which configs each strategy measures, what is
// stored, resuming from the trials table, the budget, failures, and the tie-break.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>
#include <thread>

#include "kjit/cache/store.h"
#include "kjit/support/error.h"
#include "kjit/tuner/tune.h"
#include "tests/unit/tuner/fake_family.h"

namespace kjit::tuner {
namespace {

namespace fs = std::filesystem;
using testing::FakeProblem;

// Times each config as `truth` says, with a tight interval, counting calls.
struct ScriptedMeasurer {
  std::map<std::string, double> truth;
  std::map<std::string, std::string> errors;
  double spread = 0.002;
  double sleep_s = 0;
  // Times the finals give (a job of single-run rounds), where they differ from `truth`.
  std::map<std::string, double> finals_truth;
  bool die_in_finals = false;  // the measuring process ends during the finals
  std::vector<std::string> measured;
  int calls = 0;
  TimerOptions timer;                     // the last job's
  std::vector<std::string> last_configs;  // the last job's
  std::set<std::string> problems;         // every job's problem's name

  Measurer get() {
    return [this](const TuningProblem& problem, const std::vector<std::string>& configs,
                  const TimerOptions& options, double, const MeasureListener& listener) {
      ++calls;
      if (die_in_finals && options.runs_per_round == 1)
        throw UserError("the measuring process ended (killed)");
      if (auto* fake = dynamic_cast<const FakeProblem*>(&problem)) problems.insert(fake->name);
      timer = options;
      last_configs = configs;
      if (sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      std::vector<Measured> out;
      for (const std::string& c : configs) {
        Measured m;
        m.config = c;
        measured.push_back(c);
        if (errors.count(c)) {
          m.error = errors[c];
          if (listener) listener(MeasureEvent{"failed", c, &m});
        } else {
          const bool finals = options.runs_per_round == 1 && finals_truth.count(c);
          m.summary = from_stored(finals ? finals_truth.at(c) : truth.at(c), spread, 25);
        }
        out.push_back(m);
      }
      return out;
    };
  }
};

class TuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kjit-tune-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    store_ = cache::Store::open(dir_ + "/kjit.db");
    // 12 configs over 6 groups (k0..k5), two variants each; the model
    // prefers c0, c2, c4, ...; the truth prefers k3's second variant.
    for (int i = 0; i < 12; ++i) {
      const std::string config = "c=" + std::to_string(i);
      problem_.configs[config] = {1.0 + 0.01 * i, "k" + std::to_string(i / 2)};
      measurer_.truth[config] = 2.0 - 0.1 * (i / 2) * (i % 2 ? 1.5 : 1.0);
    }
    measurer_.truth["c=7"] = 0.5;  // k3, the second variant: the fastest of all
  }
  void TearDown() override { fs::remove_all(dir_); }

  TuneResult run(TuneOptions options = {}) {
    Chooser chooser(store_, "gpu", device_);
    return tune(problem_, chooser, measurer_.get(), options);
  }

  std::string dir_;
  std::shared_ptr<cache::Store> store_;
  const cuda::DeviceProperties device_ = cuda::planning_device("h200");
  FakeProblem problem_;
  ScriptedMeasurer measurer_;
};

TEST_F(TuneTest, ModelStrategyCoversTopKernelsThenTheWinnersVariants) {
  TuneOptions options;
  options.top = 4;
  const TuneResult r = run(options);
  // Phase 1: the best config of the 4 best groups (c0, c2, c4, c6); phase 2: the
  // other variants of the two fastest groups: c7 (group k3, it wins) and c5 (k2).
  std::set<std::string> measured(measurer_.measured.begin(), measurer_.measured.end());
  EXPECT_EQ(measured, (std::set<std::string>{"c=0", "c=2", "c=4", "c=5", "c=6", "c=7"}));
  EXPECT_EQ(r.config, "c=7");
  EXPECT_EQ(r.default_config, "c=0");  // the model's choice before the tune
  // Stored: the tuning and every trial.
  const auto tuning = store_->find_tuning("gpu", problem_.signature());
  ASSERT_TRUE(tuning.has_value());
  EXPECT_EQ(tuning->config, "c=7");
  EXPECT_EQ(store_->trials_for("gpu", problem_.signature()).size(), 6u);
  // The chooser now takes the tuning.
  Chooser chooser(store_, "gpu", device_);
  EXPECT_EQ(chooser.choose(problem_).source, Choice::Source::Store);
}

// A problem tuned as another (packed attention batches, as their length profile's
// representative) has that one measured, and the tuning and trials are stored under
// the signature the two share: what the chooser finds for either.
TEST_F(TuneTest, AProblemTunedAsAnotherMeasuresThatOne) {
  auto representative = std::make_shared<FakeProblem>(problem_);
  representative->name = "fake n=8";
  FakeProblem exact = problem_;
  exact.tuned_as_problem = representative;
  Chooser chooser(store_, "gpu", device_);
  const TuneResult r = tune(exact, chooser, measurer_.get(), TuneOptions{});
  EXPECT_EQ(r.signature, "fake n=8");
  EXPECT_EQ(measurer_.problems, (std::set<std::string>{"fake n=8"}));
  ASSERT_TRUE(store_->find_tuning("gpu", "fake n=8").has_value());
  EXPECT_FALSE(store_->find_tuning("gpu", exact.signature()).has_value());
  EXPECT_EQ(store_->find_tuning("gpu", "fake n=8")->config, r.config);
  chooser.refresh();
  EXPECT_EQ(chooser.choose(exact).source, Choice::Source::Store);
  EXPECT_EQ(chooser.choose(exact).config, r.config);
}

// Where a family names schedules the model cannot rank (elementwise grids), phase 1
// takes the top groups of each schedule: with k = 2, groups k0, k1 of schedule "a"
// and k4, k5 of "b", though the model ranks all of "a" first; phase 2 then the
// variants of the two fastest groups, both of "b" (without schedules: k0, k1, then
// k1's variant c3 would win at 1.85 ms).
TEST_F(TuneTest, ModelStrategyCoversTheTopGroupsOfEverySchedule) {
  for (int i = 8; i < 12; ++i) problem_.schedules["c=" + std::to_string(i)] = "b";
  for (int i = 0; i < 8; ++i) problem_.schedules["c=" + std::to_string(i)] = "a";
  TuneOptions options;
  options.top = 2;
  const TuneResult r = run(options);
  std::set<std::string> measured(measurer_.measured.begin(), measurer_.measured.end());
  EXPECT_EQ(measured, (std::set<std::string>{"c=0", "c=2", "c=8", "c=9", "c=10", "c=11"}));
  EXPECT_EQ(r.config, "c=11");  // 2.0 - 0.1 x 5 x 1.5 = 1.25 ms
}

// Phase 2 also takes the variants of groups whose best is within 5% of the fastest:
// k2's representative (c4) is third, 4.5% behind (an H100's 8192^3 had a group 4.7%
// behind whose variant was the fastest), and its variant c5 is the fastest of all;
// k3, 50% behind, is not expanded.
TEST_F(TuneTest, ModelStrategyExpandsGroupsCloseToTheFastest) {
  measurer_.truth = {{"c=0", 1.0},   {"c=1", 1.1}, {"c=2", 1.01}, {"c=3", 1.1},
                     {"c=4", 1.045}, {"c=5", 0.9}, {"c=6", 1.5},  {"c=7", 0.5}};
  for (int i = 8; i < 12; ++i) measurer_.truth["c=" + std::to_string(i)] = 2.0;
  TuneOptions options;
  options.top = 4;
  const TuneResult r = run(options);
  std::set<std::string> measured(measurer_.measured.begin(), measurer_.measured.end());
  EXPECT_EQ(measured, (std::set<std::string>{"c=0", "c=1", "c=2", "c=3", "c=4", "c=5", "c=6"}));
  EXPECT_EQ(r.config, "c=5");
}

TEST_F(TuneTest, ExhaustiveMeasuresEverythingAndRandomIsSeeded) {
  TuneOptions options;
  options.strategy = Strategy::Exhaustive;
  EXPECT_EQ(run(options).measured, 12);
  // Every config once, then the fastest and the default again in the finals.
  EXPECT_EQ(std::set<std::string>(measurer_.measured.begin(), measurer_.measured.end()).size(),
            12u);
  EXPECT_EQ(measurer_.measured.size(), 14u);

  TuneOptions random;
  random.strategy = Strategy::Random;
  random.top = 3;
  random.force = true;
  random.seed = 7;
  measurer_.measured.clear();
  run(random);
  const std::vector<std::string> first = measurer_.measured;
  measurer_.measured.clear();
  run(random);
  EXPECT_EQ(measurer_.measured, first);  // the same seed draws the same configs
  EXPECT_LE(first.size(), 4u);           // 3 drawn (+ the default if not among them)
}

TEST_F(TuneTest, ResumesFromTheTrialsTable) {
  TuneOptions options;
  options.top = 4;
  const TuneResult first = run(options);
  measurer_.measured.clear();
  measurer_.calls = 0;
  const TuneResult again = run(options);
  EXPECT_EQ(measurer_.calls, 0);  // everything was in the store
  EXPECT_EQ(again.resumed, first.measured);
  EXPECT_EQ(again.config, first.config);
  options.force = true;
  run(options);
  EXPECT_GT(measurer_.calls, 0);
}

TEST_F(TuneTest, FailuresAreRecordedAndNeverWin) {
  measurer_.errors["c=7"] = "wrong result: relative L2 error inf";
  measurer_.errors["c=6"] = "hung: the check did not finish in 60 s";
  TuneOptions options;
  options.top = 4;
  const TuneResult r = run(options);
  EXPECT_NE(r.config, "c=7");
  EXPECT_NE(r.config, "c=6");
  EXPECT_EQ(r.config, "c=5");  // the fastest that passed: c=4's variant (phase 2)
  int failed = 0;
  for (const cache::TrialRecord& t : store_->trials_for("gpu", problem_.signature()))
    if (!t.error.empty()) {
      ++failed;
      EXPECT_TRUE(t.error.find("hung") == 0 || t.error.find("wrong") == 0) << t.error;
    }
  EXPECT_EQ(failed, 1);  // c=7 is never measured: phase 2 follows a winner that passed
  EXPECT_EQ(r.failed, 1);
}

// A config whose check hung is resumed as failed by a tune with the same limit,
// and measured again by one with a longer limit (kjit tune --timeout); its new
// verdict replaces the stored one. Other failures stay failed.
TEST_F(TuneTest, HungTrialsAreMeasuredAgainWithALongerTimeout) {
  measurer_.errors["c=7"] = hung_error(60);
  measurer_.errors["c=6"] = "wrong result: relative L2 error inf";
  TuneOptions options;
  options.strategy = Strategy::Exhaustive;
  options.check_timeout_s = 60;
  const TuneResult first = run(options);
  EXPECT_NE(first.config, "c=7");
  EXPECT_EQ(hung_within(hung_error(60)), 60);
  EXPECT_EQ(hung_within("wrong result: relative L2 error inf"), 0);

  measurer_.measured.clear();
  measurer_.errors.erase("c=7");  // with time enough it passes, the fastest of all
  const TuneResult same = run(options);
  EXPECT_TRUE(measurer_.measured.empty() ||
              std::find(measurer_.measured.begin(), measurer_.measured.end(), "c=7") ==
                  measurer_.measured.end());
  EXPECT_NE(same.config, "c=7");

  measurer_.measured.clear();
  options.check_timeout_s = 300;
  const TuneResult longer = run(options);
  EXPECT_NE(std::find(measurer_.measured.begin(), measurer_.measured.end(), "c=7"),
            measurer_.measured.end());
  EXPECT_EQ(std::find(measurer_.measured.begin(), measurer_.measured.end(), "c=6"),
            measurer_.measured.end());
  EXPECT_EQ(longer.config, "c=7");
  for (const cache::TrialRecord& t : store_->trials_for("gpu", problem_.signature()))
    if (t.config == "c=7") {
      EXPECT_EQ(t.error, "") << "the passing trial replaced the hung one";
    }

  // A config that never passed (c=6, a wrong result before) hangs within 60.4 s, then
  // again within 300 s: each newer failure replaces the stored one (the old row said
  // 60 s, and every later tune at 300 s measured it again), and a tune at the limit
  // it hung within resumes it. A fractional limit reads back exactly.
  measurer_.errors["c=6"] = hung_error(60.4);
  options.force = true;
  options.check_timeout_s = 60.4;
  run(options);
  options.force = false;
  measurer_.measured.clear();
  run(options);
  EXPECT_EQ(std::find(measurer_.measured.begin(), measurer_.measured.end(), "c=6"),
            measurer_.measured.end())
      << "a config hung within 60.4 s was measured again at 60.4 s";
  EXPECT_EQ(hung_within(hung_error(60.4)), 60.4);
  measurer_.errors["c=6"] = hung_error(300);
  options.check_timeout_s = 300;
  measurer_.measured.clear();
  run(options);
  EXPECT_NE(std::find(measurer_.measured.begin(), measurer_.measured.end(), "c=6"),
            measurer_.measured.end());
  measurer_.measured.clear();
  run(options);
  EXPECT_EQ(std::find(measurer_.measured.begin(), measurer_.measured.end(), "c=6"),
            measurer_.measured.end())
      << "a config hung within 300 s was measured again at 300 s";
  for (const cache::TrialRecord& t : store_->trials_for("gpu", problem_.signature()))
    if (t.config == "c=6") {
      EXPECT_EQ(hung_within(t.error), 300) << "[" << t.error << "]";
    }
}

TEST_F(TuneTest, BudgetStopsBetweenJobs) {
  TuneOptions options;
  options.strategy = Strategy::Exhaustive;
  options.batch = 2;
  options.budget_s = 0.05;
  measurer_.sleep_s = 0.04;
  const TuneResult r = run(options);
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_LT(measurer_.measured.size(), 12u);
  EXPECT_FALSE(r.config.empty());  // the best of what was measured
}

// A budget spent by a phase's last job stops the tune before the next phase
// compiles (it compiled in vain before), and leaves the finals out. Spent by the
// last job of the last phase, it does not stop the finals: every candidate was
// measured, and a resumed tune keeps the stored tuning as the finals decided it.
TEST_F(TuneTest, BudgetSpentByAPhaseStopsBeforeTheNextCompiles) {
  TuneOptions options;
  options.top = 4;
  options.batch = 100;  // a phase is one job
  options.budget_s = 0.02;
  measurer_.sleep_s = 0.05;
  std::vector<std::string> phases;
  Chooser chooser(store_, "gpu", device_);
  const TuneResult r = tune(problem_, chooser, measurer_.get(), options,
                            [&](const TuneProgress& p) { phases.push_back(p.phase); });
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_EQ(measurer_.calls, 1);  // phase 1's job; no phase 2, no finals
  const auto measuring = std::find(phases.begin(), phases.end(), "measuring");
  ASSERT_NE(measuring, phases.end());
  EXPECT_EQ(std::find(measuring, phases.end(), "compiling"), phases.end())
      << "phase 2 compiled with the budget spent";

  measurer_.calls = 0;
  options.strategy = Strategy::Exhaustive;
  options.force = true;
  const TuneResult all = run(options);
  EXPECT_FALSE(all.budget_exhausted);
  EXPECT_EQ(measurer_.calls, 2);  // every candidate, then the finals
}

// Within the fastest's 95% interval: no split-K first, then the model's prior
// prediction, then the text, whatever order the measurements came in.
TEST_F(TuneTest, ComputeBoundProblemsAreTimedAtThePeakClock) {
  // The fake predicts "memory" for every config: raw times.
  TuneResult r = run();
  EXPECT_FALSE(measurer_.timer.at_peak_clock);
  EXPECT_FALSE(r.at_peak_clock);
  problem_.bound = "compute";
  TuneOptions force;
  force.force = true;
  r = run(force);
  EXPECT_TRUE(measurer_.timer.at_peak_clock);
  EXPECT_TRUE(r.at_peak_clock);
}

TEST_F(TuneTest, FinalsTimeTheCloseOnesAgainRunByRun) {
  // Phase 1 finds groups k5 and k4 fastest, phase 2 measures their second variants:
  // c=9 (0.505) the fastest, c=11 (0.51) within 2% of it; the default (the model's
  // favourite, c=0) far behind. Timed again together, c=11 is the faster.
  measurer_.truth["c=9"] = 0.505;
  measurer_.truth["c=11"] = 0.51;
  measurer_.finals_truth = {{"c=9", 0.52}, {"c=11", 0.50}};
  const TuneResult r = run();
  EXPECT_EQ(measurer_.timer.runs_per_round, 1);
  EXPECT_EQ(measurer_.timer.rounds, TimerOptions().rounds * TimerOptions().runs_per_round);
  EXPECT_EQ(measurer_.timer.hopeless, 0);
  // The two close ones, and the default (c=0) however far behind it measured.
  EXPECT_EQ(std::set<std::string>(measurer_.last_configs.begin(), measurer_.last_configs.end()),
            (std::set<std::string>{"c=9", "c=11", "c=0"}));
  EXPECT_EQ(r.finalists.size(), 3u);
  EXPECT_EQ(r.config, "c=11");
  EXPECT_NEAR(r.summary.median_ms, 0.50, 1e-9);
  // The finals' times went to the store (which keeps the faster of two measurements
  // of one config: c=11's, not c=9's).
  for (const cache::TrialRecord& t : store_->trials_for("gpu", r.signature)) {
    if (t.config == "c=11") {
      EXPECT_NEAR(t.measured.median_ms, 0.50, 1e-9);
    }
  }
  // Resumed with every trial stored: no finals, no GPU time.
  const int calls = measurer_.calls;
  const TuneResult again = run();
  EXPECT_EQ(measurer_.calls, calls);
  EXPECT_TRUE(again.finalists.empty());
  EXPECT_EQ(again.config, "c=11");
}

// Measured seconds apart (and scaled to the peak clock), the default can fall well
// behind a config it beats side by side: on the H200, 4096 x 11008 x 4096's default
// measured 6% behind a ping-pong config, then ran 6% faster than it in one process.
// The default runs in the finals, and the finals decide.
TEST_F(TuneTest, TheDefaultRunsInTheFinalsHoweverFarBehind) {
  measurer_.truth["c=0"] = 0.53;  // 6% behind c=7 (0.5) when timed apart
  measurer_.finals_truth = {{"c=0", 0.47}, {"c=7", 0.50}};
  TuneOptions options;
  options.top = 4;  // phase 2 reaches c=7 (ModelStrategyCoversTopKernelsThenTheWinnersVariants)
  const TuneResult r = run(options);
  EXPECT_EQ(measurer_.timer.runs_per_round, 1);  // the last job was the finals
  EXPECT_EQ(std::set<std::string>(measurer_.last_configs.begin(), measurer_.last_configs.end()),
            (std::set<std::string>{"c=7", "c=0"}));
  EXPECT_EQ(r.config, "c=0");
  EXPECT_NEAR(r.summary.median_ms, 0.47, 1e-9);
  // And where the finals confirm the leader, the leader wins.
  measurer_.finals_truth = {{"c=0", 0.53}, {"c=7", 0.50}};
  options.force = true;
  EXPECT_EQ(run(options).config, "c=7");
}

// The winner is a finalist. The finals time their configs side by side; a config
// left out of them (measured more than 2% behind, in a job of its own) must not
// overturn them with that earlier time. On an H100 a non-finalist's time from a job
// at a lower clock did, and the tune stored a config no final had timed, 0.96x
// cuBLASLt where a finalist ran 1.03x.
TEST_F(TuneTest, TheWinnerIsAFinalist) {
  measurer_.truth["c=0"] = 0.53;   // the default
  measurer_.truth["c=1"] = 0.515;  // 3% behind c=7: no finalist
  measurer_.finals_truth = {{"c=0", 0.56}, {"c=7", 0.54}};
  TuneOptions options;
  options.top = 4;  // phase 2 measures c=1 (the default's group) and c=7
  const TuneResult r = run(options);
  std::set<std::string> measured(measurer_.measured.begin(), measurer_.measured.end());
  ASSERT_TRUE(measured.count("c=1"));
  EXPECT_EQ(measurer_.timer.runs_per_round, 1);  // the last job was the finals
  EXPECT_EQ(std::set<std::string>(r.finalists.begin(), r.finalists.end()),
            (std::set<std::string>{"c=7", "c=0"}));
  EXPECT_EQ(r.config, "c=7") << r.tie_break;
  EXPECT_NEAR(r.summary.median_ms, 0.54, 1e-9);
  EXPECT_EQ(store_->find_tuning("gpu", r.signature)->config, "c=7");
}

// The store keeps each config's fastest measurement: c=7's 0.50 ms timed alone,
// not its 0.56 in the finals, which the default won at 0.52. A tune resumed with
// every trial stored picked again among those and undid the finals; it keeps the
// stored tuning now, without GPU time.
TEST_F(TuneTest, AResumedTuneKeepsWhatItsFinalsDecided) {
  measurer_.truth["c=0"] = 0.53;
  measurer_.finals_truth = {{"c=0", 0.52}, {"c=7", 0.56}};
  TuneOptions options;
  options.top = 4;
  const TuneResult first = run(options);
  EXPECT_EQ(first.config, "c=0");
  const int calls = measurer_.calls;
  const TuneResult again = run(options);
  EXPECT_EQ(measurer_.calls, calls);
  EXPECT_EQ(again.config, "c=0");
  EXPECT_NEAR(again.summary.median_ms, 0.52, 1e-9);
  EXPECT_EQ(store_->find_tuning("gpu", first.signature)->config, "c=0");
}

// But a stored tuning far behind a stored trial is out of date: a wider tune that
// stopped in its finals measured the faster config, and never wrote its tuning.
// Resumed, it measures nothing new; the finals run again and decide.
TEST_F(TuneTest, AResumedTuneRunsTheFinalsWhenItsTuningIsFarBehind) {
  TuneOptions narrow;
  narrow.top = 1;
  measurer_.truth["c=7"] = 0.5;
  const TuneResult first = run(narrow);
  ASSERT_EQ(first.config, "c=0");  // c=7 (0.5 ms) is not among a top-1 tune's
  TuneOptions wide;
  wide.top = 4;
  measurer_.die_in_finals = true;
  EXPECT_ANY_THROW(run(wide));
  measurer_.die_in_finals = false;
  const int calls = measurer_.calls;
  const TuneResult again = run(wide);
  EXPECT_EQ(measurer_.calls, calls + 1);  // the finals only
  EXPECT_EQ(again.config, "c=7") << again.tie_break;
}

TEST(TieBreak, DeterministicAmongStatisticallyTiedConfigs) {
  FakeProblem p;
  p.configs["a,splitk=2"] = {1.0, "k"};
  p.configs["b"] = {1.2, "k"};
  p.configs["c"] = {1.1, "k"};
  p.configs["d"] = {0.9, "k"};
  p.configs["w"] = {0.5, "k"};
  const cuda::DeviceProperties d = cuda::planning_device("h200");
  std::vector<Measured> trials(5);
  trials[0].config = "a,splitk=2";
  trials[0].summary = from_stored(1.000, 0.01, 25);  // the fastest median: [0.995, 1.005]
  trials[1].config = "b";
  trials[1].summary = from_stored(1.004, 0.01, 25);  // tied
  trials[2].config = "c";
  trials[2].summary = from_stored(1.0045, 0.01, 25);  // tied, predicted faster than b
  trials[3].config = "d";
  trials[3].summary = from_stored(1.200, 0.01, 25);  // clearly slower
  // Bimodal: its wide interval overlaps the fastest's, its median is 5% behind; the
  // model's favourite, but not tied.
  trials[4].config = "w";
  trials[4].summary = from_stored(1.050, 0.2, 25);
  std::string why;
  EXPECT_EQ(pick_winner(trials, p, d, &why)->config, "c");
  EXPECT_NE(why.find("3 configs"), std::string::npos) << why;
  std::reverse(trials.begin(), trials.end());
  EXPECT_EQ(pick_winner(trials, p, d)->config, "c");
  // Intervals apart: the fastest median wins outright.
  trials = {trials[4]};
  trials[0].summary = from_stored(1.0, 0.001, 25);
  EXPECT_EQ(pick_winner(trials, p, d, &why)->config, "a,splitk=2");
  EXPECT_NE(why.find("apart"), std::string::npos);
  trials[0].error = "wrong";
  EXPECT_EQ(pick_winner(trials, p, d), nullptr);
}

TEST(TieBreak, TheDefaultWinsATie) {
  FakeProblem p;
  p.configs["a"] = {1.0, "k"};
  p.configs["b"] = {2.0, "k"};
  const cuda::DeviceProperties d = cuda::planning_device("h200");
  std::vector<Measured> trials(2);
  trials[0].config = "a";
  trials[0].summary = from_stored(1.000, 0.01, 25);
  trials[1].config = "b";
  trials[1].summary = from_stored(1.003, 0.01, 25);  // tied, predicted slower
  EXPECT_EQ(pick_winner(trials, p, d)->config, "a");
  std::string why;
  EXPECT_EQ(pick_winner(trials, p, d, &why, "b")->config, "b");
  EXPECT_NE(why.find("the default"), std::string::npos) << why;
  // Not tied: the default does not win.
  trials[1].summary = from_stored(1.05, 0.01, 25);
  EXPECT_EQ(pick_winner(trials, p, d, &why, "b")->config, "a");
}

TEST(Strategy, ParsesTheThreeAndNamesThemOtherwise) {
  EXPECT_EQ(parse_strategy("model"), Strategy::Model);
  EXPECT_EQ(parse_strategy("exhaustive"), Strategy::Exhaustive);
  EXPECT_EQ(parse_strategy("random"), Strategy::Random);
  try {
    parse_strategy("greedy");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("greedy"), std::string::npos);
    EXPECT_NE(e.hint().find("exhaustive"), std::string::npos);
  }
}

}  // namespace
}  // namespace kjit::tuner
