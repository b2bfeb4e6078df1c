// A strict, memory-mapped reader of the safetensors format.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON (padded with spaces), then the
// data block. Each tensor's data_offsets [begin, end) are relative to the data block. Everything
// in the header is validated before a single tensor byte is read: the size bound, the JSON, each
// dtype and shape, that the byte count equals numel * dtype size, that offsets lie inside the
// data block, and that tensors do not overlap.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hs {

enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, OTHER };

const char* dtype_name(DType d);

struct TensorInfo {
  std::string name;
  DType dtype = DType::OTHER;
  std::string dtype_text;       // as written in the header (e.g. "F8_E4M3" for OTHER)
  std::vector<int64_t> shape;
  uint64_t begin = 0;           // byte offsets relative to the data block
  uint64_t end = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Largest header accepted. Real files have headers of a few hundred KB at most.
  static constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

  // Maps the file read-only and validates its header. Throws hs::Error naming the file.
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);
  // Same checks over bytes already in memory (copied); `name` stands for the file in messages.
  static std::shared_ptr<const SafetensorsFile> from_bytes(std::span<const uint8_t> bytes, const std::string& name);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(std::string_view tensor_name) const;

  // The tensor converted to float32 (F32, F16, BF16 and F64 are accepted; anything else throws).
  std::vector<float> to_f32(const TensorInfo& t) const;
  void to_f32(const TensorInfo& t, float* out) const;
  // The float32 data in place, or nullptr when the tensor is not F32 or not 4-byte aligned.
  const float* f32_in_place(const TensorInfo& t) const;
  std::span<const uint8_t> raw_bytes(const TensorInfo& t) const;
  // Drops the process's resident copy of the whole pages inside [p, p + bytes) of the mapping
  // (madvise MADV_DONTNEED). The bytes stay readable: a later read maps them again from the page
  // cache, or from disk if the kernel has evicted them. For weights that were copied into another
  // layout and are rarely read in place again. No effect for a file built from bytes.
  void release_resident(const void* p, size_t bytes) const;
  // Copies the `bytes` bytes the mapping shows at [p, p + bytes) into dst, reading them through
  // the file (pread) rather than the mapping: the kernel copies from the page cache through its
  // own large-page view of memory, where touching the mapping first maps, and on a virtual machine
  // walks, every 4 KiB page of it. For a large tensor that is read once to be repacked. Returns
  // false, having copied nothing, when [p, p + bytes) is not inside this file's mapping; throws
  // hs::Error when the read fails.
  bool copy_mapped(const void* p, size_t bytes, void* dst) const;
  // Which file on disk this is, as it is now: device, inode, size and modification time, or ""
  // for a file built from bytes. Changes when the file is replaced or written.
  std::string identity() const;

 private:
  SafetensorsFile() = default;
  void parse_header();

  std::string name_;
  const uint8_t* bytes_ = nullptr;  // the whole file
  uint64_t size_ = 0;
  uint64_t data_start_ = 0;
  void* mapping_ = nullptr;         // munmap target when memory-mapped
  int fd_ = -1;                     // kept open with the mapping, for copy_mapped
  std::vector<uint8_t> owned_;      // when built from bytes
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hs
