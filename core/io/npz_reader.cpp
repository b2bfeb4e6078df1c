#include "core/io/npz_reader.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "core/io/crc32.h"

namespace hs {
namespace {

// Bounds-checked little-endian reads over the archive.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& source) : b_(bytes), source_(source) {}

  template <typename T>
  T get(uint64_t at) const {
    need(at, sizeof(T), "a record");
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(b_[at + i]) << (8 * i);
    return static_cast<T>(v);
  }
  void need(uint64_t at, uint64_t n, const char* what) const {
    if (at > b_.size() || n > b_.size() - at)
      throw Error(source_ + ": " + what + " at byte " + std::to_string(at) + " runs past the end of the archive (" +
                  std::to_string(b_.size()) + " bytes); the file is truncated or not an NPZ archive.");
  }
  const uint8_t* at(uint64_t offset) const { return b_.data() + offset; }
  uint64_t size() const { return b_.size(); }
  [[noreturn]] void fail(const std::string& why) const { throw Error(source_ + ": " + why); }

 private:
  std::span<const uint8_t> b_;
  const std::string& source_;
};

// Parses the .npy header dictionary numpy writes: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// The dtypes read: float32 as is; float64 and int32 (the scalars and token ids that commands
// write beside their float32 arrays) converted to float.
enum class NpyDtype { F4, F8, I4 };
size_t dtype_size(NpyDtype d) { return d == NpyDtype::F8 ? 8 : 4; }

std::vector<int64_t> parse_npy(const Reader& r, const std::string& member, const uint8_t* p, uint64_t n,
                               uint64_t& data_offset, NpyDtype& dtype) {
  auto fail = [&](const std::string& why) { r.fail(member + ": " + why); };
  if (n < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) fail("not a .npy array (no \\x93NUMPY magic).");
  const int major = p[6];
  uint64_t header_len = 0, start = 0;
  if (major == 1) header_len = p[8] | (uint64_t{p[9]} << 8), start = 10;
  else if (major == 2 || major == 3) {
    if (n < 12) fail("the .npy header is truncated.");
    header_len = p[8] | (uint64_t{p[9]} << 8) | (uint64_t{p[10]} << 16) | (uint64_t{p[11]} << 24), start = 12;
  } else {
    fail(".npy format version " + std::to_string(major) + " is not known.");
  }
  if (header_len > n - start) fail("the .npy header runs past the member's data.");
  const std::string h(reinterpret_cast<const char*>(p + start), header_len);
  data_offset = start + header_len;
  if ((data_offset % 16) != 0) fail("the .npy data does not start on a 16-byte boundary.");

  auto value_after = [&](const char* key) -> size_t {
    const size_t k = h.find(key);
    if (k == std::string::npos) fail(std::string("the .npy header has no ") + key + ".");
    size_t i = k + std::strlen(key);
    while (i < h.size() && h[i] == ' ') ++i;
    return i;
  };
  const size_t d = value_after("'descr':");
  if (h.compare(d, 5, "'<f4'") == 0) dtype = NpyDtype::F4;
  else if (h.compare(d, 5, "'<f8'") == 0) dtype = NpyDtype::F8;
  else if (h.compare(d, 5, "'<i4'") == 0) dtype = NpyDtype::I4;
  else fail("dtype is not little-endian float32, float64 or int32 ('<f4', '<f8', '<i4').");
  const uint64_t elem = dtype_size(dtype);
  const size_t f = value_after("'fortran_order':");
  if (h.compare(f, 5, "False") != 0) fail("array is in Fortran order; expected C order.");
  size_t s = value_after("'shape':");
  if (s >= h.size() || h[s] != '(') fail("the .npy shape is not a tuple.");
  ++s;
  std::vector<int64_t> shape;
  while (true) {
    while (s < h.size() && h[s] == ' ') ++s;
    if (s < h.size() && h[s] == ')') break;
    int64_t dim = 0;
    size_t digits = 0;
    while (s < h.size() && h[s] >= '0' && h[s] <= '9') {
      if (dim > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a .npy dimension is too large.");
      dim = dim * 10 + (h[s] - '0');
      ++s, ++digits;
    }
    if (digits == 0) fail("the .npy shape holds something that is not a dimension.");
    shape.push_back(dim);
    while (s < h.size() && h[s] == ' ') ++s;
    if (s < h.size() && h[s] == ',') ++s;
    else if (s < h.size() && h[s] == ')') break;
    else fail("the .npy shape tuple is malformed.");
  }
  uint64_t count = 1;
  for (int64_t dim : shape) {
    if (dim != 0 && count > (std::numeric_limits<uint64_t>::max() / 8) / static_cast<uint64_t>(dim))
      fail("the .npy shape has more elements than can exist.");
    count *= static_cast<uint64_t>(dim);
  }
  if (count * elem != n - data_offset)
    fail("holds " + std::to_string(n - data_offset) + " data bytes but shape " + shape_string(shape) + " needs " +
         std::to_string(count * elem) + ".");
  return shape;
}

// The elements of `n` data bytes as floats.
std::vector<float> to_floats(const uint8_t* p, uint64_t n, NpyDtype dtype) {
  std::vector<float> out(n / dtype_size(dtype));
  // An array of no elements has no data (and memcpy may not be given the null pointer of an empty vector).
  if (out.empty()) return out;
  switch (dtype) {
    case NpyDtype::F4: std::memcpy(out.data(), p, n); break;
    case NpyDtype::F8:
      for (size_t i = 0; i < out.size(); ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      break;
    case NpyDtype::I4:
      for (size_t i = 0; i < out.size(); ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<float>(v);
      }
      break;
  }
  return out;
}

}  // namespace

std::vector<NpzArray> read_npz(std::span<const uint8_t> bytes, const std::string& source) {
  const Reader r(bytes, source);
  // The end-of-central-directory record: 22 bytes plus a comment of at most 65535.
  if (r.size() < 22) r.fail("too short to be an NPZ (zip) archive.");
  uint64_t eocd = std::numeric_limits<uint64_t>::max();
  const uint64_t lowest = r.size() > 22 + 65535 ? r.size() - 22 - 65535 : 0;
  for (uint64_t i = r.size() - 22 + 1; i-- > lowest;)
    if (r.get<uint32_t>(i) == 0x06054b50u && i + 22 + r.get<uint16_t>(i + 20) == r.size()) {
      eocd = i;
      break;
    }
  if (eocd == std::numeric_limits<uint64_t>::max()) r.fail("no end-of-central-directory record; not a zip archive.");
  uint64_t entries = r.get<uint16_t>(eocd + 10);
  uint64_t cd_size = r.get<uint32_t>(eocd + 12);
  uint64_t cd_start = r.get<uint32_t>(eocd + 16);
  if (entries == 0xffff || cd_size == 0xffffffffu || cd_start == 0xffffffffu) {
    if (eocd < 20 || r.get<uint32_t>(eocd - 20) != 0x07064b50u) r.fail("ZIP64 values without a ZIP64 locator.");
    const uint64_t z = r.get<uint64_t>(eocd - 20 + 8);
    if (r.get<uint32_t>(z) != 0x06064b50u) r.fail("the ZIP64 end record is missing.");
    entries = r.get<uint64_t>(z + 32);
    cd_size = r.get<uint64_t>(z + 40);
    cd_start = r.get<uint64_t>(z + 48);
  }
  r.need(cd_start, cd_size, "the central directory");

  std::vector<NpzArray> out;
  uint64_t p = cd_start;
  for (uint64_t e = 0; e < entries; ++e) {
    if (r.get<uint32_t>(p) != 0x02014b50u) r.fail("central directory entry " + std::to_string(e) + " is damaged.");
    const uint16_t method = r.get<uint16_t>(p + 10);
    const uint32_t crc = r.get<uint32_t>(p + 16);
    uint64_t csize = r.get<uint32_t>(p + 20);
    uint64_t usize = r.get<uint32_t>(p + 24);
    const uint16_t name_len = r.get<uint16_t>(p + 28);
    const uint16_t extra_len = r.get<uint16_t>(p + 30);
    const uint16_t comment_len = r.get<uint16_t>(p + 32);
    uint64_t local = r.get<uint32_t>(p + 42);
    r.need(p + 46, uint64_t{name_len} + extra_len + comment_len, "a central directory entry");
    std::string name(reinterpret_cast<const char*>(r.at(p + 46)), name_len);
    // ZIP64 extra field: the 64-bit values of the fields that read 0xffffffff, in this order.
    for (uint64_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const uint16_t id = r.get<uint16_t>(x), len = r.get<uint16_t>(x + 2);
      uint64_t f = x + 4;
      if (id == 0x0001) {
        if (usize == 0xffffffffu) usize = r.get<uint64_t>(f), f += 8;
        if (csize == 0xffffffffu) csize = r.get<uint64_t>(f), f += 8;
        if (local == 0xffffffffu) local = r.get<uint64_t>(f), f += 8;
      }
      x += 4 + uint64_t{len};
    }
    p += 46 + uint64_t{name_len} + extra_len + comment_len;
    if (method != 0) r.fail(name + ": is compressed (method " + std::to_string(method) + "); expected stored arrays.");
    if (csize != usize) r.fail(name + ": stored sizes disagree.");
    if (r.get<uint32_t>(local) != 0x04034b50u) r.fail(name + ": the local header is missing.");
    const uint16_t local_name_len = r.get<uint16_t>(local + 26), local_extra_len = r.get<uint16_t>(local + 28);
    const uint64_t data = local + 30 + local_name_len + local_extra_len;
    r.need(data, usize, "a member's data");
    if (local_name_len != name_len || std::memcmp(r.at(local + 30), name.data(), name_len) != 0)
      r.fail(name + ": the local and central names differ.");
    if (crc32(r.at(data), usize) != crc) r.fail(name + ": CRC-32 mismatch; the archive is damaged.");
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0) r.fail(name + ": is not a .npy member.");
    uint64_t data_offset = 0;
    NpzArray a;
    a.name = name.substr(0, name.size() - 4);
    NpyDtype dtype = NpyDtype::F4;
    a.tensor.shape = parse_npy(r, name, r.at(data), usize, data_offset, dtype);
    a.tensor.data = to_floats(r.at(data + data_offset), usize - data_offset, dtype);
    out.push_back(std::move(a));
  }
  return out;
}

Tensor read_npy(std::span<const uint8_t> bytes, const std::string& source) {
  const Reader r(bytes, source);
  uint64_t data_offset = 0;
  Tensor t;
  NpyDtype dtype = NpyDtype::F4;
  t.shape = parse_npy(r, "the array", bytes.data(), bytes.size(), data_offset, dtype);
  t.data = to_floats(bytes.data() + data_offset, bytes.size() - data_offset, dtype);
  return t;
}

Tensor read_npy_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open.");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return read_npy(bytes, path.string());
}

std::vector<NpzArray> read_npz_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open.");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return read_npz(bytes, path.string());
}

}  // namespace hs
