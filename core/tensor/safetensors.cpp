#include "core/tensor/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor/half.h"
#include "core/tensor/tensor.h"

namespace hs {
namespace {

struct DTypeSpec {
  const char* name;
  DType dtype;
  uint64_t bytes;
};

constexpr DTypeSpec kDTypes[] = {
    {"F32", DType::F32, 4}, {"F16", DType::F16, 2},   {"BF16", DType::BF16, 2}, {"F64", DType::F64, 8},
    {"I64", DType::I64, 8}, {"I32", DType::I32, 4},   {"I16", DType::I16, 2},   {"I8", DType::I8, 1},
    {"U8", DType::U8, 1},   {"BOOL", DType::BOOL, 1},
};
// Types the format knows that we do not read; they still get a size so the layout can be checked.
constexpr DTypeSpec kOtherDTypes[] = {
    {"U16", DType::OTHER, 2}, {"U32", DType::OTHER, 4}, {"U64", DType::OTHER, 8},
    {"F8_E4M3", DType::OTHER, 1}, {"F8_E5M2", DType::OTHER, 1},
};

std::string sys_error() { return std::strerror(errno); }

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& s : kDTypes)
    if (s.dtype == d) return s.name;
  return "unsupported";
}

int64_t TensorInfo::numel() const { return Tensor::count(shape); }

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = path.string();
  // O_NONBLOCK: a named pipe planted as model.safetensors must be refused below, not wait forever
  // for a writer. It changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(f->name_ + ": cannot open: " + sys_error() + ". Check that the file exists and is readable.");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = sys_error();
    ::close(fd);
    throw Error(f->name_ + ": cannot read its size: " + why + ".");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(f->name_ + (S_ISDIR(st.st_mode) ? ": is a folder, not a safetensors file."
                                                 : ": is not a regular file (a device, pipe or socket); expected a safetensors file."));
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const std::string why = sys_error();
      ::close(fd);
      throw Error(f->name_ + ": cannot memory-map the file: " + why + ".");
    }
    f->mapping_ = m;
    f->bytes_ = static_cast<const uint8_t*>(m);
    f->fd_ = fd;
  } else {
    ::close(fd);
  }
  f->parse_header();
  return f;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::from_bytes(std::span<const uint8_t> bytes,
                                                                   const std::string& name) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = name;
  f->owned_.assign(bytes.begin(), bytes.end());
  f->bytes_ = f->owned_.data();
  f->size_ = f->owned_.size();
  f->parse_header();
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::parse_header() {
  const std::string& who = name_;
  if (size_ < 8)
    throw Error(who + ": file is " + std::to_string(size_) +
                " bytes, too short to be safetensors (it needs an 8-byte header length). The file is truncated or "
                "not a safetensors file.");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes_[i];
  if (header_len > kMaxHeaderBytes)
    throw Error(who + ": header length is " + std::to_string(header_len) + " bytes, more than the " +
                std::to_string(kMaxHeaderBytes) + " accepted. The file is damaged or not a safetensors file.");
  if (header_len > size_ - 8)
    throw Error(who + ": header length is " + std::to_string(header_len) + " bytes but only " +
                std::to_string(size_ - 8) + " bytes follow. The file is truncated; download it again.");
  if (header_len < 2) throw Error(who + ": header is " + std::to_string(header_len) + " bytes; expected a JSON object.");
  data_start_ = 8 + header_len;
  const uint64_t data_size = size_ - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes_ + 8),
                                   reinterpret_cast<const char*>(bytes_ + 8 + header_len));
  } catch (const std::exception& e) {
    throw Error(who + ": header is not valid JSON (" + json_error_reason(e) + "). The file is damaged or not a safetensors file.");
  }
  if (!header.is_object()) throw Error(who + ": header is JSON but not an object of tensors.");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) throw Error(who + ": \"__metadata__\" must be an object of strings.");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(who + ": \"__metadata__\" entry \"" + m.key() + "\" must be a string.");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = who + ": tensor \"" + key + "\"";
    if (!v.is_object()) throw Error(where + ": expected an object with dtype, shape and data_offsets.");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) throw Error(where + ": missing \"" + field + "\".");
    TensorInfo t;
    t.name = key;
    if (!v["dtype"].is_string()) throw Error(where + ": \"dtype\" must be a string.");
    t.dtype_text = v["dtype"].get<std::string>();
    uint64_t elem_bytes = 0;
    for (const auto& s : kDTypes)
      if (t.dtype_text == s.name) t.dtype = s.dtype, elem_bytes = s.bytes;
    for (const auto& s : kOtherDTypes)
      if (t.dtype_text == s.name) t.dtype = s.dtype, elem_bytes = s.bytes;
    if (elem_bytes == 0)
      throw Error(where + ": unknown dtype \"" + t.dtype_text + "\" (expected F32, F16, BF16, ...).");
    const auto& shape = v["shape"];
    if (!shape.is_array()) throw Error(where + ": \"shape\" must be an array of non-negative integers.");
    if (shape.size() > 8) throw Error(where + ": shape has " + std::to_string(shape.size()) + " dimensions; at most 8 are accepted.");
    // The element count must not overflow: the byte count is checked against it below.
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        throw Error(where + ": shape entries must be non-negative integers, found " + (d.is_structured() ? std::string(d.type_name()) : d.dump()) + ".");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      t.shape.push_back(static_cast<int64_t>(dim));
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
      else numel *= dim;
    }
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / elem_bytes ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(where + ": shape " + shape.dump() + " has more elements than can exist; the header is damaged.");
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw Error(where + ": \"data_offsets\" must be two non-negative integers [begin, end].");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.end < t.begin)
      throw Error(where + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                  "] end before they begin; the header is damaged.");
    if (t.end > data_size)
      throw Error(where + ": data_offsets end at byte " + std::to_string(t.end) + " but the data block has only " +
                  std::to_string(data_size) + " bytes. The file is truncated; download it again.");
    const uint64_t expected = numel * elem_bytes;
    if (t.end - t.begin != expected)
      throw Error(where + ": holds " + std::to_string(t.end - t.begin) + " bytes but dtype " + t.dtype_text +
                  " and shape " + shape_string(t.shape) + " need " + std::to_string(expected) + ".");
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes: a crafted file could otherwise alias one weight onto another.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors_)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      throw Error(who + ": tensors \"" + by_offset[i - 1]->name + "\" and \"" + by_offset[i]->name +
                  "\" overlap in the data block; the header is damaged.");
}

const TensorInfo* SafetensorsFile::find(std::string_view tensor_name) const {
  auto it = index_.find(std::string(tensor_name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::raw_bytes(const TensorInfo& t) const {
  return {bytes_ + data_start_ + t.begin, static_cast<size_t>(t.end - t.begin)};
}

const float* SafetensorsFile::f32_in_place(const TensorInfo& t) const {
  if (t.dtype != DType::F32) return nullptr;
  const uint8_t* p = bytes_ + data_start_ + t.begin;
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<const float*>(p);
}

void SafetensorsFile::release_resident(const void* p, size_t bytes) const {
  if (!mapping_) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  const uintptr_t map_lo = reinterpret_cast<uintptr_t>(mapping_), map_hi = map_lo + size_;
  if (lo < map_lo || hi > map_hi) return;
  const uintptr_t first = (lo + page - 1) / page * page, last = hi / page * page;  // whole pages only
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool SafetensorsFile::copy_mapped(const void* p, size_t bytes, void* dst) const {
  const auto lo = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(bytes_);
  if (lo < base || lo - base > size_ || bytes > size_ - (lo - base)) return false;
  if (fd_ < 0) {  // built from bytes: already in memory
    std::memcpy(dst, p, bytes);
    return true;
  }
  auto* out = static_cast<unsigned char*>(dst);
  auto offset = static_cast<off_t>(lo - base);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(name_ + ": cannot read " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + ": " +
                  (n < 0 ? sys_error() : std::string("the file is shorter than when it was opened")) +
                  ". Check that the file was not changed or removed while it was being opened.");
    out += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

std::string SafetensorsFile::identity() const {
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return "";
  return "file " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + " size " + std::to_string(st.st_size) +
         " modified " + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

std::vector<float> SafetensorsFile::to_f32(const TensorInfo& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  to_f32(t, out.data());
  return out;
}

void SafetensorsFile::to_f32(const TensorInfo& t, float* out) const {
  const uint8_t* p = bytes_ + data_start_ + t.begin;
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(out, p, n * 4);
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(p[2 * i] | (p[2 * i + 1] << 8)) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      return;
    case DType::F64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      return;
    default:
      throw Error(name_ + ": tensor \"" + t.name + "\" has dtype " + t.dtype_text +
                  "; model weights must be floating point (F32, F16 or BF16).");
  }
}

}  // namespace hs
