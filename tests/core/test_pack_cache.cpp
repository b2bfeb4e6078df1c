// The packed-matrix cache on disk (core/model/pack_cache.h): a second open maps the packed copies
// written after the first, and computes the same bits; a changed weight file, a damaged entry or
// a cache turned off is never read.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/model/pack_cache.h"
#include "core/model/weights.h"
#include "tests/core/test_support.h"

namespace fs = std::filesystem;

namespace {

// Points the cache at a fresh directory and caches models of any size, for one test.
struct CacheEnvironment {
  fs::path dir;
  explicit CacheEnvironment(const std::string& name) {
    dir = hs::test::scratch_dir() / ("pack_cache_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ::setenv("HEADSCOPE_PACK_CACHE", dir.c_str(), 1);
    ::setenv("HEADSCOPE_PACK_CACHE_MIN_MB", "0", 1);
  }
  ~CacheEnvironment() {
    hs::PackCache::wait_for_writes();
    ::unsetenv("HEADSCOPE_PACK_CACHE");
    ::unsetenv("HEADSCOPE_PACK_CACHE_MIN_MB");
    fs::remove_all(dir);
  }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) found.push_back(e.path());
    return found;
  }
};

// A copy of a fixture model, so that its files can be touched.
fs::path copy_model(const std::string& fixture, const fs::path& where) {
  const fs::path to = where / fixture;
  fs::create_directories(to);
  fs::copy(hs::test::fixture_model(fixture), to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return to;
}

std::vector<float> last_logits(const hs::Model& m) {
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3};
  const auto cache = m.run(ids);
  const auto row = cache->logits.row(cache->logits.rows() - 1);
  return std::vector<float>(row.data(), row.data() + row.size());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a second open maps the packed matrices written after the first, with the same results", "[pack_cache]") {
  CacheEnvironment env("reuse");
  // A 16-bit model with separate q, k and v in two shards, and a float32 one.
  for (const std::string fixture : {"qwen2_bias", "f32_prefixed"}) {
    INFO(fixture);
    const fs::path model = copy_model(fixture, env.dir.parent_path() / ("models_" + std::to_string(::getpid())));
    ::setenv("HEADSCOPE_PACK_CACHE", "off", 1);
    const auto uncached = hs::Model::load(model);
    CHECK_FALSE(uncached->weights()->packed_from_cache());
    const std::vector<float> expected = last_logits(*uncached);
    hs::PackCache::wait_for_writes();
    const size_t before = env.entries().size();  // nothing written while it is off

    ::setenv("HEADSCOPE_PACK_CACHE", env.dir.c_str(), 1);
    const auto first = hs::Model::load(model);
    CHECK_FALSE(first->weights()->packed_from_cache());
    CHECK(same_bits(last_logits(*first), expected));
    hs::PackCache::wait_for_writes();
    REQUIRE(env.entries().size() == before + 1);

    const auto second = hs::Model::load(model);
    CHECK(second->weights()->packed_from_cache());
    CHECK(same_bits(last_logits(*second), expected));
    CHECK(second->weights()->warnings() == uncached->weights()->warnings());
    fs::remove_all(model);
  }
}

TEST_CASE("the cache is not read for changed weights, a damaged entry, or when it is off", "[pack_cache]") {
  CacheEnvironment env("invalid");
  const fs::path model = copy_model("bf16_prefixed", env.dir.parent_path() / ("models_inv_" + std::to_string(::getpid())));
  const std::vector<float> expected = last_logits(*hs::Model::load(model));  // and writes the entry
  hs::PackCache::wait_for_writes();
  REQUIRE(env.entries().size() == 1);
  const fs::path entry = env.entries().front();
  REQUIRE(hs::Model::load(model)->weights()->packed_from_cache());

  SECTION("the weight file is written again") {
    // Same bytes, a new modification time: a new key, so the old entry is not this model's.
    fs::last_write_time(model / "model.safetensors", fs::last_write_time(model / "model.safetensors") + std::chrono::seconds(5));
    const auto m = hs::Model::load(model);
    CHECK_FALSE(m->weights()->packed_from_cache());
    CHECK(same_bits(last_logits(*m), expected));
    hs::PackCache::wait_for_writes();
    CHECK(env.entries().size() == 2);  // the new key's entry beside the old
    CHECK(hs::Model::load(model)->weights()->packed_from_cache());
  }
  SECTION("the entry is cut short") {
    fs::resize_file(entry, fs::file_size(entry) / 2);
    const auto m = hs::Model::load(model);
    CHECK_FALSE(m->weights()->packed_from_cache());
    CHECK(same_bits(last_logits(*m), expected));
    hs::PackCache::wait_for_writes();  // rewritten whole
    CHECK(hs::Model::load(model)->weights()->packed_from_cache());
  }
  SECTION("the entry's header is damaged") {
    {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(20);
      f.write("#####", 5);
    }
    const auto m = hs::Model::load(model);
    CHECK_FALSE(m->weights()->packed_from_cache());
    CHECK(same_bits(last_logits(*m), expected));
  }
  SECTION("the cache is turned off") {
    ::setenv("HEADSCOPE_PACK_CACHE", "off", 1);
    CHECK_FALSE(hs::Model::load(model)->weights()->packed_from_cache());
    ::setenv("HEADSCOPE_PACK_CACHE", "", 1);
    CHECK_FALSE(hs::Model::load(model)->weights()->packed_from_cache());
  }
  SECTION("a model smaller than the minimum is not written") {
    fs::remove(entry);
    ::setenv("HEADSCOPE_PACK_CACHE_MIN_MB", "64", 1);
    CHECK_FALSE(hs::Model::load(model)->weights()->packed_from_cache());
    hs::PackCache::wait_for_writes();
    CHECK(env.entries().empty());
  }
  fs::remove_all(model);
}

TEST_CASE("the cache directory is kept under its size limit, least recently opened first out", "[pack_cache]") {
  CacheEnvironment env("evict");
  const fs::path root = env.dir.parent_path() / ("models_ev_" + std::to_string(::getpid()));
  const fs::path a = copy_model("bf16_prefixed", root / "a"), b = copy_model("f16_plain", root / "b");
  hs::Model::load(a);
  hs::PackCache::wait_for_writes();
  REQUIRE(env.entries().size() == 1);
  const fs::path entry_a = env.entries().front();
  // A limit below two entries: writing b's evicts a's (b's own is always kept).
  ::setenv("HEADSCOPE_PACK_CACHE_MAX_MB", "0", 1);
  hs::Model::load(b);
  hs::PackCache::wait_for_writes();
  ::unsetenv("HEADSCOPE_PACK_CACHE_MAX_MB");
  const auto left = env.entries();
  REQUIRE(left.size() == 1);
  CHECK(left.front() != entry_a);
  CHECK(hs::Model::load(b)->weights()->packed_from_cache());
  CHECK_FALSE(hs::Model::load(a)->weights()->packed_from_cache());
  fs::remove_all(root);
}
