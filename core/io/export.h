// Writing the activation cache to JSON and NPZ, and writing any file atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/cache.h"

namespace hs {

// Streams into a temporary file beside `path` and renames it into place only when `write`
// returned and every byte reached the disk; on any failure (an exception from `write`, a full
// disk, no permission) the temporary is removed and an existing file at `path` is untouched.
// Throws hs::Error naming the path and the system's reason.
void write_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// One JSON object: "tokens" plus every cache key as nested arrays; masked scores (and any other
// non-finite value, which JSON cannot hold) are null.
void write_cache_json(const ActivationCache& cache, std::ostream& out);
// An NPZ archive (a zip of stored .npy float32 arrays, loadable with numpy.load): "tokens" (as
// float32 values) plus every cache key. Uses ZIP64 records when the archive passes 4 GiB.
void write_cache_npz(const ActivationCache& cache, std::ostream& out);
std::string cache_to_json(const ActivationCache& cache);

// The element type of an NPZ array: float32 unless said ('<f4', '<f8', '<i4' in numpy's terms;
// Unicode: numpy's fixed-width strings '<U{width}', UTF-32LE code points, NUL-padded).
enum class NpyType : uint8_t { F32, F64, I32, Unicode };
// One array of an NPZ archive: the key numpy.load gives it, its shape, and its Tensor::count(shape)
// elements of `type`, row-major (read in place, not copied).
struct NpzArrayView {
  std::string name;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  NpyType type = NpyType::F32;
  int unicode_width = 0;  // Unicode: code points per element
};
// Strings as a Unicode array's data (4 * width bytes each, width = the longest's code points);
// the strings are ASCII (node ids and the like): a byte above 0x7F is refused with hs::Error.
std::vector<char32_t> npy_unicode(const std::vector<std::string>& strings, int& width);
// An NPZ archive of these arrays, in the same format as write_cache_npz (analyses' exports).
void write_npz(std::ostream& out, const std::vector<NpzArrayView>& arrays);
std::string cache_to_npz(const ActivationCache& cache);

// Picks the format from the extension (.json or .npz) and writes atomically. Throws hs::Error for
// another extension or a path that cannot be written.
void export_cache(const ActivationCache& cache, const std::filesystem::path& path);

}  // namespace hs
