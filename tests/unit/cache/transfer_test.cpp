// export / import / merge, verify, clear and vacuum.
#include "kjit/cache/key.h"
#include "kjit/cache/sqlite.h"
#include "kjit/cache/store.h"
#include "kjit/support/error.h"
#include "tests/unit/cache/test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

const std::string kH200 = gpu_model("NVIDIA H200", 9, 0, 132);
const std::string kA100 = gpu_model("NVIDIA A100-SXM4-80GB", 8, 0, 108);

// Two GPUs' worth of everything.
void fill(Store& store) {
  store.record_device({kH200, "NVIDIA H200", 9, 0, 132, "13.0", int64_t{141} << 30});
  store.record_device({kA100, "NVIDIA A100-SXM4-80GB", 8, 0, 108, "13.0", int64_t{80} << 30});
  store.put_binary(make_binary("h1", 30000, 1, "sm_90"));
  store.put_binary(make_binary("h2", 20000, 2, "sm_90a"));
  store.put_binary(make_binary("a1", 10000, 3, "sm_80"));
  store.put_binary(make_binary("x1", 10000, 4, "sm_100"));
  store.put_tuning(make_tuning(kH200, "mm 4096", "tile=256", 1.0, 0.02, 20));
  store.put_tuning(make_tuning(kH200, "ew 1M", "vec=8", 0.01, 0.05, 50));
  store.put_tuning(make_tuning(kA100, "mm 4096", "tile=128", 2.0, 0.02, 20));
  store.put_trial({kH200, "mm 4096", "tile=256", {1.0, 0.02, 20}, "", "tuner-1", 0});
  store.put_trial({kA100, "mm 4096", "tile=128", {2.0, 0.02, 20}, "", "tuner-1", 0});
}

StoreOptions strict() {
  StoreOptions options;
  options.recover = false;
  return options;
}

TEST(Transfer, ExportEverythingOrOneGpuModel) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  fill(*store);

  TransferReport all = store->export_to(scratch.file("all.db"));
  EXPECT_EQ(all.devices.inserted, 2);
  EXPECT_EQ(all.binaries.inserted, 4);
  EXPECT_EQ(all.tunings.inserted, 3);
  EXPECT_EQ(all.trials.inserted, 2);
  EXPECT_FALSE(fs::exists(scratch.file("all.db-wal"))) << "an export is one self-contained file";

  TransferReport one = store->export_to(scratch.file("h200.db"), kH200);
  EXPECT_EQ(one.devices.inserted, 1);
  EXPECT_EQ(one.binaries.inserted, 2) << "sm_90 and sm_90a";
  EXPECT_EQ(one.tunings.inserted, 2);
  EXPECT_EQ(one.trials.inserted, 1);

  std::unique_ptr<Store> shipped = Store::open(scratch.file("h200.db"), strict());
  EXPECT_TRUE(shipped->find_tuning(kH200, "mm 4096"));
  EXPECT_FALSE(shipped->find_tuning(kA100, "mm 4096"));
  // Exported binaries carry no MAC: opened as a store, the file gives its
  // tunings but never runs its code; importing with trust_binaries does.
  EXPECT_FALSE(shipped->find_binary("h1"));
  shipped.reset();
  std::unique_ptr<Store> receiver = Store::open(scratch.file("receiver/kjit.db"));
  EXPECT_EQ(
      receiver->import_from(scratch.file("all.db"), /*trust_binaries=*/true).binaries.inserted, 4);
  std::optional<BinaryRecord> h1 = receiver->find_binary("h1");
  ASSERT_TRUE(h1);
  EXPECT_EQ(h1->cubin, fake_cubin(30000, 1));

  EXPECT_THROW(store->export_to(scratch.file("all.db")), UserError) << "never overwrites";
  EXPECT_THROW(store->export_to(scratch.file("none.db"), "GeForce 256"), UserError);
  EXPECT_FALSE(fs::exists(scratch.file("none.db")));
  EXPECT_TRUE(files_starting_with(scratch.path(), "none.db").empty()) << "no temporary left";
}

TEST(Transfer, ImportKeepsTheBetterMeasuredAndSaysWhatItDid) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("mine/kjit.db"));
  mine->put_binary(make_binary("shared", 5000, 1));
  mine->put_tuning(make_tuning(kH200, "p1", "tile=mine", 1.0, 0.01, 20));  // better than theirs
  mine->put_tuning(make_tuning(kH200, "p2", "tile=mine", 2.0, 0.01, 20));  // worse than theirs

  std::string theirs_path = scratch.file("theirs/kjit.db");
  {
    std::unique_ptr<Store> theirs = Store::open(theirs_path);
    theirs->put_binary(make_binary("shared", 5000, 1));
    theirs->put_binary(make_binary("new", 6000, 2));
    theirs->put_binary(make_binary("torn", 7000, 3));
    theirs->put_tuning(make_tuning(kH200, "p1", "tile=theirs", 1.5, 0.01, 20));
    theirs->put_tuning(make_tuning(kH200, "p2", "tile=theirs", 1.0, 0.01, 20));
    theirs->put_tuning(make_tuning(kH200, "p3", "tile=theirs", 1.0, 0.01, 20));
    theirs->record_device({kH200, "NVIDIA H200", 9, 0, 132, "13.0", 1});
  }
  {
    RawDb raw(theirs_path);
    raw.exec("UPDATE binaries SET cubin = zeroblob(7000) WHERE key = 'torn'");
  }
  // Without trust_binaries only tunings, trials and devices come in.
  TransferReport cautious = mine->import_from(theirs_path);
  EXPECT_EQ(cautious.binaries.skipped, 3);
  EXPECT_EQ(cautious.binaries.inserted, 0);
  EXPECT_FALSE(mine->find_binary("new"));
  EXPECT_EQ(mine->find_tuning(kH200, "p3")->config, "tile=theirs");
  TransferReport report = mine->import_from(theirs_path, /*trust_binaries=*/true);
  EXPECT_EQ(report.binaries.inserted, 1);
  EXPECT_EQ(report.binaries.kept, 1);
  EXPECT_EQ(report.binaries.rejected, 1) << "a blob whose checksum fails never enters";
  EXPECT_EQ(report.tunings.kept, 3) << "the cautious import took them already";
  EXPECT_EQ(mine->find_tuning(kH200, "p1")->config, "tile=mine");
  EXPECT_EQ(mine->find_tuning(kH200, "p2")->config, "tile=theirs");
  EXPECT_EQ(mine->find_tuning(kH200, "p3")->config, "tile=theirs");
  EXPECT_TRUE(mine->find_binary("new"));
  EXPECT_FALSE(mine->find_binary("torn"));

  // Importing again changes nothing.
  TransferReport again = mine->import_from(theirs_path, /*trust_binaries=*/true);
  EXPECT_EQ(again.binaries.inserted + again.tunings.inserted + again.tunings.replaced, 0);

  // Not a kjit file: bad input (a UserError, as a missing file; a CacheError before),
  // and the file is not moved.
  write_bytes(scratch.file("junk.db"), std::string(5000, 'j'));
  EXPECT_THROW(mine->import_from(scratch.file("junk.db")), UserError);
  EXPECT_EQ(read_bytes(scratch.file("junk.db")), std::string(5000, 'j'));
  EXPECT_THROW(mine->import_from(scratch.file("missing.db")), UserError);
}

// Importing a store's own file read it and wrote every row back onto itself
// (exit 0, nothing changed); merge already refused its own file.
TEST(Transfer, ImportIntoItselfIsRefused) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  fill(*mine);
  try {
    mine->import_from(scratch.file("kjit.db"));
    FAIL() << "importing the store's own file was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("into itself"), std::string::npos) << e.what();
  }
  fs::create_symlink(scratch.file("kjit.db"), scratch.file("alias.db"));
  EXPECT_THROW(mine->import_from(scratch.file("alias.db")), UserError) << "the same file by a link";
  EXPECT_TRUE(mine->find_tuning(kH200, "mm 4096")) << "the store is untouched";
}

// A file to import whose `tunings` is a view: over an endless recursive query,
// import read it for ever and filled the disk. Its schema is checked before any
// row is read, and the file refused as bad input. (The view here ends, so that
// without the check the test fails rather than hangs.)
TEST(Transfer, ImportRefusesAFileWhoseTablesAreNotKjits) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  const std::string theirs = scratch.file("theirs.db");
  Store::open(theirs).reset();
  {
    RawDb raw(theirs);
    raw.exec(
        "DROP TABLE tunings; CREATE VIEW tunings AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL "
        "SELECT x + 1 FROM n WHERE x < 1000) SELECT 'g' gpu_model, 'p' || x problem, 'tile=1' "
        "config, 1.0 median_ms, 0.0 spread, 20 runs, 't' tuner_version, 1 created FROM n");
  }
  try {
    mine->import_from(theirs);
    FAIL() << "a file with a view for a table was imported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + theirs +
                                         "' is not a kjit cache: its tables are "
                                         "not kjit's: it has a view (tunings)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(mine->tunings().empty());
}

// A damaged file to import: binary_usage's table page emptied under its intact
// indexes. PRAGMA quick_check passed it, the copy then failed reading it, and the
// message blamed the user's healthy store ("kjit cache clear --yes moves it
// aside"). Now the file is checked whole first and named as the bad input.
TEST(Transfer, ImportOfADamagedFileNamesTheFile) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  const std::string theirs = scratch.file("theirs.db");
  {
    std::unique_ptr<Store> store = Store::open(theirs);
    for (int i = 0; i < 20; ++i) store->put_binary(make_binary("k" + std::to_string(i), 500, i));
    store->put_tuning(make_tuning(kH200, "mm", "tile=1", 1.0, 0.01, 20));
  }
  int64_t page_size = 0, root = 0;
  {
    RawDb raw(theirs);
    raw.exec("PRAGMA journal_mode = DELETE");
    page_size = raw.query_int("PRAGMA page_size");
    root = raw.query_int("SELECT rootpage FROM sqlite_schema WHERE name = 'binary_usage'");
  }
  const std::string emptied = scratch.file("emptied.db");
  fs::copy_file(theirs, emptied);
  RawDb(emptied).exec("DELETE FROM binary_usage");
  std::string bytes = read_bytes(theirs);
  const size_t offset = static_cast<size_t>((root - 1) * page_size);
  bytes.replace(offset, static_cast<size_t>(page_size),
                read_bytes(emptied).substr(offset, static_cast<size_t>(page_size)));
  write_bytes(theirs, bytes);
  ASSERT_EQ(RawDb(theirs).query_text("PRAGMA quick_check"), "ok")
      << "the damage quick_check misses";
  try {
    mine->import_from(theirs);
    FAIL() << "a damaged file was imported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + theirs + "' is damaged"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(mine->verify().ok()) << "the store is not to blame";
  EXPECT_TRUE(mine->tunings().empty()) << "nothing was copied";
}

// Imported rows pass the checks put_tuning, put_trial and record_device make
// (one function): before, a tuning "measured" at 1e-9 ms over a million runs
// replaced the user's for good, and empty keys, a megabyte of problem text and
// a device last seen in the year 292277026596 went in as they were.
TEST(Transfer, ImportRejectsImpossibleRows) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  mine->put_tuning(make_tuning(kH200, "mm", "tile=128", 1.0, 0.01, 20));
  const std::string theirs = scratch.file("theirs.db");
  Store::open(theirs).reset();
  {
    RawDb raw(theirs);
    raw.exec(
        "INSERT INTO tunings VALUES "
        "('" +
        kH200 +
        "', 'mm', 'tile=fake', 1e-9, 0, 1000000, 't', 1),"
        "('g', 'empty config', '', 1.0, 0.01, 20, 't', 1),"
        "('', 'no model', 'tile=1', 1.0, 0.01, 20, 't', 1),"
        "('g', 'negative', 'tile=1', -1.0, 0.01, 20, 't', 1),"
        "('g', 'infinite', 'tile=1', 9e999, 0.01, 20, 't', 1),"
        "('g', 'no runs', 'tile=1', 1.0, 0.01, 0, 't', 1),"
        "('g', 'not a config', 'fast please', 1.0, 0.01, 20, 't', 1),"
        "('g', 'from the future', 'tile=1', 1.0, 0.01, 20, 't', 9223372036854775807),"
        "('g', replace(hex(zeroblob(500000)), '0', 'x'), 'tile=1', 1.0, 0.01, 20, 't', 1),"
        "('g', 'fine', 'tile=1', 1.0, 0.01, 20, 't', 1);"
        "INSERT INTO trials VALUES "
        "('g', 'p', 'tile=1', 0, 0, 0, 'needs too much shared memory', 't', 1),"
        "('g', 'p', 'tile=2', 1e-9, 0, 20, '', 't', 1),"
        "('g', 'p', 'tile=3', 0.5, 0.01, 5, 'failed, yet timed', 't', 1),"
        "('g', 'p', 'tile=4', 0.5, 0.01, 20, '', 't', 1);"
        "INSERT INTO devices VALUES "
        "('D1', 'NVIDIA X', 9, 0, 132, '13.0', 1, 1, 9223372036854775807),"
        "('D2', 'NVIDIA X', 9999, 0, 132, '13.0', 1, 1, 1),"
        "('D3', '', 9, 0, 132, '13.0', 1, 1, 1),"
        "('D4', 'NVIDIA X', 9, 0, 132, '13.0', 1, -5, 1),"
        "('D5', 'NVIDIA X', 9, 0, 132, '13.0', 1, 1, 1)");
  }
  const TransferReport report = mine->import_from(theirs);
  EXPECT_EQ(report.tunings.rejected, 9);
  EXPECT_EQ(report.tunings.inserted, 1);
  EXPECT_EQ(report.trials.rejected, 2);
  EXPECT_EQ(report.trials.inserted, 2);
  EXPECT_EQ(report.devices.rejected, 4);
  EXPECT_EQ(report.devices.inserted, 1);
  EXPECT_EQ(mine->find_tuning(kH200, "mm")->config, "tile=128") << "the real tuning stays";
  EXPECT_EQ(mine->tunings().size(), 2u);
  // put_tuning refuses the same row, by the same rule.
  EXPECT_EQ(mine->put_tuning(make_tuning(kH200, "mm", "tile=fake", 1e-9, 0, 1000000)),
            PutOutcome::Rejected);
  EXPECT_TRUE(any_contains(mine->warnings(), "refused a tuning: a median of 1e-09 ms"));
}

// export wrote through FILE.tmp-<pid>, opened without O_EXCL or O_NOFOLLOW: a
// link planted at that predictable name sent the export wherever it pointed.
TEST(Transfer, ExportNeverFollowsALinkAtItsTemporaryName) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  fill(*store);
  const std::string out = scratch.file("h200.db");
  const std::string planted = out + ".tmp-" + std::to_string(::getpid());
  fs::create_symlink(scratch.file("stolen.db"), planted);
  EXPECT_EQ(store->export_to(out).tunings.inserted, 3);
  EXPECT_FALSE(fs::exists(scratch.file("stolen.db"))) << "the export went through the link";
  EXPECT_TRUE(fs::is_symlink(planted)) << "the link is left alone";
  EXPECT_FALSE(fs::is_symlink(out));
  EXPECT_EQ(mode_of(out), 0600);
  EXPECT_EQ(files_starting_with(scratch.path(), "h200.db").size(), 2u) << "no temporary left";
  std::unique_ptr<Store> exported = Store::open(out, strict());
  EXPECT_TRUE(exported->find_tuning(kH200, "mm 4096"));
}

// A store found damaged when opened is moved aside and a fresh one started: an
// export then wrote an empty file and exited 0, a "backup" of nothing.
TEST(Transfer, ExportAndMergeOfAStoreDamagedWhenOpenedFail) {
  ScratchDir scratch;
  const std::string path = scratch.file("kjit.db");
  write_bytes(path, std::string(30000, 'x'));
  std::unique_ptr<Store> store = Store::open(path);
  ASSERT_TRUE(any_contains(store->warnings(), "moved it aside"));
  try {
    store->export_to(scratch.file("backup.db"));
    FAIL() << "an export of a store damaged when opened succeeded";
  } catch (const CacheError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing was exported"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(files_starting_with(scratch.path(), "backup.db").empty());
  EXPECT_THROW(store->merge_into(scratch.file("team.db")), CacheError);
  EXPECT_FALSE(fs::exists(scratch.file("team.db")));
  EXPECT_FALSE(store->verify().ok()) << "verify says what opening found";
}

// A bad row whose key is stored as a blob (TEXT affinity keeps blobs as they
// are): verify --fix deleted by the key as text, matched nothing, and the row
// stayed.
TEST(Transfer, VerifyFixRemovesABadRowWhoseKeyIsABlob) {
  ScratchDir scratch;
  const std::string path = scratch.file("kjit.db");
  std::unique_ptr<Store> store = Store::open(path);
  fill(*store);
  RawDb(path).exec(
      "UPDATE binaries SET key = CAST(key AS BLOB), checksum = '0000000000000000' "
      "WHERE key = 'a1'");
  const VerifyReport fixed = store->verify(/*remove_bad=*/true);
  EXPECT_EQ(fixed.bad_binaries, std::vector<std::string>{"a1"});
  EXPECT_EQ(fixed.removed, 1);
  EXPECT_TRUE(fixed.ok());
  EXPECT_EQ(store->verify().binaries_checked, 3);
}

TEST(Transfer, MergeIntoAnotherFile) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  fill(*mine);
  TransferReport created = mine->merge_into(scratch.file("team.db"), /*trust_binaries=*/true);
  EXPECT_EQ(created.binaries.inserted, 4);
  EXPECT_EQ(created.tunings.inserted, 3);
  mine->put_tuning(make_tuning(kH200, "mm 4096", "tile=512", 0.5, 0.02, 20));
  EXPECT_FALSE(fs::exists(scratch.file("team.db-wal"))) << "a merged file is self-contained";
  {
    // In a rollback journal: a reader in a read-only folder cannot make the -shm
    // file WAL needs (import from an install folder failed).
    Database team(scratch.file("team.db"), SQLITE_OPEN_READONLY);
    Statement mode = team.prepare("PRAGMA journal_mode");
    ASSERT_TRUE(mode.step());
    EXPECT_EQ(mode.column_text(0), "delete");
  }
  TransferReport second = mine->merge_into(scratch.file("team.db"));
  EXPECT_EQ(second.binaries.skipped, 4) << "binaries cross only when asked";
  EXPECT_EQ(second.tunings.replaced, 1);
  EXPECT_EQ(second.tunings.kept, 2);
  std::unique_ptr<Store> team = Store::open(scratch.file("team.db"), strict());
  EXPECT_EQ(team->find_tuning(kH200, "mm 4096")->config, "tile=512");
  // Merged binaries are authenticated with the target's own key.
  EXPECT_TRUE(team->find_binary("h1"));
  team.reset();

  EXPECT_THROW(mine->merge_into(scratch.file("kjit.db")), UserError);
  write_bytes(scratch.file("foreign.db"), std::string(5000, 'f'));
  // The file the user named is no kjit cache: bad input, as for import.
  EXPECT_THROW(mine->merge_into(scratch.file("foreign.db")), UserError);
  EXPECT_EQ(read_bytes(scratch.file("foreign.db")), std::string(5000, 'f'))
      << "a file the user named is never moved aside";
}

TEST(Transfer, VerifyFindsAndRemovesBadBlobs) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  std::unique_ptr<Store> store = Store::open(path);
  fill(*store);
  VerifyReport clean = store->verify();
  EXPECT_TRUE(clean.ok());
  EXPECT_EQ(clean.binaries_checked, 4);
  {
    RawDb raw(path);
    raw.exec("UPDATE binaries SET cubin = zeroblob(100) WHERE key = 'a1'");
  }
  VerifyReport bad = store->verify();
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.bad_binaries, std::vector<std::string>{"a1"});
  VerifyReport fixed = store->verify(/*remove_bad=*/true);
  EXPECT_TRUE(fixed.ok());
  EXPECT_EQ(fixed.removed, 1);
  EXPECT_EQ(store->verify().binaries_checked, 3);
}

TEST(Transfer, ClearAndVacuum) {
  ScratchDir scratch;
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  fill(*store);
  for (int i = 0; i < 10; ++i) store->put_binary(make_binary("big" + std::to_string(i), 200000, i));
  CacheStats before = store->stats();
  EXPECT_EQ(before.binaries, 14);
  EXPECT_EQ(before.tunings, 3);
  EXPECT_EQ(before.trials, 2);
  EXPECT_EQ(before.devices, 2);
  ClearReport cleared = store->clear(/*binaries_only=*/true);
  EXPECT_EQ(cleared.binaries, 14);
  EXPECT_EQ(cleared.tunings, 0);
  EXPECT_EQ(store->stats().tunings, 3);
  EXPECT_GT(store->vacuum(), 1000000) << "the blobs' pages are given back";
  EXPECT_EQ(store->stats().free_bytes, 0);
  ClearReport all = store->clear();
  EXPECT_EQ(all.tunings, 3);
  EXPECT_EQ(all.devices, 2);
  EXPECT_EQ(store->stats().trials, 0);
}

}  // namespace
}  // namespace kjit::cache
