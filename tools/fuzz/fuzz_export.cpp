// Fuzz target: the JSON and NPZ writers' round trip. The input chooses the run (flags in the first
// byte, then token ids from byte pairs) on a small fixture model; the cache is written to JSON and
// to NPZ, read back (nlohmann for JSON, core/io/npz_reader for NPZ), and every value compared:
// JSON exactly as numbers (non-finite values as null), NPZ bit for bit, keys in the same order.
// The same input also drives an incremental run (Model::run with a previous cache) against the
// full one.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/io/export.h"
#include "core/io/npz_reader.h"
#include "core/model/model.h"
#include "fuzz_common.h"

namespace {

const hs::Model& model() {
  static const std::shared_ptr<const hs::Model> m = hs::Model::load(hs::fuzz::fixture_model("f32_prefixed"));
  return *m;
}

#define FUZZ_CHECK(cond)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "check failed: %s (line %d)\n", #cond, __LINE__); \
      __builtin_trap();                                                      \
    }                                                                        \
  } while (0)

// Compares the nested JSON arrays `j` with `t` from dimension `dim` on; `offset` walks t.data.
void compare_nested(const nlohmann::json& j, const hs::Tensor& t, size_t dim, size_t& offset) {
  if (dim == t.shape.size()) {
    const float want = t.data[offset++];
    if (!std::isfinite(want)) {
      FUZZ_CHECK(j.is_null());
    } else {
      FUZZ_CHECK(j.is_number());
      // to_chars writes the shortest text that reads back to the same float.
      FUZZ_CHECK(static_cast<float>(j.get<double>()) == want);
    }
    return;
  }
  FUZZ_CHECK(j.is_array());
  FUZZ_CHECK(static_cast<int64_t>(j.size()) == t.shape[dim]);
  for (const auto& item : j) compare_nested(item, t, dim + 1, offset);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const hs::Model& m = model();
  const hs::ModelConfig& c = m.config();
  hs::RunOptions options;
  options.store_scores = (data[0] & 1) != 0;
  options.store_results = (data[0] & 2) != 0;
  std::vector<int32_t> tokens;
  for (size_t i = 1; i + 1 < size && static_cast<int>(tokens.size()) < c.n_ctx; i += 2)
    tokens.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % c.d_vocab));
  const auto cache = m.run(tokens, options);
  const std::vector<std::string> keys = cache->keys();
  std::vector<hs::Tensor> values;  // every key once (derived keys are computed on request)
  for (const std::string& key : keys) values.push_back(cache->get(key));

  // The incremental path (a previous run's common prefix reused) must give the full run's values
  // up to float rounding, whatever the previous prompt was: longer, shorter, edited anywhere.
  std::vector<int32_t> earlier;
  const size_t earlier_len = 1 + (data[0] >> 3) % static_cast<size_t>(c.n_ctx);
  for (size_t i = 0; i < earlier_len; ++i)
    earlier.push_back(i < tokens.size() ? tokens[i] : static_cast<int32_t>((i * 7) % static_cast<size_t>(c.d_vocab)));
  if (data[0] & 4) earlier[data[size - 1] % earlier_len] = static_cast<int32_t>(data[size - 1] % c.d_vocab);
  const auto incremental = m.run(tokens, options, m.run(earlier, options));
  for (size_t k = 0; k < keys.size(); ++k) {
    const hs::Tensor& a = values[k];
    const hs::Tensor b = incremental->get(keys[k]);
    FUZZ_CHECK(a.shape == b.shape);
    float max_abs = 0.0f, max_ref = 0.0f;
    for (size_t i = 0; i < a.data.size(); ++i) {
      if (!std::isfinite(a.data[i]) || !std::isfinite(b.data[i])) {
        FUZZ_CHECK(a.data[i] == b.data[i]);  // the same masked -inf
        continue;
      }
      max_abs = std::max(max_abs, std::abs(a.data[i] - b.data[i]));
      max_ref = std::max(max_ref, std::abs(a.data[i]));
    }
    FUZZ_CHECK(max_abs <= 1e-4f * std::max(max_ref, 1.0f));
  }

  // JSON
  const std::string text = hs::cache_to_json(*cache);
  const nlohmann::json j = nlohmann::json::parse(text);
  FUZZ_CHECK(j.is_object());
  FUZZ_CHECK(j.size() == keys.size() + 1);
  FUZZ_CHECK(j["tokens"] == nlohmann::json(tokens));
  for (size_t k = 0; k < keys.size(); ++k) {
    const hs::Tensor& t = values[k];
    FUZZ_CHECK(j.contains(keys[k]));
    size_t offset = 0;
    compare_nested(j[keys[k]], t, 0, offset);
    FUZZ_CHECK(offset == t.data.size());
  }

  // NPZ
  const std::string npz = hs::cache_to_npz(*cache);
  const std::vector<hs::NpzArray> arrays =
      hs::read_npz(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(npz.data()), npz.size()), "fuzz.npz");
  FUZZ_CHECK(arrays.size() == keys.size() + 1);
  FUZZ_CHECK(arrays[0].name == "tokens");
  FUZZ_CHECK(arrays[0].tensor.shape == std::vector<int64_t>{static_cast<int64_t>(tokens.size())});
  for (size_t i = 0; i < tokens.size(); ++i) FUZZ_CHECK(arrays[0].tensor.data[i] == static_cast<float>(tokens[i]));
  for (size_t k = 0; k < keys.size(); ++k) {
    const hs::Tensor& t = values[k];
    const hs::NpzArray& a = arrays[k + 1];
    FUZZ_CHECK(a.name == keys[k]);
    FUZZ_CHECK(a.tensor.shape == t.shape);
    FUZZ_CHECK(a.tensor.data.size() == t.data.size());
    FUZZ_CHECK(std::memcmp(a.tensor.data.data(), t.data.data(), t.data.size() * sizeof(float)) == 0);
  }
  return 0;
}
