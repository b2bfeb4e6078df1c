#include "core/io/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/io/crc32.h"

namespace hs {
namespace fs = std::filesystem;

// ---------------------------------------------------------------- atomic files

void write_atomically(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  if (!path.has_filename()) throw Error(path.string() + ": is a folder name; give a file name to write.");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(path.string() + ": is a folder; give a file name to write.");
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error(path.string() + ": cannot write: " +
                (fs::exists(dir, ec) ? dir.string() + " is a file, not a folder."
                                     : "the folder " + dir.string() + " does not exist."));
  std::string tmpl = (dir / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0)
    throw Error(path.string() + ": cannot write: " + std::strerror(errno) + ". Choose a folder you can write to.");
  ::close(fd);
  const fs::path tmp = tmpl;
  auto fail = [&](const std::string& why) {
    fs::remove(tmp, ec);
    throw Error(path.string() + ": cannot write: " + why);
  };
  // Any failure while writing (the writer's own exception, a full disk, a file size limit) ends
  // here: the temporary goes, the message names the path, and nothing at `path` has changed.
  std::string failure;
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      failure = "cannot open a temporary file in " + dir.string() + ".";
    } else {
      write(out);
      out.flush();
      if (!out) failure = "the disk refused the data (is it full?).";
      out.close();
      if (failure.empty() && !out) failure = "closing the file failed (is the disk full?).";
    }
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  if (!failure.empty()) fail(failure);
  // Make the data durable before the rename makes it visible.
  if (int f = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC); f >= 0) {
    ::fsync(f);
    ::close(f);
  }
  ::chmod(tmp.c_str(), 0644);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(std::string(std::strerror(errno)) + ".");
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  write_atomically(path, [&](std::ostream& out) { out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); });
}

// ---------------------------------------------------------------- JSON

namespace {

void write_number(std::ostream& out, float v) {
  if (!std::isfinite(v)) {
    out << "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  out.write(buf, r.ptr - buf);
}

// Nested arrays for `shape` over `data`, starting at dimension `dim`.
void write_nested(std::ostream& out, const Tensor& t, size_t dim, size_t& offset) {
  out << '[';
  const int64_t n = t.shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (i) out << ',';
    if (dim + 1 == t.shape.size()) write_number(out, t.data[offset++]);
    else write_nested(out, t, dim + 1, offset);
  }
  out << ']';
}

}  // namespace

void write_cache_json(const ActivationCache& cache, std::ostream& out) {
  out << "{\"tokens\":[";
  for (size_t i = 0; i < cache.tokens().size(); ++i) out << (i ? "," : "") << cache.tokens()[i];
  out << ']';
  for (const std::string& key : cache.keys()) {
    const Tensor t = cache.get(key);
    out << ",\n\"" << key << "\":";
    size_t offset = 0;
    if (t.shape.empty()) write_number(out, t.data.at(0));
    else write_nested(out, t, 0, offset);
  }
  out << "}\n";
}

std::string cache_to_json(const ActivationCache& cache) {
  std::ostringstream ss;
  write_cache_json(cache, ss);
  return ss.str();
}

// ---------------------------------------------------------------- NPZ

namespace {

template <typename T>
void put(std::string& s, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) s.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xffu));
}

std::string npy_header(const std::vector<int64_t>& shape, NpyType type = NpyType::F32, int unicode_width = 0) {
  const std::string descr = type == NpyType::F64       ? "<f8"
                            : type == NpyType::I32     ? "<i4"
                            : type == NpyType::Unicode ? "<U" + std::to_string(std::max(1, unicode_width))
                                                       : "<f4";
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1) dict += ",";
    else if (i + 1 < shape.size()) dict += ", ";
  }
  dict += "), }";
  // Pad so that magic(6) + version(2) + len(2) + dict + '\n' is a multiple of 64.
  const size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h.push_back(1);
  h.push_back(0);
  put<uint16_t>(h, static_cast<uint16_t>(dict.size()));
  return h + dict;
}

struct ZipEntry {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
};

class ZipWriter {
 public:
  explicit ZipWriter(std::ostream& out) : out_(out) {}

  void add(const std::string& name, const std::string& header, const float* data, size_t count) {
    add_bytes(name, header, data, count * sizeof(float));
  }
  void add_bytes(const std::string& name, const std::string& header, const void* data, size_t bytes) {
    ZipEntry e;
    e.name = name;
    e.offset = pos_;
    e.size = header.size() + bytes;
    e.crc = crc32(header.data(), header.size());
    e.crc = crc32(data, bytes, e.crc);
    const bool z64 = e.size >= 0xffffffffull || e.offset >= 0xffffffffull;
    std::string h;
    put<uint32_t>(h, 0x04034b50u);
    put<uint16_t>(h, z64 ? 45 : 20);  // version needed
    put<uint16_t>(h, 0);              // flags
    put<uint16_t>(h, 0);              // stored
    put<uint16_t>(h, 0);              // time
    put<uint16_t>(h, 0x21);           // date 1980-01-01
    put<uint32_t>(h, e.crc);
    put<uint32_t>(h, z64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
    put<uint32_t>(h, z64 ? 0xffffffffu : static_cast<uint32_t>(e.size));
    put<uint16_t>(h, static_cast<uint16_t>(name.size()));
    put<uint16_t>(h, z64 ? 20 : 0);
    h += name;
    if (z64) {
      put<uint16_t>(h, 0x0001);
      put<uint16_t>(h, 16);
      put<uint64_t>(h, e.size);
      put<uint64_t>(h, e.size);
    }
    emit(h.data(), h.size());
    emit(header.data(), header.size());
    emit(reinterpret_cast<const char*>(data), bytes);
    entries_.push_back(std::move(e));
  }

  void finish() {
    const uint64_t cd_start = pos_;
    for (const ZipEntry& e : entries_) {
      const bool big = e.size >= 0xffffffffull || e.offset >= 0xffffffffull;
      std::string extra;
      if (big) {
        put<uint16_t>(extra, 0x0001);
        put<uint16_t>(extra, 24);
        put<uint64_t>(extra, e.size);
        put<uint64_t>(extra, e.size);
        put<uint64_t>(extra, e.offset);
      }
      std::string h;
      put<uint32_t>(h, 0x02014b50u);
      put<uint16_t>(h, big ? 45 : 20);  // made by
      put<uint16_t>(h, big ? 45 : 20);  // needed
      put<uint16_t>(h, 0);
      put<uint16_t>(h, 0);
      put<uint16_t>(h, 0);
      put<uint16_t>(h, 0x21);
      put<uint32_t>(h, e.crc);
      put<uint32_t>(h, big ? 0xffffffffu : static_cast<uint32_t>(e.size));
      put<uint32_t>(h, big ? 0xffffffffu : static_cast<uint32_t>(e.size));
      put<uint16_t>(h, static_cast<uint16_t>(e.name.size()));
      put<uint16_t>(h, static_cast<uint16_t>(extra.size()));
      put<uint16_t>(h, 0);  // comment
      put<uint16_t>(h, 0);  // disk
      put<uint16_t>(h, 0);  // internal attributes
      put<uint32_t>(h, 0);  // external attributes
      put<uint32_t>(h, big ? 0xffffffffu : static_cast<uint32_t>(e.offset));
      h += e.name;
      h += extra;
      emit(h.data(), h.size());
    }
    const uint64_t cd_size = pos_ - cd_start;
    const bool z64 = cd_start >= 0xffffffffull || entries_.size() >= 0xffff;
    std::string t;
    if (z64) {
      const uint64_t z64_eocd = pos_;
      put<uint32_t>(t, 0x06064b50u);
      put<uint64_t>(t, 44);
      put<uint16_t>(t, 45);
      put<uint16_t>(t, 45);
      put<uint32_t>(t, 0);
      put<uint32_t>(t, 0);
      put<uint64_t>(t, entries_.size());
      put<uint64_t>(t, entries_.size());
      put<uint64_t>(t, cd_size);
      put<uint64_t>(t, cd_start);
      put<uint32_t>(t, 0x07064b50u);
      put<uint32_t>(t, 0);
      put<uint64_t>(t, z64_eocd);
      put<uint32_t>(t, 1);
    }
    put<uint32_t>(t, 0x06054b50u);
    put<uint16_t>(t, 0);
    put<uint16_t>(t, 0);
    put<uint16_t>(t, static_cast<uint16_t>(z64 ? 0xffff : entries_.size()));
    put<uint16_t>(t, static_cast<uint16_t>(z64 ? 0xffff : entries_.size()));
    put<uint32_t>(t, z64 ? 0xffffffffu : static_cast<uint32_t>(cd_size));
    put<uint32_t>(t, z64 ? 0xffffffffu : static_cast<uint32_t>(cd_start));
    put<uint16_t>(t, 0);
    emit(t.data(), t.size());
  }

 private:
  void emit(const char* p, size_t n) {
    out_.write(p, static_cast<std::streamsize>(n));
    if (!out_) throw Error("writing the archive failed (is the disk full?).");
    pos_ += n;
  }
  std::ostream& out_;
  uint64_t pos_ = 0;
  std::vector<ZipEntry> entries_;
};

}  // namespace

void write_cache_npz(const ActivationCache& cache, std::ostream& out) {
  ZipWriter zip(out);
  std::vector<float> tokens(cache.tokens().begin(), cache.tokens().end());
  zip.add("tokens.npy", npy_header({static_cast<int64_t>(tokens.size())}), tokens.data(), tokens.size());
  for (const std::string& key : cache.keys()) {
    const Tensor t = cache.get(key);
    zip.add(key + ".npy", npy_header(t.shape), t.data.data(), t.data.size());
  }
  zip.finish();
}

void write_npz(std::ostream& out, const std::vector<NpzArrayView>& arrays) {
  ZipWriter zip(out);
  for (const NpzArrayView& a : arrays) {
    const size_t element = a.type == NpyType::F64       ? 8
                           : a.type == NpyType::Unicode ? 4 * static_cast<size_t>(std::max(1, a.unicode_width))
                                                        : 4;
    zip.add_bytes(a.name + ".npy", npy_header(a.shape, a.type, a.unicode_width), a.data,
                  static_cast<size_t>(Tensor::count(a.shape)) * element);
  }
  zip.finish();
}

std::vector<char32_t> npy_unicode(const std::vector<std::string>& strings, int& width) {
  size_t w = 1;
  for (const std::string& s : strings) w = std::max(w, s.size());
  width = static_cast<int>(w);
  std::vector<char32_t> out(strings.size() * w, U'\0');
  for (size_t i = 0; i < strings.size(); ++i)
    for (size_t j = 0; j < strings[i].size(); ++j) {
      const auto byte = static_cast<unsigned char>(strings[i][j]);
      if (byte > 0x7F) throw Error("a string array of an NPZ file holds a non-ASCII string: " + strings[i]);
      out[i * w + j] = byte;
    }
  return out;
}

std::string cache_to_npz(const ActivationCache& cache) {
  std::ostringstream ss;
  write_cache_npz(cache, ss);
  return ss.str();
}

void export_cache(const ActivationCache& cache, const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".json") write_atomically(path, [&](std::ostream& out) { write_cache_json(cache, out); });
  else if (ext == ".npz") write_atomically(path, [&](std::ostream& out) { write_cache_npz(cache, out); });
  else
    throw Error(path.string() + ": unknown output format \"" + ext + "\"; use a file name ending in .json or .npz.");
}

}  // namespace hs
