// Reading back the NPZ archives write_cache_npz makes: a zip of stored (uncompressed) .npy
// arrays of little-endian float32 in C order (float64 and int32 arrays, which commands write for
// scalars and token ids, are read converted to float). Strict: every offset and size is checked against
// the archive, every CRC-32 is verified, and anything else (compression, another dtype, Fortran
// order) is refused with hs::Error. Used by the tests and the export fuzzer to prove that what
// was written is exactly what numpy will read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace hs {

struct NpzArray {
  std::string name;  // the member's name without ".npy"
  Tensor tensor;
};

// The arrays in central-directory order. `source` names the archive in messages.
std::vector<NpzArray> read_npz(std::span<const uint8_t> bytes, const std::string& source);
std::vector<NpzArray> read_npz_file(const std::filesystem::path& path);
// One .npy array (as numpy.save writes it: little-endian float32, C order), with the same checks.
Tensor read_npy(std::span<const uint8_t> bytes, const std::string& source);
Tensor read_npy_file(const std::filesystem::path& path);

}  // namespace hs
