// The trust model (docs/cache.md): compiled code is loaded only from a store no
// other user could have written, only when its MAC under this user's secret
// matches, and no link in the store's place is ever followed. Where the test
// runs as root, the "other user" is nobody (65534), as in the read-only test.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <functional>

#include "kjit/cache/store.h"
#include "kjit/support/hash.h"
#include "tests/unit/cache/test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

constexpr uid_t kNobody = 65534;

// Runs `body` as the user nobody in a child process when this test runs as
// root (returns its result), or in this process otherwise.
int as_another_user(const std::function<int()>& body) {
  if (::geteuid() != 0) return body();
  pid_t child = ::fork();
  if (child < 0) return 101;
  if (child == 0) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(100);
    ::_exit(body());
  }
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 102;
  return WEXITSTATUS(status);
}

// Writes a binary row with raw SQL, as an attacker would: the victim's key, a
// cubin of the attacker's choosing and its correct checksum.
void plant(const std::string& path, const std::string& key, const std::vector<char>& cubin) {
  RawDb raw(path);
  std::string hex;
  for (char c : cubin) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  std::string sum = hex64(hash64(cubin.data(), cubin.size()));
  raw.exec(fmt::format(
      "INSERT OR REPLACE INTO binaries (key, bytes, created, arch, nvrtc_version, "
      "generator_version, checksum, mac, options, ptxas_stats, nvrtc_log, source, cubin) VALUES "
      "('{}', {}, 1, 'sm_90', '13.0', 'kjit-gen-1', '{}', '', '[]', '[]', '', '', x'{}')",
      key, cubin.size(), sum, hex));
}

// A store written once by this user (a binary and a tuning), then closed.
std::string victim_store(const ScratchDir& scratch, const std::string& dir_name = "") {
  fs::path dir = dir_name.empty() ? scratch.path() : scratch.path() / dir_name;
  std::string path = (dir / "kjit.db").string();
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(store->binaries_trusted()) << store->binaries_distrust();
  store->put_binary(make_binary("victim", 4000, 1));
  store->put_tuning(make_tuning("g", "p", "tile=64", 1.0, 0.01, 20));
  return path;
}

void set_mode(const fs::path& path, int mode) {
  ASSERT_EQ(::chmod(path.c_str(), static_cast<mode_t>(mode)), 0) << path;
}

// Opens the store at `path`: it must refuse binaries, say `why`, and miss `key`.
void expect_distrusted(const std::string& path, const std::string& why, const std::string& key) {
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(store->enabled()) << store->disabled_reason();
  EXPECT_FALSE(store->binaries_trusted());
  EXPECT_NE(store->binaries_distrust().find(why), std::string::npos) << store->binaries_distrust();
  EXPECT_FALSE(store->find_binary(key)) << "a binary came from an untrusted store";
}

// A store in a directory anyone may write (a 1777 KJIT_CACHE_DIR, a 0666
// kjit.db): another user plants a row under the victim's key with a correct
// checksum. Before, it was a cache hit and `verify` said nothing.
TEST(Trust, RowsPlantedByAnotherUserAreNeverLoaded) {
  ScratchDir scratch;
  std::string path = victim_store(scratch);
  set_mode(scratch.path(), 01777);
  for (const char* suffix : {"", "-wal", "-shm"})
    if (fs::exists(path + suffix)) set_mode(path + suffix, 0666);
  std::vector<char> evil = fake_cubin(4000, 666);
  EXPECT_EQ(as_another_user([&] {
              plant(path, "victim", evil);
              plant(path, "lure", evil);
              return 0;
            }),
            0);

  std::unique_ptr<Store> store = Store::open(path);
  ASSERT_TRUE(store->enabled()) << store->disabled_reason();
  EXPECT_FALSE(store->binaries_trusted());
  EXPECT_TRUE(any_contains(store->warnings(), "is writable by group or others (mode 1777)"));
  EXPECT_TRUE(any_contains(store->warnings(), "chmod go-w"));
  EXPECT_FALSE(store->find_binary("victim")) << "a planted cubin was loaded";
  EXPECT_FALSE(store->find_binary("lure"));
  EXPECT_EQ(store->put_binary(make_binary("new", 100, 2)), PutOutcome::Rejected);
  EXPECT_TRUE(store->find_tuning("g", "p")) << "tunings are still used";
  VerifyReport report = store->verify();
  EXPECT_FALSE(report.ok());
  EXPECT_NE(report.untrusted.find("writable by group or others"), std::string::npos);
  store.reset();

  // Fixed as the warning says: the store is trusted again, and the planted
  // rows fail authentication, are reported, dropped, and recompiled.
  set_mode(scratch.path(), 0700);
  for (const char* suffix : {"", "-wal", "-shm"})
    if (fs::exists(path + suffix)) set_mode(path + suffix, 0600);
  // Files another user created (their -wal or -shm) would still be theirs.
  for (const char* suffix : {"-wal", "-shm"}) {
    if (fs::exists(path + suffix)) {
      struct stat info {};
      ASSERT_EQ(::stat((path + suffix).c_str(), &info), 0);
      if (info.st_uid != ::geteuid()) fs::remove(path + suffix);
    }
  }
  store = Store::open(path);
  ASSERT_TRUE(store->binaries_trusted()) << store->binaries_distrust();
  VerifyReport found = store->verify();
  EXPECT_FALSE(found.ok());
  EXPECT_EQ(found.unauthenticated, (std::vector<std::string>{"lure", "victim"}));
  EXPECT_FALSE(store->find_binary("victim"));
  EXPECT_TRUE(any_contains(store->warnings(), "binary victim failed authentication"));
  BinaryRecord rebuilt = make_binary("victim", 4000, 1);
  EXPECT_EQ(store->put_binary(rebuilt), PutOutcome::Inserted) << "the planted row was dropped";
  ASSERT_TRUE(store->find_binary("victim"));
  EXPECT_EQ(store->find_binary("victim")->cubin, rebuilt.cubin);
  EXPECT_EQ(store->verify(/*remove_bad=*/true).removed, 1) << "the lure";
  EXPECT_TRUE(store->verify().ok());
}

// A private store whose rows are swapped: one row's cubin and checksum (and MAC)
// copied over another's. Before, the other kernel ran under the first key.
TEST(Trust, SwappedRowsFailAuthentication) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  std::unique_ptr<Store> store = Store::open(path);
  store->put_binary(make_binary("a", 3000, 1));
  store->put_binary(make_binary("b", 3000, 2));
  {
    RawDb raw(path);
    raw.exec(
        "UPDATE binaries SET cubin = (SELECT cubin FROM binaries WHERE key = 'b'), checksum = "
        "(SELECT checksum FROM binaries WHERE key = 'b'), mac = (SELECT mac FROM binaries WHERE "
        "key = 'b') WHERE key = 'a'");
  }
  EXPECT_FALSE(store->find_binary("a")) << "b's cubin was loaded as a";
  EXPECT_TRUE(any_contains(store->warnings(), "binary a failed authentication"));
  ASSERT_TRUE(store->find_binary("b"));
  EXPECT_EQ(store->put_binary(make_binary("a", 3000, 1)), PutOutcome::Inserted);
  EXPECT_EQ(store->find_binary("a")->cubin, fake_cubin(3000, 1));
}

// Rows copied from another user's store (valid MACs under their key) do not
// verify under this user's key.
TEST(Trust, AnotherStoresMacsDoNotVerify) {
  ScratchDir scratch;
  std::unique_ptr<Store> theirs = Store::open(scratch.file("theirs/kjit.db"));
  theirs->put_binary(make_binary("k", 2000, 7));
  theirs.reset();
  std::unique_ptr<Store> mine = Store::open(scratch.file("mine/kjit.db"));
  mine->put_tuning(make_tuning("g", "p", "tile=c", 1.0, 0.01, 20));
  {
    RawDb raw(scratch.file("mine/kjit.db"));
    raw.exec("ATTACH '" + scratch.file("theirs/kjit.db") + "' AS theirs");
    raw.exec("INSERT INTO main.binaries SELECT * FROM theirs.binaries");
  }
  EXPECT_FALSE(mine->find_binary("k"));
  EXPECT_TRUE(any_contains(mine->warnings(), "binary k failed authentication"));
}

// A directory above the cache that others may write lets them replace the
// cache directory itself; a sticky one (/tmp) does not.
TEST(Trust, DirectoriesAboveTheCacheCount) {
  ScratchDir scratch;
  fs::create_directory(scratch.path() / "shared");
  victim_store(scratch, "shared/cache");
  set_mode(scratch.path() / "shared", 0777);
  const std::string path = (scratch.path() / "shared/cache/kjit.db").string();
  expect_distrusted(path, "(above the cache directory) is writable by group or others (mode 0777)",
                    "victim");
  set_mode(scratch.path() / "shared", 01777);
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(store->binaries_trusted()) << store->binaries_distrust();
  EXPECT_TRUE(store->find_binary("victim"));
}

TEST(Trust, AFileOthersMayWriteIsNotTrusted) {
  ScratchDir scratch;
  std::string path = victim_store(scratch);
  set_mode(path, 0664);
  expect_distrusted(path, "kjit.db is writable by group or others (mode 0664)", "victim");
}

// Only root can make a directory belong to someone else.
TEST(Trust, ADirectoryOfAnotherUserIsNotTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  ScratchDir scratch;
  victim_store(scratch, "theirs");
  ASSERT_EQ(::chown((scratch.path() / "theirs").c_str(), kNobody, kNobody), 0);
  expect_distrusted(scratch.file("theirs/kjit.db"), "belongs to uid 65534", "victim");
}

// The secret key: created 0600 whatever the umask, shared by every process of
// the store, and refused when others may read it or it is not a key.
TEST(Trust, TheKeyIsPrivateAndShared) {
  ScratchDir scratch;
  std::string path = scratch.file("kjit.db");
  mode_t old_umask = ::umask(0);
  std::unique_ptr<Store> first = Store::open(path);
  std::unique_ptr<Store> second = Store::open(path);
  ::umask(old_umask);
  EXPECT_EQ(mode_of(path + ".key"), 0600);
  EXPECT_EQ(fs::file_size(path + ".key"), 32u);
  first->put_binary(make_binary("k", 1000, 1));
  EXPECT_TRUE(second->find_binary("k")) << "both stores use one key";
  first.reset();
  second.reset();

  set_mode(path + ".key", 0644);
  expect_distrusted(path, "others may read or write it (mode 0644)", "k");
  set_mode(path + ".key", 0600);
  write_bytes(path + ".key", "short");
  expect_distrusted(path, "is not a kjit key (5 bytes, not 32)", "k");
  // Removed as the message says: a new key, and the old binaries fail and go.
  fs::remove(path + ".key");
  std::unique_ptr<Store> store = Store::open(path);
  EXPECT_TRUE(store->binaries_trusted());
  EXPECT_FALSE(store->find_binary("k"));
}

// Links in the store's place are never followed. Before, a linked kjit.db made
// kjit write a database into the link's target, and a linked lock file created a
// file wherever it pointed.
TEST(Links, ALinkedDatabaseIsNotFollowed) {
  ScratchDir scratch;
  fs::create_directory(scratch.path() / "cache");
  write_bytes(scratch.file("target.db"), "");  // someone else's file, say
  fs::create_symlink(scratch.path() / "target.db", scratch.path() / "cache/kjit.db");
  std::unique_ptr<Store> store = Store::open(scratch.file("cache/kjit.db"));
  EXPECT_FALSE(store->enabled());
  EXPECT_TRUE(any_contains(store->warnings(), "kjit.db is a symbolic link; kjit never follows"));
  EXPECT_EQ(store->put_binary(make_binary("k", 100, 1)), PutOutcome::Rejected);
  EXPECT_EQ(fs::file_size(scratch.file("target.db")), 0u)
      << "a database was written through the link";
  EXPECT_FALSE(fs::exists(scratch.file("target.db-wal")));
}

TEST(Links, ALinkedLockWalOrKeyIsNotFollowed) {
  for (const char* suffix : {".lock", "-wal", "-shm", ".key"}) {
    ScratchDir scratch;
    std::string path = scratch.file("kjit.db");
    victim_store(scratch);
    fs::remove(path + suffix);
    fs::create_symlink(scratch.path() / "elsewhere", path + suffix);
    // Damage the file, so that opening it moves it aside under the lock.
    write_bytes(path, std::string(8192, 'x'));
    std::unique_ptr<Store> store = Store::open(path);
    EXPECT_FALSE(store->enabled()) << suffix;
    EXPECT_TRUE(
        any_contains(store->warnings(), std::string("kjit.db") + suffix + " is a symbolic link"))
        << suffix;
    EXPECT_FALSE(fs::exists(scratch.path() / "elsewhere"))
        << "a file was created through " << suffix;
  }
}

// A directory in kjit.db's place (or a FIFO, which would block the open).
TEST(Links, ANonRegularDatabaseIsRefusedAtOnce) {
  ScratchDir scratch;
  ASSERT_EQ(::mkfifo(scratch.file("kjit.db").c_str(), 0600), 0);
  std::unique_ptr<Store> store = Store::open(scratch.file("kjit.db"));
  EXPECT_FALSE(store->enabled());
  EXPECT_TRUE(any_contains(store->warnings(), "kjit.db is not a regular file"));
}

}  // namespace
}  // namespace kjit::cache
