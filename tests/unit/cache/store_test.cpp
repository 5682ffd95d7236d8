#include "kjit/cache/store.h"

#include <sys/stat.h>

#include <atomic>
#include <thread>

#include "kjit/cache/key.h"
#include "kjit/cache/schema.h"
#include "kjit/support/error.h"
#include "tests/unit/cache/test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

TEST(Store, CreatesDirectories0700AndFile0600WhateverTheUmask) {
  ScratchDir scratch;
  std::string dir = scratch.file("a/b");
  std::string path = dir + "/kjit.db";
  // A umask that would leave the owner without write access: the modes are set
  // explicitly, so it must not matter.
  mode_t old_mask = ::umask(0277);
  std::unique_ptr<Store> store = Store::open(path);
  ::umask(old_mask);
  ASSERT_TRUE(store->enabled()) << store->disabled_reason();
  ASSERT_EQ(store->put_binary(make_binary("k1", 4096, 1)), PutOutcome::Inserted);
  EXPECT_EQ(mode_of(scratch.file("a")), 0700);
  EXPECT_EQ(mode_of(dir), 0700);
  EXPECT_EQ(mode_of(path), 0600);
  EXPECT_EQ(mode_of(path + "-wal"), 0600);
  // An existing directory keeps its mode.
  EXPECT_EQ(mode_of(scratch.path().string()), 0700);  // mkdtemp's

  RawDb raw(path);
  EXPECT_EQ(raw.query_int("PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), schema_version());
  EXPECT_EQ(raw.query_text("PRAGMA journal_mode"), "wal");
  for (const char* table : {"devices", "binaries", "tunings", "trials"})
    EXPECT_EQ(raw.query_int(std::string("SELECT count(*) FROM sqlite_schema WHERE name = '") +
                            table + "'"),
              1)
        << table;
  EXPECT_TRUE(store->warnings().empty());
}

TEST(Store, BinaryRoundTripKeepsEveryField) {
  ScratchDir scratch;
  int64_t clock = 1000;
  StoreOptions options;
  options.clock = [&clock] { return clock; };
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"), options);
  BinaryRecord in = make_binary("abc", 100 * 1024, 7, "sm_90a");
  in.options.push_back("-DNAME=\"with \\\"quotes\\\" and\nnewline\"");
  EXPECT_FALSE(store->find_binary("abc"));
  EXPECT_EQ(store->put_binary(in), PutOutcome::Inserted);
  clock = 2000;
  std::optional<BinaryRecord> out = store->find_binary("abc");
  ASSERT_TRUE(out);
  EXPECT_EQ(out->cubin, in.cubin);
  EXPECT_EQ(out->source, in.source);
  EXPECT_EQ(out->nvrtc_log, in.nvrtc_log);
  EXPECT_EQ(out->options, in.options);
  EXPECT_EQ(out->arch, "sm_90a");
  EXPECT_EQ(out->nvrtc_version, "13.0");
  EXPECT_EQ(out->generator_version, "kjit-gen-1");
  EXPECT_EQ(out->ptxas_stats, in.ptxas_stats);
  EXPECT_EQ(out->checksum.size(), 16u);
  EXPECT_EQ(out->created, 1000);
  EXPECT_EQ(out->last_used, 2000);
  EXPECT_EQ(out->hits, 1);
  EXPECT_GT(out->bytes, 100 * 1024);
  EXPECT_FALSE(store->find_binary("ab")) << "keys match exactly, not by prefix";

  // Hits are written in batches; a flush (or any write, or closing) stores them.
  store->find_binary("abc");
  store->flush();
  std::vector<BinaryRecord> listed = store->binaries();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].hits, 2);
  EXPECT_EQ(listed[0].last_used, 2000);
  EXPECT_TRUE(listed[0].cubin.empty()) << "listings carry metadata only";

  // A hit still pending when the store closes is written then; another
  // connection (another process) sees the row and every hit.
  store->find_binary("abc");
  store.reset();
  std::unique_ptr<Store> again = Store::open(scratch.file("kjit.db"), options);
  std::optional<BinaryRecord> reread = again->find_binary("abc");
  ASSERT_TRUE(reread);
  EXPECT_EQ(reread->cubin, in.cubin);
  EXPECT_EQ(reread->hits, 4);
}

TEST(Store, ChecksumFailureDropsTheRowAndTheNextPutHeals) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  std::unique_ptr<Store> store = Store::open(path);
  BinaryRecord binary = make_binary("torn", 64 * 1024, 3);
  store->put_binary(binary);
  {
    // A torn write: the second half of the blob zeroed behind the store's back.
    RawDb raw(path);
    raw.exec("UPDATE binaries SET cubin = substr(cubin, 1, 32768) || zeroblob(32768)");
  }
  EXPECT_FALSE(store->find_binary("torn"));
  EXPECT_TRUE(any_contains(store->warnings(), "failed its checksum"));
  EXPECT_FALSE(store->describe_binary("torn")) << "the bad row is deleted";
  EXPECT_EQ(store->put_binary(binary), PutOutcome::Inserted);
  std::optional<BinaryRecord> healed = store->find_binary("torn");
  ASSERT_TRUE(healed);
  EXPECT_EQ(healed->cubin, binary.cubin);
}

TEST(Store, EvictsLeastRecentlyUsedAboveTheLimit) {
  ScratchDir scratch;
  int64_t clock = 1;
  StoreOptions options;
  options.clock = [&clock] { return clock; };
  options.max_bytes = 350 * 1024;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"), options);
  for (int i = 1; i <= 3; ++i) {
    clock = i;
    ASSERT_EQ(store->put_binary(make_binary("b" + std::to_string(i), 100 * 1024, i)),
              PutOutcome::Inserted);
  }
  clock = 4;
  ASSERT_TRUE(store->find_binary("b1"));  // b1 is now more recent than b2 and b3
  clock = 5;
  ASSERT_EQ(store->put_binary(make_binary("b4", 100 * 1024, 4)), PutOutcome::Inserted);
  // 4 x ~100 KiB > 350 KiB: evict down to 90% (315 KiB), least recently used first.
  EXPECT_TRUE(store->find_binary("b1"));
  EXPECT_FALSE(store->find_binary("b2"));
  EXPECT_TRUE(store->find_binary("b3"));
  EXPECT_TRUE(store->find_binary("b4"));
  EXPECT_LE(store->stats().binary_bytes, options.max_bytes);

  // A tuning is never evicted, and one binary larger than the limit stays.
  store->put_tuning(make_tuning("gpu", "p", "tile=c", 1.0, 0.01, 20));
  clock = 6;
  ASSERT_EQ(store->put_binary(make_binary("huge", 400 * 1024, 9)), PutOutcome::Inserted);
  EXPECT_TRUE(store->find_binary("huge"));
  EXPECT_FALSE(store->find_binary("b1"));
  EXPECT_TRUE(store->find_tuning("gpu", "p"));
}

// A negative `bytes` in one row (INT64_MIN, written by hand) made the total
// negative: nothing was ever evicted again. It counts as 0 now.
TEST(Store, NegativeBytesDoNotStopEviction) {
  ScratchDir scratch;
  int64_t clock = 1;
  StoreOptions options;
  options.clock = [&clock] { return clock; };
  options.max_bytes = 350 * 1024;
  const std::string path = scratch.file("kjit.db");
  std::unique_ptr<Store> store = Store::open(path, options);
  ASSERT_EQ(store->put_binary(make_binary("b1", 100 * 1024, 1)), PutOutcome::Inserted);
  RawDb(path).exec("UPDATE binaries SET bytes = -9223372036854775807 - 1 WHERE key = 'b1'");
  for (int i = 2; i <= 8; ++i) {
    clock = i;
    ASSERT_EQ(store->put_binary(make_binary("b" + std::to_string(i), 100 * 1024, i)),
              PutOutcome::Inserted);
  }
  const CacheStats stats = store->stats();
  EXPECT_LE(stats.binaries, 4);
  EXPECT_GE(stats.binary_bytes, 0);
  EXPECT_LE(stats.binary_bytes, options.max_bytes);
  EXPECT_FALSE(store->find_binary("b1")) << "the oldest goes first, whatever it claims to weigh";
}

TEST(Store, MaxMegabytesComesFromTheEnvironment) {
  {
    ScopedEnv max("KJIT_CACHE_MAX_MB", "0.5");
    EXPECT_EQ(Store::options_from_environment().max_bytes, 512 * 1024);
  }
  {
    ScopedEnv max("KJIT_CACHE_MAX_MB", "lots");
    EXPECT_EQ(Store::options_from_environment().max_bytes, kDefaultMaxBytes);
  }
  ScopedEnv unset("KJIT_CACHE_MAX_MB", std::nullopt);
  EXPECT_EQ(Store::options_from_environment().max_bytes, kDefaultMaxBytes);
}

// 1e13 MiB and beyond overflowed to a negative limit that evicted everything;
// strtod also took hex, exponents, "inf" and spaces.
TEST(Store, MaxMegabytesOutOfRangeOrMalformedKeepsTheDefault) {
  for (const char* text : {"1e13", "1e300", "8796093022208", "99999999999999999999", "-5", "nan",
                           "inf", "0x10", " 5", "5 ", "1.2.3", "."}) {
    ScopedEnv max("KJIT_CACHE_MAX_MB", std::string(text));
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(Store::options_from_environment().max_bytes, kDefaultMaxBytes) << text;
    std::string warning = ::testing::internal::GetCapturedStderr();
    // Each distinct value warns once per process; none is taken silently.
    EXPECT_TRUE(warning.empty() ||
                warning.find("is not a size in MiB (a number below 8796093022208)") !=
                    std::string::npos)
        << warning;
  }
  ScopedEnv largest("KJIT_CACHE_MAX_MB", "8796093022207");
  EXPECT_EQ(Store::options_from_environment().max_bytes, int64_t{8796093022207} << 20);
  ScopedEnv zero("KJIT_CACHE_MAX_MB", "0");
  EXPECT_EQ(Store::options_from_environment().max_bytes, 0);
}

TEST(Store, DefaultPathFollowsTheEnvironment) {
  ScopedEnv cache("KJIT_CACHE", std::nullopt);
  ScopedEnv dir("KJIT_CACHE_DIR", "/x/dir");
  ScopedEnv xdg("XDG_CACHE_HOME", "/x/xdg");
  ScopedEnv home("HOME", "/x/home");
  EXPECT_EQ(Store::default_path(), "/x/dir/kjit.db");
  {
    ScopedEnv no_dir("KJIT_CACHE_DIR", std::nullopt);
    EXPECT_EQ(Store::default_path(), "/x/xdg/kjit/kjit.db");
    ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(Store::default_path(), "/x/home/.cache/kjit/kjit.db");
    ScopedEnv no_home("HOME", std::nullopt);
    std::string reason;
    EXPECT_EQ(Store::default_path(&reason), "");
    EXPECT_NE(reason.find("HOME"), std::string::npos);
  }
  ScopedEnv off("KJIT_CACHE", "off");
  std::string reason;
  EXPECT_EQ(Store::default_path(&reason), "");
  EXPECT_NE(reason.find("KJIT_CACHE=off"), std::string::npos);
}

TEST(Store, DisabledStoreMissesAndDropsQuietly) {
  ScratchDir scratch;
  ScopedEnv dir("KJIT_CACHE_DIR", scratch.path().string());
  ScopedEnv off("KJIT_CACHE", "off");
  std::unique_ptr<Store> store = Store::open_default();
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->enabled());
  EXPECT_NE(store->disabled_reason().find("KJIT_CACHE=off"), std::string::npos);
  EXPECT_EQ(store->put_binary(make_binary("k", 100, 1)), PutOutcome::Rejected);
  EXPECT_FALSE(store->find_binary("k"));
  EXPECT_EQ(store->put_tuning(make_tuning("g", "p", "tile=c", 1, 0, 10)), PutOutcome::Rejected);
  EXPECT_FALSE(store->find_tuning("g", "p"));
  EXPECT_TRUE(store->warnings().empty()) << "turning the cache off is not worth a warning";
  EXPECT_THROW(store->stats(), CacheError);
  EXPECT_FALSE(fs::exists(scratch.file("kjit.db"))) << "nothing written when off";
}

TEST(BetterMeasured, FollowsTheDocumentedOrder) {
  Measurement solid{1.0, 0.02, 50};
  // 1. invalid never wins, and never loses to invalid
  EXPECT_FALSE(better_measured({0, 0, 0}, solid));
  EXPECT_TRUE(better_measured(solid, {0, 0, 0}));
  EXPECT_FALSE(better_measured({-1, 0, 10}, {0, 0, 0}));
  // 2. trustworthy beats untrustworthy, even when slower
  EXPECT_FALSE(better_measured({0.5, 0.02, 3}, solid));
  EXPECT_FALSE(better_measured({0.5, 0.5, 50}, solid));
  EXPECT_TRUE(better_measured(solid, {0.5, 0.02, 3}));
  // 3. beyond the noise, the faster wins
  EXPECT_TRUE(better_measured({0.9, 0.02, 10}, solid));
  EXPECT_FALSE(better_measured({1.1, 0.02, 500}, solid));
  // 4. within the noise: more runs, then lower spread
  EXPECT_TRUE(better_measured({1.01, 0.02, 100}, solid));
  EXPECT_FALSE(better_measured({0.99, 0.02, 20}, solid));
  EXPECT_TRUE(better_measured({1.0, 0.01, 50}, solid));
  // 5. a tie keeps the incumbent
  EXPECT_FALSE(better_measured(solid, solid));
}

TEST(Store, TuningConflictsKeepTheBetterMeasured) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  const std::string gpu = gpu_model("NVIDIA H200", 9, 0, 132);
  EXPECT_EQ(gpu, "NVIDIA H200 cc9.0 132SM");
  EXPECT_EQ(store->put_tuning(make_tuning(gpu, "mm 4096", "tile=128", 2.0, 0.02, 20)),
            PutOutcome::Inserted);
  // Faster beyond the noise: replaces.
  EXPECT_EQ(store->put_tuning(make_tuning(gpu, "mm 4096", "tile=256", 1.5, 0.02, 20)),
            PutOutcome::Replaced);
  // Faster but measured only twice: kept out.
  EXPECT_EQ(store->put_tuning(make_tuning(gpu, "mm 4096", "tile=64", 1.0, 0.02, 2)),
            PutOutcome::Kept);
  // Slower: kept out.
  EXPECT_EQ(store->put_tuning(make_tuning(gpu, "mm 4096", "tile=32", 3.0, 0.01, 100)),
            PutOutcome::Kept);
  std::optional<TuningRecord> best = store->find_tuning(gpu, "mm 4096");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->config, "tile=256");
  EXPECT_DOUBLE_EQ(best->measured.median_ms, 1.5);
  EXPECT_EQ(best->measured.runs, 20);
  EXPECT_EQ(best->tuner_version, "tuner-1");
  EXPECT_GT(best->created, 0);
  EXPECT_FALSE(store->find_tuning(gpu, "mm 2048"));
  EXPECT_FALSE(store->find_tuning(gpu_model("NVIDIA H100", 9, 0, 114), "mm 4096"));
  EXPECT_EQ(store->tunings().size(), 1u);
  EXPECT_EQ(store->put_tuning(make_tuning("", "p", "tile=c", 1, 0, 1)), PutOutcome::Rejected);
}

TEST(Store, TrialsAccumulateSoANewConfigIsMeasuredAlone) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  auto trial = [](const std::string& config, double ms, std::string error = "") {
    return TrialRecord{"gpu", "prob",    config, {ms, 0.01, error.empty() ? 20 : 0},
                       error, "tuner-1", 0};
  };
  EXPECT_EQ(store->put_trial(trial("cfg=a", 2.0)), PutOutcome::Inserted);
  EXPECT_EQ(store->put_trial(trial("cfg=b", 1.0)), PutOutcome::Inserted);
  EXPECT_EQ(store->put_trial(trial("cfg=c", 0, "needs 240 KiB shared memory > 227 KiB")),
            PutOutcome::Inserted);
  EXPECT_EQ(store->put_trial(trial("cfg=d", 0.5)), PutOutcome::Inserted);
  // Re-measuring "a" slower keeps the better measurement.
  EXPECT_EQ(store->put_trial(trial("cfg=a", 5.0)), PutOutcome::Kept);
  std::vector<TrialRecord> trials = store->trials_for("gpu", "prob");
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[0].config, "cfg=d");
  EXPECT_EQ(trials[1].config, "cfg=b");
  EXPECT_EQ(trials[2].config, "cfg=a");
  EXPECT_DOUBLE_EQ(trials[2].measured.median_ms, 2.0);
  EXPECT_EQ(trials[3].config, "cfg=c");
  EXPECT_EQ(trials[3].error, "needs 240 KiB shared memory > 227 KiB");
  EXPECT_TRUE(store->trials_for("gpu", "other").empty());
  // A failure replaces a failure (the newer verdict: a tune reads it, e.g. the limit a
  // check hung within).
  EXPECT_EQ(store->put_trial(trial("cfg=c", 0, "hung: the check did not finish in 300 s")),
            PutOutcome::Replaced);
  for (const TrialRecord& t : store->trials_for("gpu", "prob")) {
    if (t.config == "cfg=c") {
      EXPECT_EQ(t.error, "hung: the check did not finish in 300 s");
    }
  }
}

// A config that passed once and then fails its check (a kernel that is not always
// right) is a failure from then on: the newer verdict replaces the measurement, and
// a tuning that names the config for that problem goes (the runtime would otherwise
// keep running it). A tuning of another config, or of the config elsewhere, stays;
// a later pass is measured again like any other.
TEST(Store, AFailureReplacesAnEarlierPassAndTheTuningThatNamesIt) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  auto trial = [](const std::string& problem, const std::string& config, double ms,
                  std::string error = "") {
    return TrialRecord{"gpu", problem,   config, {ms, 0.01, error.empty() ? 20 : 0},
                       error, "tuner-1", 0};
  };
  ASSERT_EQ(store->put_trial(trial("prob", "cfg=b", 1.0)), PutOutcome::Inserted);
  ASSERT_EQ(store->put_trial(trial("other", "cfg=b", 1.0)), PutOutcome::Inserted);
  ASSERT_EQ(store->put_tuning(make_tuning("gpu", "prob", "cfg=b", 1.0, 0.01, 20)),
            PutOutcome::Inserted);
  ASSERT_EQ(store->put_tuning(make_tuning("gpu", "other", "cfg=b", 1.0, 0.01, 20)),
            PutOutcome::Inserted);
  ASSERT_EQ(store->put_tuning(make_tuning("gpu", "third", "cfg=a", 1.0, 0.01, 20)),
            PutOutcome::Inserted);

  EXPECT_EQ(store->put_trial(trial("prob", "cfg=b", 0, "wrong result: relative L2 error 0.5")),
            PutOutcome::Replaced);
  const std::vector<TrialRecord> trials = store->trials_for("gpu", "prob");
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].error, "wrong result: relative L2 error 0.5");
  EXPECT_EQ(trials[0].measured.runs, 0);
  EXPECT_FALSE(store->find_tuning("gpu", "prob"));
  EXPECT_TRUE(store->find_tuning("gpu", "other"));
  EXPECT_TRUE(store->find_tuning("gpu", "third"));
  ASSERT_EQ(store->trials_for("gpu", "other").size(), 1u);
  EXPECT_EQ(store->trials_for("gpu", "other")[0].error, "");

  EXPECT_EQ(store->put_trial(trial("prob", "cfg=b", 1.2)), PutOutcome::Replaced);
  EXPECT_EQ(store->trials_for("gpu", "prob")[0].error, "");

  // Another tuner version's trial (another kernel behind the text) takes the row
  // whatever either measured: here a slower one.
  TrialRecord newer = trial("prob", "cfg=b", 3.0);
  newer.tuner_version = "tuner-2";
  EXPECT_EQ(store->put_trial(newer), PutOutcome::Inserted);
  ASSERT_EQ(store->trials_for("gpu", "prob").size(), 1u);
  EXPECT_EQ(store->trials_for("gpu", "prob")[0].tuner_version, "tuner-2");
  EXPECT_DOUBLE_EQ(store->trials_for("gpu", "prob")[0].measured.median_ms, 3.0);
}

TEST(Store, DevicesKeepFirstSeenAndUpdateTheRest) {
  ScratchDir scratch;
  int64_t clock = 100;
  StoreOptions options;
  options.clock = [&clock] { return clock; };
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"), options);
  DeviceRecord h200{
      gpu_model("NVIDIA H200", 9, 0, 132), "NVIDIA H200", 9, 0, 132, "12.8", int64_t{141} << 30};
  store->record_device(h200);
  clock = 200;
  h200.driver = "13.0";
  store->record_device(h200);
  std::vector<DeviceRecord> devices = store->devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].driver, "13.0");
  EXPECT_EQ(devices[0].first_seen, 100);
  EXPECT_EQ(devices[0].last_seen, 200);
  EXPECT_EQ(devices[0].sm_count, 132);
  EXPECT_EQ(devices[0].memory_bytes, int64_t{141} << 30);
}

TEST(Store, ThreadsShareOneStore) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::string key = "t" + std::to_string(t) + "-" + std::to_string(i);
        BinaryRecord binary = make_binary(key, 1000 + 37 * i, t * 100 + i);
        if (store->put_binary(binary) != PutOutcome::Inserted) ++failures;
        std::optional<BinaryRecord> back = store->find_binary(key);
        if (!back || back->cubin != binary.cubin) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store->stats().binaries, 100);
  EXPECT_TRUE(store->warnings().empty());
}

TEST(Store, DescribeFindsAUniquePrefix) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  store->put_binary(make_binary("aa11", 100, 1));
  store->put_binary(make_binary("aa22", 100, 2));
  store->put_binary(make_binary("b%_x", 100, 3));
  EXPECT_EQ(store->describe_binary("aa1")->key, "aa11");
  EXPECT_THROW(store->describe_binary("aa"), UserError);
  EXPECT_FALSE(store->describe_binary("%")) << "no wildcards";
  EXPECT_EQ(store->describe_binary("b%")->key, "b%_x");
  EXPECT_EQ(store->describe_binary("aa22")->cubin.size(), 100u);
}

}  // namespace
}  // namespace kjit::cache
