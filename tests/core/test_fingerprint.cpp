// A model's fingerprint (core/model/fingerprint.h): the same for a copy of the same files, another
// for other weights of the same name and shape; and a scan made with one model cannot be resumed or
// merged as another's.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/analysis/scan.h"
#include "core/error.h"
#include "core/model/fingerprint.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

// The built-in model copied to `dir`, with one weight byte changed `flip_at` bytes before the end of
// model.safetensors when flip_at > 0.
fs::path copy_builtin(const fs::path& dir, long flip_at = 0) {
  hs::test::copy_model_folder(hs::builtin_model_dir(), dir, static_cast<std::uintmax_t>(flip_at));
  return dir;
}

}  // namespace

TEST_CASE("fingerprint: a copy of the same files is the same model, and one changed weight is another", "[fingerprint]") {
  const auto original = hs::Model::load(hs::builtin_model_dir());
  CHECK(original->fingerprint().size() == 16);
  const auto copy = hs::Model::load(copy_builtin(hs::test::scratch_dir() / "fp_copy" / "headscope-tiny"));
  CHECK(copy->fingerprint() == original->fingerprint());
  // A byte in the last 4 KiB, and one in the first MiB after the header: both are read.
  for (long flip_at : {3L, static_cast<long>(fs::file_size(hs::builtin_model_dir() / "model.safetensors")) - 600000}) {
    const auto other = hs::Model::load(copy_builtin(hs::test::scratch_dir() / "fp_other" / "headscope-tiny", flip_at));
    CHECK(other->name() == original->name());
    CHECK(other->config().parameter_count() == original->config().parameter_count());
    CHECK(other->fingerprint() != original->fingerprint());
  }
  // The tokenizer is part of the model: a result made from text depends on it.
  const fs::path tok = copy_builtin(hs::test::scratch_dir() / "fp_tok" / "headscope-tiny");
  { std::ofstream(tok / "merges.txt", std::ios::app) << "\n"; }
  CHECK(hs::files_fingerprint({tok / "merges.txt"}) != hs::files_fingerprint({hs::builtin_model_dir() / "merges.txt"}));
  CHECK_THROWS_AS(hs::files_fingerprint({tok / "no-such-file"}), hs::Error);
}

TEST_CASE("fingerprint: shards of scans of two models of one shape do not merge", "[fingerprint][scan]") {
  const auto a = hs::Model::load(hs::builtin_model_dir());
  const auto b = hs::Model::load(copy_builtin(hs::test::scratch_dir() / "fp_merge" / "headscope-tiny", 3));
  hs::ScanOptions o;
  o.repeat_random = 4;
  o.limit = 4;
  o.max_tokens = 16;
  std::vector<hs::ScanState> shards;
  for (int i = 0; i < 2; ++i) {
    hs::ScanOptions shard = o;
    shard.shard_index = i;
    shard.shard_count = 2;
    const hs::Model& m = i == 0 ? *a : *b;
    shards.push_back(hs::new_scan_state(m, shard, hs::scan_settings(m, shard)));
    hs::run_scan(m, shard, shards.back());
  }
  CHECK(shards[0].settings["model"]["name"] == shards[1].settings["model"]["name"]);
  try {
    hs::merge_scans(shards, {"a.json", "b.json"});
    FAIL("merged the scans of two models");
  } catch (const hs::Error& e) {
    CHECK(std::string(e.what()).find("model.fingerprint") != std::string::npos);
  }
}
