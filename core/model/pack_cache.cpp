#include "core/model/pack_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <thread>

#include "core/io/fnv1a.h"
#include "core/tensor/safetensors.h"

namespace hs {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'H', 'S', 'P', 'A', 'C', 'K', '0', '1'};
// Bump when the packing or this file's layout changes: an old entry is then a different key.
constexpr int kFormat = 1;
constexpr uint64_t kMaxHeaderBytes = 16u << 20;
constexpr uint64_t kAlign = 4096;
constexpr int64_t kMaxSide = int64_t{1} << 30;  // a damaged header's sizes cannot overflow bytes_for

uint64_t env_megabytes(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return end && *end == '\0' ? n : fallback;
}

fs::path cache_dir() {
  if (const char* v = std::getenv("HEADSCOPE_PACK_CACHE")) {
    if (!*v || std::string_view(v) == "off") return {};
    return fs::path(v);
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return fs::path(x) / "headscope" / "packed";
  if (const char* h = std::getenv("HOME"); h && *h == '/') return fs::path(h) / ".cache" / "headscope" / "packed";
  return {};
}

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool pread_all(int fd, void* dst, size_t bytes, off_t offset) {
  auto* out = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, out, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool pwrite_all(int fd, const void* src, size_t bytes, off_t offset) {
  const auto* in = static_cast<const unsigned char*>(src);
  while (bytes > 0) {
    const size_t chunk = std::min<size_t>(bytes, size_t{64} << 20);
    const ssize_t n = ::pwrite(fd, in, chunk, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    in += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// The entries being written, by path: one writer per entry, and wait_for_writes().
struct Writes {
  std::mutex mu;
  std::condition_variable done;
  std::set<std::string> in_flight;
};
Writes& writes() {
  static Writes* w = new Writes();  // never destroyed: a writer may still run at exit
  return *w;
}

// Keeps the directory's entries under max_bytes, the least recently opened first out; `keep` stays.
void evict(const fs::path& dir, const fs::path& keep, uint64_t max_bytes) {
  struct Item {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type used;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".hspack" || !e.is_regular_file(ec)) continue;
    const uint64_t bytes = e.file_size(ec);
    if (ec) continue;
    items.push_back({e.path(), bytes, e.last_write_time(ec)});
    total += bytes;
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.used < b.used; });
  for (const Item& it : items) {
    if (total <= max_bytes) break;
    if (it.path == keep) continue;
    if (fs::remove(it.path, ec)) total -= it.bytes;
  }
}

// Removes temporaries that a writer ended by its process's exit left behind (older than an hour).
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().find(".tmp-") == std::string::npos) continue;
    if (e.last_write_time(ec) < cutoff) fs::remove(e.path(), ec);
  }
}

void write_entry(const fs::path& dir, const fs::path& path, const std::string& key,
                 const std::vector<PackedMatrix>& matrices, uint64_t max_bytes) {
  // Private to the user, like the weights it is made from may be.
  std::error_code ec;
  fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return;
  remove_stale_temporaries(dir);
  nlohmann::json items = nlohmann::json::array();
  uint64_t offset = 0;  // from the start of the data
  for (const PackedMatrix& m : matrices) {
    items.push_back({static_cast<int>(m.type()), m.rows(), m.cols(), offset, m.bytes(), m.count_non_finite()});
    offset = round_up(offset + m.bytes(), kAlign);
  }
  const std::string header = nlohmann::json{{"key", key}, {"matrices", items}}.dump();
  const uint64_t data_start = round_up(16 + header.size(), kAlign);
  static std::atomic<int> serial{0};
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  unsigned char head[16];
  std::memcpy(head, kMagic, 8);
  const uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) head[8 + i] = static_cast<unsigned char>(header_bytes >> (8 * i));
  bool ok = pwrite_all(fd, head, 16, 0) && pwrite_all(fd, header.data(), header.size(), 16);
  for (size_t i = 0; ok && i < matrices.size(); ++i)
    ok = pwrite_all(fd, matrices[i].data(), matrices[i].bytes(),
                    static_cast<off_t>(data_start + items[i][3].get<uint64_t>()));
  // The entry gets its name only once its bytes are on disk: a crash leaves a temporary, never a
  // named entry with missing data.
  ok = ok && ::ftruncate(fd, static_cast<off_t>(data_start + offset)) == 0 && ::fdatasync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) {
    evict(dir, path, max_bytes);
    return;
  }
  ::unlink(tmp.c_str());
}

}  // namespace

struct PackCache::Entry {
  struct Item {
    PanelType type;
    int64_t K, N;
    uint64_t offset, bytes;
    int64_t non_finite;
  };
  void* map = MAP_FAILED;
  size_t size = 0;
  uint64_t data_start = 0;
  std::vector<Item> items;
  ~Entry() {
    if (map != MAP_FAILED) ::munmap(map, size);
  }
};

PackCache::PackCache(const std::vector<std::shared_ptr<const SafetensorsFile>>& files, const std::string& model_key) {
  dir_ = cache_dir();
  if (dir_.empty() || files.empty()) return;
  key_ = "headscope packed matrices " + std::to_string(kFormat) + "; panel width " +
         std::to_string(PackedMatrix::panel_width()) + "; " + model_key;
  for (const auto& f : files) {
    const std::string id = f->identity();
    if (id.empty()) return;  // not a file on disk
    key_ += "; " + id;
  }
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.hspack", static_cast<unsigned long long>(fnv1a64(key_)));
  path_ = dir_ / name;

  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // not written yet
  stale_ = true;       // until it checks out
  auto entry = std::make_shared<Entry>();
  struct stat st {};
  unsigned char head[16];
  uint64_t header_bytes = 0;
  bool ok = ::fstat(fd, &st) == 0 && st.st_size >= 16 && pread_all(fd, head, 16, 0) && std::memcmp(head, kMagic, 8) == 0;
  if (ok) {
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | head[8 + i];
    ok = header_bytes <= kMaxHeaderBytes && header_bytes <= static_cast<uint64_t>(st.st_size) - 16;
  }
  std::string header;
  if (ok) {
    header.resize(header_bytes);
    ok = pread_all(fd, header.data(), header.size(), 16);
  }
  if (ok) {
    entry->size = static_cast<size_t>(st.st_size);
    entry->data_start = round_up(16 + header_bytes, kAlign);
    try {
      const nlohmann::json j = nlohmann::json::parse(header);
      ok = j.at("key").get<std::string>() == key_;
      for (const auto& m : j.at("matrices")) {
        if (!ok) break;
        const int type = m.at(0).get<int>();
        Entry::Item it{static_cast<PanelType>(type),    m.at(1).get<int64_t>(),  m.at(2).get<int64_t>(),
                       m.at(3).get<uint64_t>(),         m.at(4).get<uint64_t>(), m.at(5).get<int64_t>()};
        ok = type >= 0 && type <= 2 && it.K > 0 && it.N > 0 && it.K < kMaxSide && it.N < kMaxSide && it.offset % 64 == 0 &&
             it.bytes == PackedMatrix::bytes_for(it.type, it.K, it.N) && entry->data_start + it.offset <= entry->size &&
             it.bytes <= entry->size - entry->data_start - it.offset;
        entry->items.push_back(it);
      }
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (ok) {
    // Mapped with its page tables filled at once: far cheaper than a fault per page later.
    entry->map = ::mmap(nullptr, entry->size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    ok = entry->map != MAP_FAILED;
  }
  if (ok) {
    ::futimens(fd, nullptr);  // most recently used, for eviction
    entry_ = std::move(entry);
    stale_ = false;
  }
  ::close(fd);
}

PackCache::~PackCache() = default;

PackedMatrix PackCache::take(size_t i, PanelType type, int64_t K, int64_t N, const std::function<PackedMatrix()>& pack) {
  ++taken_;
  if (entry_ && i < entry_->items.size()) {
    const Entry::Item& it = entry_->items[i];
    if (it.type == type && it.K == K && it.N == N) {
      const void* data = static_cast<const unsigned char*>(entry_->map) + entry_->data_start + it.offset;
      matrices_.push_back(PackedMatrix::view(type, K, N, data, std::shared_ptr<const void>(entry_, data), it.non_finite));
      return matrices_.back();
    }
    stale_ = true;
  }
  ++packed_;
  matrices_.push_back(pack());
  return matrices_.back();
}

void PackCache::finish() {
  if (path_.empty()) return;
  if (entry_ && entry_->items.size() != taken_) stale_ = true;
  if (packed_ == 0 && !stale_) return;
  uint64_t total = 0;
  for (const PackedMatrix& m : matrices_) total += m.bytes();
  if (total < (env_megabytes("HEADSCOPE_PACK_CACHE_MIN_MB", 64) << 20)) return;
  Writes& w = writes();
  {
    std::lock_guard lock(w.mu);
    if (!w.in_flight.insert(path_.string()).second) return;  // another open of this model writes it
  }
  std::thread([dir = dir_, path = path_, key = key_, matrices = std::move(matrices_),
               max_bytes = env_megabytes("HEADSCOPE_PACK_CACHE_MAX_MB", 4096) << 20] {
    write_entry(dir, path, key, matrices, max_bytes);
    Writes& w = writes();
    std::lock_guard lock(w.mu);
    w.in_flight.erase(path.string());
    w.done.notify_all();
  }).detach();
  matrices_.clear();
}

void PackCache::wait_for_writes() {
  Writes& w = writes();
  std::unique_lock lock(w.mu);
  w.done.wait(lock, [&] { return w.in_flight.empty(); });
}

}  // namespace hs
