#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/error.h"
#include "support/npy.h"

namespace kjit {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kjit_npy_test_" + name)).string();
}

TEST(Npy, RoundTripsEveryDtype) {
  std::vector<double> values = {0, 1.5, -2.25, 3};
  for (const char* descr : {"<f4", "<f2", "<u2", "<i4", "|b1", "<f8"}) {
    std::string path = temp_path(std::string("rt") + (descr + 1));
    write_npy(path, npy_from_values(descr, {2, 2}, values));
    NpyArray back = read_npy(path);
    EXPECT_EQ(back.descr, descr);
    EXPECT_EQ(back.shape, (std::vector<int64_t>{2, 2}));
    std::vector<double> got = npy_values(back);
    if (std::string(descr) == "<i4") {
      EXPECT_EQ(got, (std::vector<double>{0, 1, -2, 3}));
    } else if (std::string(descr) == "|b1") {
      EXPECT_EQ(got, (std::vector<double>{0, 1, 1, 1}));
    } else {
      EXPECT_EQ(got, values) << descr;
    }
    std::remove(path.c_str());
  }
}

TEST(Npy, HeaderIsNumpyCompatible) {
  std::string path = temp_path("header");
  write_npy(path, npy_from_values("<f4", {3}, {1, 2, 3}));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t header =
      static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header) % 64, 0u);
  EXPECT_NE(bytes.find("'shape': (3,)"), std::string::npos);
  EXPECT_EQ(bytes.size(), 10 + header + 12);
  std::remove(path.c_str());
}

TEST(Npy, BadFilesAreUserErrors) {
  EXPECT_THROW(read_npy("/nonexistent/a.npy"), UserError);
  std::string path = temp_path("bad");
  std::ofstream(path) << "not numpy";
  EXPECT_THROW(read_npy(path), UserError);
  NpyArray a = npy_from_values("<f4", {4}, {1, 2, 3, 4});
  a.data.resize(8);  // truncated
  write_npy(path, a);
  EXPECT_THROW(read_npy(path), UserError);
  std::remove(path.c_str());
  EXPECT_THROW(npy_from_values(">f4", {1}, {1}), UserError);
}

}  // namespace
}  // namespace kjit
