#include "core/model/fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/io/fnv1a.h"

namespace hs {
namespace {

constexpr uint64_t kWhole = 4u << 20;   // files up to this size are hashed whole
constexpr uint64_t kHead = 1u << 20;    // a larger file's first bytes: the header and first tensors
constexpr uint64_t kBlock = 4096;       // each sample of the rest
constexpr int kSamples = 64;

class File {
 public:
  explicit File(const std::filesystem::path& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(path.string() + ": cannot be read to fingerprint the model; check that it exists and is readable.");
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Adds bytes [offset, offset + n) to the hash.
  void hash_range(Fnv1a64& hash, uint64_t offset, uint64_t n, std::vector<unsigned char>& buf) const {
    while (n > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      const ssize_t got = ::pread(fd_, buf.data(), want, static_cast<off_t>(offset));
      if (got <= 0) throw Error(path_.string() + ": reading it failed part way while fingerprinting the model; check the disk.");
      hash.add(buf.data(), static_cast<size_t>(got));
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }

 private:
  std::filesystem::path path_;
  int fd_;
};

}  // namespace

std::string files_fingerprint(const std::vector<std::filesystem::path>& files) {
  Fnv1a64 hash;
  std::vector<unsigned char> buf(1 << 16);
  for (const std::filesystem::path& path : files) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw Error(path.string() + ": cannot be read to fingerprint the model (" + ec.message() + ").");
    const File file(path);
    hash.add_u64(size);
    if (size <= kWhole) {
      file.hash_range(hash, 0, size, buf);
      continue;
    }
    file.hash_range(hash, 0, kHead, buf);
    const uint64_t rest = size - kHead - kBlock;  // the samples lie between the head and the tail
    for (int i = 0; i < kSamples; ++i) file.hash_range(hash, kHead + rest * static_cast<uint64_t>(i) / kSamples, kBlock, buf);
    file.hash_range(hash, size - kBlock, kBlock, buf);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(hash.h));
  return out;
}

}  // namespace hs
