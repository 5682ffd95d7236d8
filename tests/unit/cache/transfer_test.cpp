// export / import / merge, verify, clear and vacuum.
#include "kjit/cache/key.h"
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
  mine->put_tuning(make_tuning(kH200, "p1", "mine", 1.0, 0.01, 20));  // better than theirs
  mine->put_tuning(make_tuning(kH200, "p2", "mine", 2.0, 0.01, 20));  // worse than theirs

  std::string theirs_path = scratch.file("theirs/kjit.db");
  {
    std::unique_ptr<Store> theirs = Store::open(theirs_path);
    theirs->put_binary(make_binary("shared", 5000, 1));
    theirs->put_binary(make_binary("new", 6000, 2));
    theirs->put_binary(make_binary("torn", 7000, 3));
    theirs->put_tuning(make_tuning(kH200, "p1", "theirs", 1.5, 0.01, 20));
    theirs->put_tuning(make_tuning(kH200, "p2", "theirs", 1.0, 0.01, 20));
    theirs->put_tuning(make_tuning(kH200, "p3", "theirs", 1.0, 0.01, 20));
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
  EXPECT_EQ(mine->find_tuning(kH200, "p3")->config, "theirs");
  TransferReport report = mine->import_from(theirs_path, /*trust_binaries=*/true);
  EXPECT_EQ(report.binaries.inserted, 1);
  EXPECT_EQ(report.binaries.kept, 1);
  EXPECT_EQ(report.binaries.rejected, 1) << "a blob whose checksum fails never enters";
  EXPECT_EQ(report.tunings.kept, 3) << "the cautious import took them already";
  EXPECT_EQ(mine->find_tuning(kH200, "p1")->config, "mine");
  EXPECT_EQ(mine->find_tuning(kH200, "p2")->config, "theirs");
  EXPECT_EQ(mine->find_tuning(kH200, "p3")->config, "theirs");
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

TEST(Transfer, MergeIntoAnotherFile) {
  ScratchDir scratch;
  std::unique_ptr<Store> mine = Store::open(scratch.file("kjit.db"));
  fill(*mine);
  TransferReport created = mine->merge_into(scratch.file("team.db"), /*trust_binaries=*/true);
  EXPECT_EQ(created.binaries.inserted, 4);
  EXPECT_EQ(created.tunings.inserted, 3);
  mine->put_tuning(make_tuning(kH200, "mm 4096", "tile=512", 0.5, 0.02, 20));
  EXPECT_FALSE(fs::exists(scratch.file("team.db-wal"))) << "a merged file is self-contained";
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
  EXPECT_THROW(mine->merge_into(scratch.file("foreign.db")), CacheError);
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
