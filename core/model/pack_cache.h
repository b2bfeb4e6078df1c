// The packed copies of a model's matrices (packed_gemm.h), kept on disk between opens.
//
// Packing is most of what opening a large model costs: every matrix is read, transposed and
// written into freshly zeroed memory. The second time a folder is opened its packed matrices are
// mapped from a file written the first time, which takes a small fraction of that (the numbers
// are in docs/benchmarks.md). The file is written in the background after the first open, so that
// open is not slowed down, and appears under its final name only once it is complete and on disk.
//
// Where: $HEADSCOPE_PACK_CACHE if set ("off" or empty turns the cache off), else
// $XDG_CACHE_HOME/headscope/packed, else ~/.cache/headscope/packed. Only models whose packed
// matrices total at least $HEADSCOPE_PACK_CACHE_MIN_MB (default 64) are cached: smaller ones pack
// in a few milliseconds. The directory is kept under $HEADSCOPE_PACK_CACHE_MAX_MB (default 4096)
// by removing the least recently opened entries.
//
// An entry is named by a hash of its key and holds the key itself, which is checked on every
// open: the format version, the panel width of this build, the model's architecture and shapes,
// and each weight file's device, inode, size and modification time. Any change to the weights
// (a new download, an edit) is a new key; an entry that does not match (or is damaged: too
// short, a bad header, a matrix of the wrong shape) is ignored and rewritten.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/packed_gemm.h"

namespace hs {

class SafetensorsFile;

class PackCache {
 public:
  // The cache for a model of these weight files, described by `model_key` (its architecture and
  // shapes). Off (every take() packs) when the cache is turned off, a file has no identity (built
  // from bytes), or the directory is unusable.
  PackCache(const std::vector<std::shared_ptr<const SafetensorsFile>>& files, const std::string& model_key);
  ~PackCache();
  PackCache(const PackCache&) = delete;
  PackCache& operator=(const PackCache&) = delete;

  // Matrix i of the model (in the loader's order): the cached one when the entry holds one of this
  // type and shape, otherwise pack(), remembered for the entry to be written.
  PackedMatrix take(size_t i, PanelType type, int64_t K, int64_t N, const std::function<PackedMatrix()>& pack);
  // Once every matrix was taken: when any was packed and the model is large enough, writes the
  // entry in the background (the matrices' memory is kept alive until it is written).
  void finish();

  // Whether every matrix taken so far came from the entry.
  bool hit() const { return taken_ > 0 && packed_ == 0; }
  // The entry's path ("" when the cache is off).
  const std::filesystem::path& path() const { return path_; }

  // Waits until the entries being written in the background are written (or abandoned). For
  // tests, and for a short-lived process that wants its entry before it exits.
  static void wait_for_writes();

 private:
  struct Entry;
  std::filesystem::path dir_, path_;
  std::string key_;
  std::shared_ptr<const Entry> entry_;   // the mapped entry, when one matched
  std::vector<PackedMatrix> matrices_;   // everything taken, for writing
  size_t taken_ = 0, packed_ = 0;
  bool stale_ = false;                   // the entry exists but did not match
};

}  // namespace hs
