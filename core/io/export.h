// Writing the activation cache to JSON and NPZ, and writing any file atomically.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/model/cache.h"

namespace hs {

// Writes `bytes` to a temporary file beside `path` and renames it into place only when complete;
// on failure no file is left and an existing file at `path` is untouched. Throws hs::Error
// naming the path and the system's reason.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// One JSON object: "tokens" plus every cache key as nested arrays; masked scores are null.
std::string cache_to_json(const ActivationCache& cache);
// An NPZ archive (stored zip of .npy float32 arrays, loadable with numpy.load): every cache key
// plus "tokens" (as float32 values).
std::string cache_to_npz(const ActivationCache& cache);

// Picks the format from the extension (.json or .npz) and writes atomically.
void export_cache(const ActivationCache& cache, const std::filesystem::path& path);

}  // namespace hs
