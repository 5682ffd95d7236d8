#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "kjit/support/error.h"
#include "kjit/support/npy.h"

namespace kjit {
namespace {

// A file of this process's own: ctest runs each test in a process of its own and
// several at once, and two tests writing one fixed path raced (the sanitizer stage of
// CI read one test's file while another rewrote or removed it).
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("kjit_npy_test_" + std::to_string(getpid()) + "_" + name))
      .string();
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

// A version 1.0 .npy file with `header` (padded as NumPy pads it) and `data`.
std::string npy_bytes(const std::string& header, const std::string& data) {
  std::string padded = header;
  size_t total = 10 + padded.size() + 1;
  padded += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(padded.size() & 0xff);
  out += static_cast<char>(padded.size() >> 8);
  return out + padded + data;
}

std::string read_error(const std::string& bytes) {
  std::string path = temp_path("hostile");
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  std::string error = "(no error)";
  try {
    read_npy(path);
  } catch (const UserError& e) {
    error = e.what();
  }
  std::remove(path.c_str());
  return error;
}

std::string with_shape(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

// Shapes that used to be misread: the product wrapped (16 bytes passed the
// truncation check for 4611686018427387905 x 4 floats; UBSan reported it), a
// minus sign was skipped ((-4,) read as 4), and a size beyond 64 bits was an
// internal error from std::stoll.
TEST(Npy, ShapesAreCheckedNotWrapped) {
  std::string e =
      read_error(npy_bytes(with_shape("(4611686018427387905, 4)"), std::string(16, 'x')));
  EXPECT_NE(e.find("the shape (4611686018427387905, 4) is too large"), std::string::npos) << e;
  e = read_error(npy_bytes(with_shape("(-4,)"), std::string(16, 'x')));
  EXPECT_NE(e.find("a size is negative"), std::string::npos) << e;
  e = read_error(npy_bytes(with_shape("(99999999999999999999999,)"), std::string(16, 'x')));
  EXPECT_NE(e.find("the size 99999999999999999999999 does not fit in 64 bits"), std::string::npos)
      << e;
  e = read_error(npy_bytes(with_shape("(4, x)"), std::string(64, 'x')));
  EXPECT_NE(e.find("malformed .npy shape"), std::string::npos) << e;
  // Well-formed spellings still read, including Python 2's 4L and a scalar.
  EXPECT_EQ(read_error(npy_bytes(with_shape("(2L, 2L)"), std::string(16, 'x'))), "(no error)");
  EXPECT_EQ(read_error(npy_bytes(with_shape("()"), std::string(4, 'x'))), "(no error)");
  EXPECT_EQ(read_error(npy_bytes(with_shape("(0,)"), "")), "(no error)");
}

// A header length far beyond any real header is refused before it is read.
TEST(Npy, HugeHeadersAreRefused) {
  std::string bytes = std::string("\x93NUMPY\x02\x00", 8);
  bytes += std::string("\xff\xff\xff\x7f", 4);  // 2 GiB of header
  std::string e = read_error(bytes + "{'descr': '<f4'");
  EXPECT_NE(e.find("the .npy header is 2147483647 bytes; kjit reads headers of at most 65536"),
            std::string::npos)
      << e;
}

// `--input x=DIR` was an internal error (a stream exception); /dev/zero read
// until memory ran out.
TEST(Npy, OnlyRegularFilesAreRead) {
  std::string dir = std::filesystem::temp_directory_path().string();
  try {
    read_npy(dir);
    ADD_FAILURE() << "a directory was read";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory, not a regular file"), std::string::npos);
  }
  EXPECT_THROW(read_npy("/dev/zero"), UserError);
}

}  // namespace
}  // namespace kjit
