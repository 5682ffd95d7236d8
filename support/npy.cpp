#include "kjit/support/npy.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"
#include "kjit/support/files.h"
#include "kjit/support/half.h"

namespace kjit {

int npy_item_size(const std::string& descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f2" || descr == "<u2") return 2;
  if (descr == "|b1") return 1;
  if (descr == "<f8") return 8;
  return 0;
}

namespace {

// NumPy itself refuses headers above 10000 bytes unless told otherwise; this is
// well above that and keeps a hostile header length from allocating gigabytes.
constexpr size_t kMaxHeaderBytes = 64 * 1024;

// The value of 'key': in the header dict, as raw text up to the next top-level comma.
std::string header_field(const std::string& header, const std::string& key,
                         const std::string& path) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) throw UserError(path + ": .npy header has no '" + key + "'");
  at = header.find(':', at);
  if (at == std::string::npos) throw UserError(path + ": malformed .npy header");
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  if (at < header.size() && header[at] == '(') {
    size_t end = header.find(')', at);
    if (end == std::string::npos) throw UserError(path + ": malformed .npy shape");
    return header.substr(at, end - at + 1);
  }
  size_t end = header.find_first_of(",}", at);
  return header.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// "(3, 4)", "(3,)", "()" (Python 2 wrote "3L") -> sizes; a UserError for
// anything else, a negative size or one that does not fit in 64 bits.
std::vector<int64_t> parse_shape(const std::string& text, const std::string& path) {
  auto malformed = [&](const std::string& why) {
    return UserError(path + ": malformed .npy shape " + text + ": " + why);
  };
  std::vector<int64_t> shape;
  size_t i = 1;  // past '('
  auto skip_spaces = [&] {
    while (i < text.size() && text[i] == ' ') ++i;
  };
  skip_spaces();
  while (i < text.size() && text[i] != ')') {
    if (text[i] == '-') throw malformed("a size is negative");
    size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == start) throw malformed("expected a size");
    int64_t size = 0;
    auto parsed = std::from_chars(text.data() + start, text.data() + i, size);
    if (parsed.ec != std::errc())
      throw malformed("the size " + text.substr(start, i - start) + " does not fit in 64 bits");
    shape.push_back(size);
    if (i < text.size() && text[i] == 'L') ++i;
    skip_spaces();
    if (i < text.size() && text[i] == ',') {
      ++i;
      skip_spaces();
    } else if (i < text.size() && text[i] != ')') {
      throw malformed("expected ',' or ')'");
    }
  }
  return shape;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  InputFile file(path);
  std::string bytes = file.read(10);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    throw UserError(path + ": not a .npy file (no \\x93NUMPY magic)");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_length = 0;
  if (major == 1) {
    header_length = static_cast<unsigned char>(bytes[8]) |
                    (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  } else if (major == 2 || major == 3) {
    bytes += file.read(2);
    if (bytes.size() < 12) throw UserError(path + ": truncated .npy header");
    for (int i = 0; i < 4; ++i)
      header_length |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  } else {
    throw UserError(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_length > kMaxHeaderBytes)
    throw UserError(path + ": the .npy header is " + std::to_string(header_length) +
                    " bytes; kjit reads headers of at most " + std::to_string(kMaxHeaderBytes));
  const size_t header_start = bytes.size();
  std::string header = file.read(static_cast<int64_t>(header_length));
  if (header.size() < header_length) throw UserError(path + ": truncated .npy header");
  NpyArray array;
  std::string descr = header_field(header, "descr", path);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front())
    throw UserError(path + ": malformed descr");
  array.descr = descr.substr(1, descr.size() - 2);  // strip quotes
  if (array.descr == "<b1" || array.descr == "=b1") array.descr = "|b1";
  if (npy_item_size(array.descr) == 0)
    throw UserError(path + ": unsupported dtype '" + array.descr + "'",
                    "kjit reads <f4, <f2, <u2 (bf16 bits), <i4, |b1 and <f8");
  if (header_field(header, "fortran_order", path).find("False") == std::string::npos)
    throw UserError(path + ": Fortran-order arrays are not supported",
                    "save with np.ascontiguousarray(a)");
  std::string shape = header_field(header, "shape", path);
  if (shape.empty() || shape.front() != '(') throw UserError(path + ": malformed .npy shape");
  array.shape = parse_shape(shape, path);
  const int64_t data_bytes =
      checked_size(array.shape, npy_item_size(array.descr), path + ": the shape");
  const int64_t available = file.size() - static_cast<int64_t>(header_start + header_length);
  if (available < data_bytes)
    throw UserError(path + ": truncated data: " + std::to_string(std::max<int64_t>(available, 0)) +
                    " bytes for " + std::to_string(data_bytes));
  array.data.resize(static_cast<size_t>(data_bytes));
  const int64_t read = file.read_into(array.data.data(), data_bytes);
  if (read < data_bytes)
    throw UserError(path + ": truncated data: " + std::to_string(read) + " bytes for " +
                    std::to_string(data_bytes));
  return array;
}

void write_npy(const std::string& path, const NpyArray& array) {
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) shape += std::to_string(array.shape[i]) + ", ";
  if (array.shape.size() > 1) shape.resize(shape.size() - 2);
  if (array.shape.size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header =
      "{'descr': '" + array.descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that the data starts on a 64-byte boundary; the header ends in '\n'.
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  std::ofstream file(path, std::ios::binary);
  if (!file) throw UserError("cannot write '" + path + "': " + std::strerror(errno));
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  file.write(array.data.data(), static_cast<std::streamsize>(array.data.size()));
  if (!file) throw UserError("cannot write '" + path + "': " + std::strerror(errno));
}

std::vector<double> npy_values(const NpyArray& array) {
  int size = npy_item_size(array.descr);
  KJIT_CHECK(size > 0, "unsupported descr " + array.descr);
  size_t count = array.data.size() / static_cast<size_t>(size);
  std::vector<double> values(count);
  const char* p = array.data.data();
  for (size_t i = 0; i < count; ++i, p += size) {
    if (array.descr == "<f4") {
      float v;
      std::memcpy(&v, p, 4);
      values[i] = v;
    } else if (array.descr == "<f8") {
      std::memcpy(&values[i], p, 8);
    } else if (array.descr == "<i4") {
      int32_t v;
      std::memcpy(&v, p, 4);
      values[i] = v;
    } else if (array.descr == "|b1") {
      values[i] = *p != 0 ? 1 : 0;
    } else {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      values[i] = array.descr == "<f2" ? f16_to_f32(bits) : bf16_to_f32(bits);
    }
  }
  return values;
}

NpyArray npy_from_values(const std::string& descr, const std::vector<int64_t>& shape,
                         const std::vector<double>& values) {
  int size = npy_item_size(descr);
  if (size == 0) throw UserError("unsupported .npy dtype '" + descr + "'");
  NpyArray array{descr, shape, std::vector<char>(values.size() * static_cast<size_t>(size))};
  char* p = array.data.data();
  for (size_t i = 0; i < values.size(); ++i, p += size) {
    double v = values[i];
    if (descr == "<f4") {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (descr == "<f8") {
      std::memcpy(p, &v, 8);
    } else if (descr == "<i4") {
      int32_t x = std::isnan(v) ? 0
                                : static_cast<int32_t>(std::fmax(
                                      -2147483648.0, std::fmin(2147483647.0, std::trunc(v))));
      std::memcpy(p, &x, 4);
    } else if (descr == "|b1") {
      *p = v != 0 ? 1 : 0;
    } else {
      uint16_t bits =
          descr == "<f2" ? f32_to_f16(static_cast<float>(v)) : f32_to_bf16(static_cast<float>(v));
      std::memcpy(p, &bits, 2);
    }
  }
  return array;
}

}  // namespace kjit
