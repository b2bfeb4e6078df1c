// Nothing half-written: exports go to a temporary beside the target and are renamed into place
// only when complete. A failure leaves no file, no temporary and any earlier file untouched. And
// what is written is exactly the cache: read back (core/io/npz_reader for NPZ, nlohmann for
// JSON) and compared value by value.
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io/export.h"
#include "core/io/npz_reader.h"
#include "core/model/model.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

struct Folder {
  fs::path dir;
  Folder() {
    static int counter = 0;
    dir = hs::test::scratch_dir() / ("export_" + std::to_string(++counter));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A file size limit makes writes past it fail with EFBIG, as a full disk fails them with ENOSPC.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int);
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old);
    rlimit r = old;
    r.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

std::shared_ptr<const hs::ActivationCache> fixture_cache(const char* fixture, bool store = false) {
  const auto model = hs::Model::load(hs::test::fixture_model(fixture));
  hs::RunOptions o;
  o.store_scores = store;
  o.store_results = store;
  return model->run(model->encode("The cat sat on the mat!", true), o);
}

}  // namespace

TEST_CASE("exports: a writer that fails midway leaves no file and no temporary", "[export]") {
  Folder f;
  const fs::path out = f.dir / "cache.json";
  CHECK_THROWS_WITH(hs::write_atomically(out,
                                         [](std::ostream& o) {
                                           o << std::string(100000, 'x');
                                           throw std::runtime_error("the writer gave up");
                                         }),
                    out.string() + ": cannot write: the writer gave up");
  CHECK(f.names().empty());
  // Not even a non-standard exception leaves anything behind.
  CHECK_THROWS(hs::write_atomically(out, [](std::ostream& o) {
    o << "partial";
    throw 42;
  }));
  CHECK(f.names().empty());
}

TEST_CASE("exports: a failed export does not damage an earlier file", "[export]") {
  Folder f;
  const fs::path out = f.dir / "cache.npz";
  write_text(out, "the earlier export");
  CHECK_THROWS_AS(hs::write_atomically(out,
                                       [](std::ostream& o) {
                                         o << "half of a new one";
                                         throw hs::Error("stopped");
                                       }),
                  hs::Error);
  CHECK(hs::test::read_text(out) == "the earlier export");
  CHECK(f.names() == std::vector<std::string>{"cache.npz"});
  // A complete export replaces it whole.
  hs::write_file_atomically(out, "the new export");
  CHECK(hs::test::read_text(out) == "the new export");
  CHECK(f.names() == std::vector<std::string>{"cache.npz"});
}

TEST_CASE("exports: a full disk fails cleanly for JSON and NPZ", "[export]") {
  const auto cache = fixture_cache("f32_prefixed");
  Folder f;
  for (const char* name : {"cache.json", "cache.npz"}) {
    const fs::path out = f.dir / name;
    write_text(out, "the earlier export");
    std::string message;
    {
      FileSizeLimit limit(16 * 1024);
      try {
        hs::export_cache(*cache, out);
      } catch (const hs::Error& e) {
        message = e.what();
      }
    }
    INFO(name << ": " << message);
    CHECK(message.rfind(out.string() + ": cannot write: ", 0) == 0);
    CHECK(message.find("full?).") != std::string::npos);
    CHECK(hs::test::read_text(out) == "the earlier export");
  }
  CHECK(f.names() == std::vector<std::string>{"cache.json", "cache.npz"});
}

TEST_CASE("exports: refused paths write nothing", "[export]") {
  const auto cache = fixture_cache("f32_prefixed");
  Folder f;
  CHECK_THROWS_WITH(hs::export_cache(*cache, f.dir / "cache.csv"),
                    (f.dir / "cache.csv").string() + ": unknown output format \".csv\"; use a file name ending in .json or .npz.");
  CHECK_THROWS_WITH(hs::export_cache(*cache, f.dir / "no/such/cache.json"),
                    Catch::Contains("the folder " + (f.dir / "no/such").string() + " does not exist."));
  CHECK(f.names().empty());
}

TEST_CASE("exports: NPZ holds the cache bit for bit, JSON value for value", "[export]") {
  for (const char* fixture : {"f32_prefixed", "f16_plain", "bf16_prefixed", "full_context"}) {
    for (bool store : {false, true}) {
      INFO(fixture << (store ? " (scores and results stored)" : ""));
      const auto cache = fixture_cache(fixture, store);
      Folder f;
      hs::export_cache(*cache, f.dir / "cache.npz");
      hs::export_cache(*cache, f.dir / "cache.json");
      CHECK(f.names() == std::vector<std::string>{"cache.json", "cache.npz"});

      const std::vector<hs::NpzArray> arrays = hs::read_npz_file(f.dir / "cache.npz");
      const std::vector<std::string> keys = cache->keys();
      REQUIRE(arrays.size() == keys.size() + 1);
      CHECK(arrays[0].name == "tokens");
      for (size_t i = 0; i < cache->tokens().size(); ++i)
        CHECK(arrays[0].tensor.data[i] == static_cast<float>(cache->tokens()[i]));
      const auto json = nlohmann::json::parse(hs::test::read_text(f.dir / "cache.json"));
      CHECK(json["tokens"] == nlohmann::json(cache->tokens()));
      for (size_t k = 0; k < keys.size(); ++k) {
        const hs::Tensor t = cache->get(keys[k]);
        INFO(keys[k]);
        CHECK(arrays[k + 1].name == keys[k]);
        CHECK(arrays[k + 1].tensor.shape == t.shape);
        REQUIRE(arrays[k + 1].tensor.data.size() == t.data.size());
        CHECK(std::memcmp(arrays[k + 1].tensor.data.data(), t.data.data(), t.data.size() * sizeof(float)) == 0);
        // JSON: flatten the nested arrays; non-finite values (masked scores) are null.
        std::vector<const nlohmann::json*> flat, stack = {&json[keys[k]]};
        while (!stack.empty()) {
          const nlohmann::json* j = stack.back();
          stack.pop_back();
          if (j->is_array())
            for (auto it = j->rbegin(); it != j->rend(); ++it) stack.push_back(&*it);
          else flat.push_back(j);
        }
        REQUIRE(flat.size() == t.data.size());
        size_t mismatches = 0;
        for (size_t i = 0; i < flat.size(); ++i) {
          const float v = t.data[i];
          if (!std::isfinite(v)) mismatches += flat[i]->is_null() ? 0 : 1;
          else mismatches += flat[i]->is_number() && static_cast<float>(flat[i]->get<double>()) == v ? 0 : 1;
        }
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("npz reader: damaged archives are refused, never misread", "[export]") {
  // A short run keeps the archive small: each truncated copy is searched for its end record.
  const auto model = hs::Model::load(hs::test::fixture_model("f32_prefixed"));
  const auto cache = model->run(std::vector<int32_t>{290, 51});
  const std::string npz = hs::cache_to_npz(*cache);
  const auto* bytes = reinterpret_cast<const uint8_t*>(npz.data());
  CHECK_NOTHROW(hs::read_npz(std::span<const uint8_t>(bytes, npz.size()), "cache.npz"));
  // Truncated: at every length within 4 KB of either end (the headers of the first members, the
  // central directory and the end records), every 61st byte between (each search for the end
  // record scans up to 64 KB back, so every length would make this test slow under ASan).
  for (size_t n = 0; n < npz.size(); n += (n < 4096 || n + 4096 > npz.size()) ? 1 : 61) {
    INFO("truncated to " << n << " bytes");
    CHECK_THROWS_AS(hs::read_npz(std::span<const uint8_t>(bytes, n), "cache.npz"), hs::Error);
  }
  // One flipped bit in the data of the first member: its CRC no longer matches.
  std::string damaged = npz;
  damaged[106] = static_cast<char>(damaged[106] ^ 0x10);  // 30 + 10 (name) + 64 (npy header) = 104
  CHECK_THROWS_WITH(hs::read_npz(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(damaged.data()), damaged.size()),
                                 "cache.npz"),
                    "cache.npz: tokens.npy: CRC-32 mismatch; the archive is damaged.");
}
