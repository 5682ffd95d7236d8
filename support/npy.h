// NumPy .npy files (format version 1.0/2.0, C order, little-endian), so kjit's
// inputs and outputs can be compared with NumPy or PyTorch.
//
// dtypes: '<f4' f32, '<f2' f16, '<i4' i32, '|b1' bool, '<f8' (read only, converted),
// and '<u2' for bf16: NumPy has no bfloat16, so a bf16 array is stored as its raw
// 16-bit patterns. In PyTorch: torch.from_numpy(np.load(p)).view(torch.bfloat16);
// to write one: t.view(torch.uint16).numpy() (or t.view(torch.int16)... saved as '<u2').
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kjit {

struct NpyArray {
  std::string descr;  // "<f4", "<f2", "<u2" (bf16 bits), "<i4", "|b1", "<f8"
  std::vector<int64_t> shape;
  std::vector<char> data;  // element_count * item size bytes, C order
};

// Throws UserError naming the path and what is wrong (not .npy, Fortran order,
// big-endian, an unsupported dtype, truncated data).
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const NpyArray& array);

// Bytes per element of a supported descr; 0 when unsupported.
int npy_item_size(const std::string& descr);

// The values as doubles ('<u2' is read as bf16 bits).
std::vector<double> npy_values(const NpyArray& array);
// An array of `descr` holding `values`, rounded to the dtype (nearest even).
NpyArray npy_from_values(const std::string& descr, const std::vector<int64_t>& shape,
                         const std::vector<double>& values);

}  // namespace kjit
