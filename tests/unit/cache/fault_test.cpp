// Every fault the issue lists: the host keeps working, the bad file is moved
// aside (or the store disabled), and nothing valid is lost.
#include <sys/wait.h>
#include <unistd.h>

#include "kjit/cache/schema.h"
#include "kjit/cache/store.h"
#include "kjit/support/error.h"
#include "tests/unit/cache/test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

// The store at `path` works: a binary goes in and comes back out.
void expect_working(Store& store) {
  ASSERT_TRUE(store.enabled()) << store.disabled_reason();
  BinaryRecord binary = make_binary("after-recovery", 20000, 42);
  EXPECT_NE(store.put_binary(binary), PutOutcome::Rejected);
  std::optional<BinaryRecord> back = store.find_binary("after-recovery");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->cubin, binary.cubin);
}

// Opens `path`, an older schema that must be migrated in place (never moved
// aside) with a warning that contains `note`.
std::unique_ptr<Store> open_migrated(const ScratchDir& scratch, const std::string& path,
                                     const std::string& note) {
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(store->enabled()) << store->disabled_reason();
  EXPECT_TRUE(any_contains(store->warnings(), note)) << note;
  EXPECT_TRUE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
  return store;
}

// The one file moved aside, with exactly the bytes it had.
void expect_moved_aside(const ScratchDir& scratch, const std::string& original_bytes) {
  std::vector<std::string> aside = files_starting_with(scratch.path(), "kjit.db.corrupt-");
  std::vector<std::string> main_files;
  for (const std::string& f : aside)
    if (f.find("-wal") == std::string::npos && f.find("-shm") == std::string::npos)
      main_files.push_back(f);
  ASSERT_EQ(main_files.size(), 1u);
  EXPECT_EQ(read_bytes(main_files[0]), original_bytes) << "the bad file is kept, untouched";
}

TEST(Faults, FileOfRandomBytesIsMovedAside) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  std::vector<char> noise = fake_cubin(64 * 1024, 99);
  std::string bytes(noise.begin(), noise.end());
  write_bytes(path, bytes);
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(any_contains(store->warnings(), "moved it aside"));
  expect_working(*store);
  expect_moved_aside(scratch, bytes);
}

TEST(Faults, TruncatedFileIsMovedAsideAndTheStoreKeepsWorking) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    std::unique_ptr<Store> store = Store::open(path);
    for (int i = 0; i < 20; ++i) store->put_binary(make_binary("k" + std::to_string(i), 30000, i));
    store->vacuum();  // folds the WAL into the file
  }
  ASSERT_TRUE(!fs::exists(path + "-wal") || fs::file_size(path + "-wal") == 0);
  std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 300000u);
  bytes.resize(bytes.size() / 3);
  write_bytes(path, bytes);

  std::unique_ptr<Store> store = Store::open(path);
  // Whether the damage shows on opening or on the first read, the caller gets
  // a miss, never an exception, and the store carries on with a fresh file.
  EXPECT_FALSE(store->find_binary("k19"));
  EXPECT_TRUE(any_contains(store->warnings(), "moved it aside"));
  expect_working(*store);
  expect_moved_aside(scratch, bytes);
}

TEST(Faults, AnotherApplicationsSqliteFileIsMovedAsideUntouched) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    RawDb other(path);
    other.exec("PRAGMA application_id = 305419896");  // 0x12345678
    other.exec("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada')");
  }
  std::string bytes = read_bytes(path);
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(any_contains(store->warnings(), "another application's file"));
  expect_working(*store);
  expect_moved_aside(scratch, bytes);
  std::string aside = files_starting_with(scratch.path(), "kjit.db.corrupt-").at(0);
  RawDb check(aside);
  EXPECT_EQ(check.query_text("SELECT name FROM users"), "ada");
}

TEST(Faults, SqliteFileWithoutApplicationIdButForeignTablesIsForeign) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    RawDb other(path);
    other.exec("CREATE TABLE binaries (id INTEGER, payload BLOB)");  // our name, not our columns
  }
  std::string bytes = read_bytes(path);
  std::unique_ptr<Store> store = Store::open(path);
  expect_working(*store);
  expect_moved_aside(scratch, bytes);
}

// The directory cannot be written by this user: the store is disabled with a
// warning, lookups miss, writes are dropped, nothing throws. Root can write
// anywhere, so as root the check runs in a child that drops to "nobody".
TEST(Faults, ReadOnlyDirectoryDisablesTheStore) {
  ScratchDir scratch;
  fs::path dir = scratch.path() / "ro";
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                           fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(scratch.path(), fs::perms::others_exec | fs::perms::group_exec,
                  fs::perm_options::add);
  auto check = [&dir]() -> int {
    ScopedEnv cache_dir("KJIT_CACHE_DIR", dir.string());
    ScopedEnv cache("KJIT_CACHE", std::nullopt);
    std::unique_ptr<Store> store = Store::open_default();
    int failures = 0;
    if (store->enabled()) ++failures;
    if (!any_contains(store->warnings(), "disabled")) ++failures;
    if (store->find_binary("k")) ++failures;
    if (store->put_binary(make_binary("k", 100, 1)) != PutOutcome::Rejected) ++failures;
    if (store->find_tuning("g", "p")) ++failures;
    if (fs::exists(dir / "kjit.db")) ++failures;
    return failures;
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(check(), 0);
    return;
  }
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    ::_exit(check());
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "100: could not drop privileges; else the failure count";
}

TEST(Faults, UncreatableDirectoryDisablesTheStore) {
  ScratchDir scratch;
  write_bytes(scratch.file("plain-file"), "x");
  // A path through a regular file fails for every user, root included.
  std::unique_ptr<Store> store = Store::open(scratch.file("plain-file/sub/kjit.db"));
  EXPECT_FALSE(store->enabled());
  EXPECT_TRUE(any_contains(store->warnings(), "disabled"));
  EXPECT_FALSE(store->find_binary("k"));
  EXPECT_EQ(store->put_binary(make_binary("k", 100, 1)), PutOutcome::Rejected);
}

// A store from kjit's prototype (no application_id, user_version 0, the legacy
// tables) is migrated in place: its tunings survive, its unverifiable
// binaries are dropped, and the file is not moved aside.
TEST(Faults, OlderSchemaIsMigratedNotDiscarded) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    RawDb legacy(path);
    legacy.exec(
        "CREATE TABLE binaries (key TEXT PRIMARY KEY, arch TEXT, cubin BLOB);"
        "INSERT INTO binaries VALUES ('old1', 'sm_80', x'7f454c46');"
        "CREATE TABLE tunings (gpu_model TEXT, problem TEXT, config TEXT, median_ms REAL);"
        "INSERT INTO tunings VALUES ('A100', 'mm 1024', 'tile=128', 0.75);"
        "INSERT INTO tunings VALUES ('A100', 'mm 2048', 'tile=64', NULL);"
        // Rows no other way into a store accepts: a median of infinity (1e999) and
        // one of 1e-9 ms were kept, and the first then listed as a tuning.
        "INSERT INTO tunings VALUES ('A100', 'mm 4096', 'tile=64', 1e999);"
        "INSERT INTO tunings VALUES ('A100', 'mm 8192', 'tile=64', 1e-9);"
        "INSERT INTO tunings VALUES ('A100', 'mm 512', 'not a config', 0.5);");
  }
  std::unique_ptr<Store> store = open_migrated(scratch, path, "kept 1 tunings, dropped 1 binaries");
  for (const char* problem : {"mm 4096", "mm 8192", "mm 512"})
    EXPECT_FALSE(store->find_tuning("A100", problem)) << problem;
  std::optional<TuningRecord> kept = store->find_tuning("A100", "mm 1024");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->config, "tile=128");
  EXPECT_DOUBLE_EQ(kept->measured.median_ms, 0.75);
  EXPECT_EQ(kept->measured.runs, 1);
  EXPECT_EQ(kept->tuner_version, "legacy-v0");
  EXPECT_FALSE(store->find_tuning("A100", "mm 2048")) << "an unreadable row is not invented";
  // Any real measurement replaces the weak migrated one.
  EXPECT_EQ(store->put_tuning(make_tuning("A100", "mm 1024", "tile=256", 0.9, 0.02, 20)),
            PutOutcome::Replaced);
  expect_working(*store);
  store.reset();
  RawDb raw(path);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), schema_version());
  EXPECT_EQ(raw.query_int("PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'legacy%'"), 0);
}

TEST(Faults, KjitFileAtVersionZeroIsInitialized) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    RawDb raw(path);
    raw.exec("PRAGMA application_id = 1802135924");  // kjit, before any table
  }
  std::unique_ptr<Store> store = Store::open(path);
  expect_working(*store);
  EXPECT_TRUE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
}

// A kjit header that no kjit writes: a negative version indexed the migration
// table at -1 (ASan aborted; a release build disabled the store for good with
// "table devices already exists"), and so did version 0 with tables present.
// Both are damage: moved aside with one warning, and a fresh store works.
TEST(Faults, ImpossibleSchemaVersionsAreMovedAside) {
  for (const char* header : {"PRAGMA user_version = -1", "PRAGMA user_version = 0"}) {
    ScratchDir scratch;
    std::string path = scratch.file("kjit.db");
    {
      std::unique_ptr<Store> store = Store::open(path);
      store->put_tuning(make_tuning("g", "p", "tile=c", 1.0, 0.01, 20));
    }
    {
      RawDb raw(path);
      raw.exec(header);
      raw.exec("PRAGMA journal_mode = DELETE");  // one file to compare
    }
    std::string bytes = read_bytes(path);
    std::unique_ptr<Store> store = Store::open(path);
    std::vector<std::string> warnings = store->warnings();
    EXPECT_EQ(warnings.size(), 1u) << header;
    EXPECT_TRUE(any_contains(warnings, "its header is not one any kjit writes")) << header;
    EXPECT_TRUE(any_contains(warnings, "moved it aside")) << header;
    expect_working(*store);
    expect_moved_aside(scratch, bytes);
  }
}

// Schema 1 (before MACs) is migrated in place: tunings, trials and devices
// stay; binaries are dropped, since nothing vouches that this user stored them.
TEST(Faults, SchemaOneIsMigratedAndItsBinariesDropped) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    RawDb raw(path);
    raw.exec(
        "CREATE TABLE devices (model TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, cc_major "
        "INTEGER NOT NULL, cc_minor INTEGER NOT NULL, sm_count INTEGER NOT NULL, driver TEXT NOT "
        "NULL, memory_bytes INTEGER NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT "
        "NULL);"
        "CREATE TABLE binaries (key TEXT PRIMARY KEY NOT NULL, bytes INTEGER NOT NULL, created "
        "INTEGER NOT NULL, arch TEXT NOT NULL, nvrtc_version TEXT NOT NULL, generator_version TEXT "
        "NOT NULL, checksum TEXT NOT NULL, options TEXT NOT NULL, ptxas_stats TEXT NOT NULL, "
        "nvrtc_log TEXT NOT NULL, source TEXT NOT NULL, cubin BLOB NOT NULL);"
        "CREATE TABLE binary_usage (key TEXT PRIMARY KEY NOT NULL, last_used INTEGER NOT NULL, "
        "hits "
        "INTEGER NOT NULL DEFAULT 0);"
        "CREATE INDEX binary_usage_by_last_used ON binary_usage (last_used);"
        "CREATE TRIGGER binaries_delete_usage AFTER DELETE ON binaries BEGIN DELETE FROM "
        "binary_usage WHERE key = old.key; END;"
        "CREATE TABLE tunings (gpu_model TEXT NOT NULL, problem TEXT NOT NULL, config TEXT NOT "
        "NULL, median_ms REAL NOT NULL, spread REAL NOT NULL, runs INTEGER NOT NULL, tuner_version "
        "TEXT NOT NULL, created INTEGER NOT NULL, PRIMARY KEY (gpu_model, problem));"
        "CREATE TABLE trials (gpu_model TEXT NOT NULL, problem TEXT NOT NULL, config TEXT NOT "
        "NULL, "
        "median_ms REAL NOT NULL, spread REAL NOT NULL, runs INTEGER NOT NULL, error TEXT NOT "
        "NULL, "
        "tuner_version TEXT NOT NULL, created INTEGER NOT NULL, PRIMARY KEY (gpu_model, problem, "
        "config));"
        "INSERT INTO binaries VALUES ('k1', 100, 1, 'sm_90', '13.0', 'g', 'x', '[]', '{}', '', "
        "'', x'7f454c46');"
        "INSERT INTO binary_usage VALUES ('k1', 1, 3);"
        "INSERT INTO tunings VALUES ('H200', 'mm', 'tile=128', 0.5, 0.01, 20, 't', 1);"
        "INSERT INTO trials VALUES ('H200', 'mm', 'tile=128', 0.5, 0.01, 20, '', 't', 1);"
        "INSERT INTO devices VALUES ('H200', 'NVIDIA H200', 9, 0, 132, '13.0', 1, 1, 1);"
        "PRAGMA application_id = 1802135924; PRAGMA user_version = 1;");
  }
  std::unique_ptr<Store> store = open_migrated(
      scratch, path, "migrated the cache to schema 2 (authenticated binaries): dropped 1 binaries");
  EXPECT_FALSE(store->find_binary("k1"));
  ASSERT_TRUE(store->find_tuning("H200", "mm"));
  EXPECT_EQ(store->find_tuning("H200", "mm")->config, "tile=128");
  EXPECT_EQ(store->trials_for("H200", "mm").size(), 1u);
  EXPECT_EQ(store->devices().size(), 1u);
  expect_working(*store);
  store.reset();
  RawDb raw(path);
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), 2);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM pragma_table_info('binaries') WHERE name = 'mac'"),
            1);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM binary_usage WHERE key = 'k1'"), 0);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'"), 1);
}

// A store whose file holds what no kjit makes: a view in place of a table (over
// an endless recursive query, every read of it never ended: compile and explain
// hung), a planted trigger, a dropped table (every command failed with "no such
// table"), a header that names another schema than its tables' (the migration
// failed with "duplicate column name" and the store stayed disabled, with no
// way out). Each is damage: moved aside with a warning, and a fresh store works.
// The views here end (1000 rows), so that without the check the test fails
// rather than hangs.
TEST(Faults, TablesThatAreNotKjitsAreDamage) {
  const auto view = [](const std::string& name) {
    return "CREATE VIEW " + name +
           " AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 1000) "
           "SELECT 'g' gpu_model, 'p' || x problem, 'tile=1' config, 1.0 median_ms, 0.0 spread, "
           "20 runs, '' error, 't' tuner_version, 1 created FROM n";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"DROP TABLE tunings; " + view("tunings"), "it has a view (tunings)"},
      {"DROP TABLE trials; " + view("TRIALS"), "it has a view (TRIALS)"},
      {"CREATE VIEW extra AS SELECT 1", "it has a view (extra)"},
      {"CREATE TRIGGER spy AFTER INSERT ON tunings BEGIN DELETE FROM trials; END",
       "it has a trigger (spy) that is not kjit's"},
      {"DROP TRIGGER binaries_delete_usage; CREATE TRIGGER binaries_delete_usage AFTER DELETE ON "
       "binaries BEGIN DELETE FROM tunings; END",
       "it has a trigger (binaries_delete_usage) that is not kjit's"},
      {"DROP TABLE trials", "it has no table trials"},
      {"ALTER TABLE tunings DROP COLUMN tuner_version",
       "its table tunings lacks kjit's columns (no such column: tuner_version)"},
      {"DROP TABLE tunings; CREATE TABLE tunings (gpu_model TEXT, problem TEXT, config TEXT, "
       "median_ms REAL, spread REAL, runs INTEGER, tuner_version TEXT, created INTEGER, PRIMARY "
       "KEY (gpu_model, problem)) WITHOUT ROWID",
       "its tunings is not an ordinary table (a table without rowid)"},
      {"PRAGMA user_version = 1", "migrating it failed"},
  };
  for (const auto& [sql, why] : cases) {
    ScratchDir scratch;
    const std::string path = scratch.file("kjit.db");
    {
      std::unique_ptr<Store> store = Store::open(path);
      store->put_tuning(make_tuning("g", "p", "tile=1", 1.0, 0.01, 20));
    }
    {
      RawDb raw(path);
      raw.exec(sql);
      raw.exec("PRAGMA journal_mode = DELETE");  // one file to compare
    }
    const std::string bytes = read_bytes(path);
    StoreOptions strict;
    strict.recover = false;
    EXPECT_THROW(Store::open(path, strict), CacheError) << sql;
    std::unique_ptr<Store> store = Store::open(path);
    EXPECT_TRUE(any_contains(store->warnings(), why)) << sql;
    EXPECT_TRUE(any_contains(store->warnings(), "moved it aside")) << sql;
    EXPECT_FALSE(store->find_tuning("g", "p")) << sql;
    EXPECT_TRUE(store->trials_for("g", "").empty()) << sql;
    // verify says what opening found, and --fix has nothing left to do.
    VerifyReport found = store->verify();
    EXPECT_FALSE(found.ok()) << sql;
    EXPECT_NE(found.damaged_on_open.find(why), std::string::npos) << found.damaged_on_open;
    EXPECT_TRUE(store->verify(/*remove_bad=*/true).replaced_damaged) << sql;
    expect_working(*store);
    // A migration starts by switching the file to WAL (its header changes); the
    // migration itself is rolled back.
    if (why != "migrating it failed") expect_moved_aside(scratch, bytes);
    EXPECT_FALSE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
  }
}

// The same found after opening (another program changed the file meanwhile):
// verify reports it, and verify --fix and clear --yes move the file aside.
TEST(Faults, VerifyAndClearRecoverFromTablesChangedUnderneath) {
  for (bool use_clear : {false, true}) {
    ScratchDir scratch;
    const std::string path = scratch.file("kjit.db");
    std::unique_ptr<Store> store = Store::open(path);
    store->put_tuning(make_tuning("g", "p", "tile=1", 1.0, 0.01, 20));
    {
      RawDb raw(path);
      raw.exec(
          "DROP TABLE tunings; CREATE VIEW tunings AS SELECT 'g' gpu_model, 'p' problem, "
          "'tile=9' config, 1.0 median_ms, 0.0 spread, 1 runs, 't' tuner_version, "
          "1 created");
    }
    const VerifyReport found = store->verify();
    ASSERT_EQ(found.integrity.size(), 1u);
    EXPECT_NE(found.integrity[0].find("its tables are not kjit's: it has a view (tunings)"),
              std::string::npos)
        << found.integrity[0];
    EXPECT_FALSE(found.ok());
    EXPECT_TRUE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
    if (use_clear) {
      EXPECT_TRUE(store->clear().replaced_damaged);
    } else {
      EXPECT_TRUE(store->verify(/*remove_bad=*/true).replaced_damaged);
    }
    EXPECT_FALSE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
    EXPECT_TRUE(store->verify().ok());
    expect_working(*store);
  }
}

// Rows are checked when stored; a file edited afterwards is checked when read. An
// infinite median over -5 runs was used, listed and passed verify.
TEST(Faults, RowsEditedInTheFileAreNotUsedAndVerifyRemovesThem) {
  ScratchDir scratch;
  const std::string path = scratch.file("kjit.db");
  std::unique_ptr<Store> store = Store::open(path);
  store->put_tuning(make_tuning("g", "good", "tile=1", 1.0, 0.01, 20));
  store->put_tuning(make_tuning("g", "edited", "tile=1", 1.0, 0.01, 20));
  TrialRecord trial;
  trial.gpu_model = "g";
  trial.problem = "edited";
  trial.config = "tile=2";
  trial.measured = {2.0, 0.01, 20};
  trial.tuner_version = "t";
  store->put_trial(trial);
  {
    RawDb raw(path);
    raw.exec(
        "UPDATE tunings SET median_ms = 1e999, runs = -5 WHERE problem = 'edited';"
        "UPDATE trials SET median_ms = 'abc' WHERE problem = 'edited'");
  }
  EXPECT_FALSE(store->find_tuning("g", "edited"));
  EXPECT_TRUE(any_contains(store->warnings(), "ignored the stored tuning of edited"));
  EXPECT_TRUE(store->find_tuning("g", "good"));
  EXPECT_EQ(store->tunings("g").size(), 1u);
  EXPECT_TRUE(store->trials_for("g", "edited").empty());
  const VerifyReport found = store->verify();
  EXPECT_FALSE(found.ok());
  ASSERT_EQ(found.bad_rows.size(), 2u);
  EXPECT_NE(found.bad_rows[0].find("tunings g edited tile=1: -5 runs"), std::string::npos)
      << found.bad_rows[0];
  EXPECT_NE(found.bad_rows[1].find("trials g edited tile=2: a median of 0 ms"), std::string::npos)
      << found.bad_rows[1];
  const VerifyReport fixed = store->verify(/*remove_bad=*/true);
  EXPECT_EQ(fixed.removed, 2);
  EXPECT_TRUE(fixed.ok());
  EXPECT_TRUE(store->verify().ok());
  EXPECT_TRUE(store->find_tuning("g", "good"));
}

TEST(Faults, NewerSchemaIsLeftAloneAndTheStoreDisabled) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    RawDb raw(path);
    raw.exec(
        "PRAGMA application_id = 1802135924; PRAGMA user_version = 99;"
        "CREATE TABLE future (x); INSERT INTO future VALUES (1)");
  }
  std::string bytes = read_bytes(path);
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_FALSE(store->enabled());
  EXPECT_TRUE(any_contains(store->warnings(), "newer kjit"));
  EXPECT_FALSE(store->find_binary("k"));
  store.reset();
  EXPECT_EQ(read_bytes(path), bytes);
  EXPECT_TRUE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
}

TEST(Faults, StrictOpenThrowsAndLeavesTheFileAlone) {
  ScratchDir scratch;
  std::string path = scratch.file("theirs.db");
  write_bytes(path, std::string(4096, 'z'));
  StoreOptions strict;
  strict.recover = false;
  EXPECT_THROW(Store::open(path, strict), CacheError);
  EXPECT_EQ(read_bytes(path), std::string(4096, 'z'));
  EXPECT_TRUE(files_starting_with(scratch.path(), "theirs.db.corrupt-").empty());
}

TEST(Faults, DamageFoundMidRunMovesTheFileAside) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  {
    std::unique_ptr<Store> store = Store::open(path);
    for (int i = 0; i < 40; ++i) store->put_binary(make_binary("k" + std::to_string(i), 5000, i));
    store->vacuum();  // every row in the main file, none in the WAL
  }
  std::unique_ptr<Store> store = Store::open(path);
  ASSERT_TRUE(store->enabled());
  // Another program scribbles over the middle of the file while the store has
  // it open (the header, already read, stays intact).
  std::string bytes = read_bytes(path);
  std::vector<char> noise = fake_cubin(bytes.size() - 8192, 77);
  std::copy(noise.begin(), noise.end(), bytes.begin() + 4096);
  write_bytes(path, bytes);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->find_binary("k" + std::to_string(i)));
  EXPECT_TRUE(any_contains(store->warnings(), "moved it aside"));
  expect_working(*store);
  expect_moved_aside(scratch, bytes);
}

// A file damaged under rows that `clear` must delete (or `verify --fix` reads):
// before, both failed with "database disk image is malformed" and left no way
// forward but deleting the file by hand. Now it goes aside whole and an empty
// store takes its place.
void damage_store(const std::string& path) {
  {
    std::unique_ptr<Store> store = Store::open(path);
    for (int i = 0; i < 40; ++i) store->put_binary(make_binary("k" + std::to_string(i), 5000, i));
    store->put_tuning(make_tuning("H200", "mm", "tile=128", 1.0, 0.01, 10));
    store->vacuum();
  }
  std::string bytes = read_bytes(path);
  std::vector<char> noise = fake_cubin(bytes.size() - 8192, 78);
  std::copy(noise.begin(), noise.end(), bytes.begin() + 4096);
  write_bytes(path, bytes);
}

TEST(Faults, ClearOfADamagedFileMovesItAsideAndStartsEmpty) {
  ScratchDir scratch;
  const std::string path = scratch.file("kjit.db");
  damage_store(path);
  std::unique_ptr<Store> store = Store::open(path);
  ASSERT_TRUE(store->enabled());
  const ClearReport report = store->clear(/*binaries_only=*/false);
  EXPECT_TRUE(report.replaced_damaged);
  EXPECT_TRUE(any_contains(store->warnings(), "moved it aside"));
  EXPECT_FALSE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
  EXPECT_EQ(store->stats().binaries, 0);
  EXPECT_TRUE(store->verify(false).ok()) << "the fresh store is sound";
  expect_working(*store);
}

TEST(Faults, VerifyFixOfADamagedFileMovesItAside) {
  ScratchDir scratch;
  const std::string path = scratch.file("kjit.db");
  damage_store(path);
  std::unique_ptr<Store> store = Store::open(path);
  const VerifyReport found = store->verify(/*remove_bad=*/false);
  EXPECT_FALSE(found.ok());
  EXPECT_FALSE(found.replaced_damaged) << "without --fix the file stays";
  EXPECT_TRUE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
  const VerifyReport fixed = store->verify(/*remove_bad=*/true);
  EXPECT_TRUE(fixed.replaced_damaged);
  EXPECT_FALSE(files_starting_with(scratch.path(), "kjit.db.corrupt-").empty());
  EXPECT_TRUE(store->verify(false).ok());
  expect_working(*store);
}

// A damaged file as a transfer's source: an import read 0 rows of the damaged
// table and reported success; export and merge of a damaged store did the same.
TEST(Faults, TransfersRefuseADamagedSource) {
  ScratchDir scratch;
  const std::string damaged = scratch.file("theirs.db");
  damage_store(damaged);
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  mine->put_tuning(make_tuning("H200", "ew", "vec=8", 0.5, 0.01, 10));
  try {
    mine->import_from(damaged, /*trust_binaries=*/true);
    FAIL() << "a damaged file was imported";
  } catch (const UserError& e) {  // the named file is bad input, not the store's fault
    EXPECT_NE(std::string(e.what()).find("'" + damaged + "' is damaged"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(mine->stats().binaries, 0) << "nothing was copied";
  EXPECT_TRUE(mine->find_tuning("H200", "ew"));

  std::unique_ptr<Store> broken = Store::open(damaged);
  EXPECT_THROW(broken->export_to(scratch.file("out.db")), CacheError);
  EXPECT_FALSE(fs::exists(scratch.file("out.db")));
  EXPECT_THROW(broken->merge_into(scratch.file("team.db")), CacheError);
}

}  // namespace
}  // namespace kjit::cache
