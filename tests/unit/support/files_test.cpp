#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "kjit/support/error.h"
#include "kjit/support/files.h"

namespace kjit {
namespace {

std::string error_of(const std::string& path, int64_t cap = 1 << 20) {
  try {
    read_regular_file(path, cap, "test input");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "kjit-files-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(Files, ReadsARegularFileWhole) {
  std::ofstream(file("a.txt")) << "y = sin(x)\n";
  EXPECT_EQ(read_regular_file(file("a.txt"), 100, "test input"), "y = sin(x)\n");
  InputFile in(file("a.txt"));
  EXPECT_EQ(in.size(), 11);
  EXPECT_EQ(in.read(3), "y =");
  EXPECT_EQ(in.read(1000), " sin(x)\n");
  EXPECT_EQ(in.read(10), "");
}

// A directory used to read as empty (and "compile" to an empty cubin), /dev/zero
// until memory ran out, and a FIFO blocked forever.
TEST_F(Files, WhatIsNotARegularFileIsRefusedAtOnce) {
  EXPECT_NE(error_of(dir_.string()).find("is a directory, not a regular file"), std::string::npos);
  EXPECT_NE(error_of("/dev/zero").find("'/dev/zero' is a character device, not a regular file"),
            std::string::npos);
  ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0600), 0);
  EXPECT_NE(error_of(file("fifo")).find("is a FIFO (named pipe), not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of(file("missing"))
                .find("cannot read '" + file("missing") + "': No such file or directory"),
            std::string::npos);
}

TEST_F(Files, TheCapNamesSizesAndWhat) {
  std::ofstream(file("big")) << std::string(3000, 'x');
  std::string e = error_of(file("big"), 2048);
  EXPECT_NE(e.find("is 2.9 KiB; kjit reads at most 2.0 KiB of test input"), std::string::npos) << e;
  EXPECT_EQ(read_regular_file(file("big"), 3000, "test input").size(), 3000u);
}

}  // namespace
}  // namespace kjit
