// Fuzz target: what `headscope-cli run --edit/--steer` reads from outside: the --edit spec
// (hs::parse_edits) and the steering vector's .npy file (hs::read_npy). The first byte chooses.
// Either is refused with hs::Error, or gives a value whose invariants hold: an .npy tensor holds
// exactly the product of its shape, and edits that check_interventions accepts run through the
// forward pass of a small fixture model, which keeps every key's shape.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/io/npz_reader.h"
#include "core/model/intervention.h"
#include "core/model/model.h"
#include "fuzz_common.h"

namespace {

const hs::Model& model() {
  static const std::shared_ptr<const hs::Model> m = hs::Model::load(hs::fuzz::fixture_model("f32_prefixed"));
  return *m;
}

void npy(std::span<const uint8_t> bytes) {
  try {
    const hs::Tensor t = hs::read_npy(bytes, "fuzz.npy");
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) __builtin_trap();
      n *= d;
    }
    if (static_cast<size_t>(n) != t.data.size()) __builtin_trap();
  } catch (const hs::Error&) {
  }
}

void edits(std::string_view spec) {
  hs::Interventions parsed;
  try {
    parsed = hs::parse_edits(spec);
  } catch (const hs::Error&) {
    return;
  }
  const std::vector<int32_t> tokens = {290, 51, 257, 51, 257, 7};
  hs::RunOptions o;
  o.interventions = parsed;
  o.threads = 1;
  try {
    hs::check_interventions(parsed, *model().weights(), static_cast<int>(tokens.size()));
  } catch (const hs::Error&) {
    return;
  }
  const auto cache = model().run(tokens, o);
  if (cache->n_pos() != static_cast<int>(tokens.size())) __builtin_trap();
  if (cache->get("logits").data.size() != tokens.size() * static_cast<size_t>(model().config().d_vocab)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  if (data[0] & 1)
    edits(std::string_view(reinterpret_cast<const char*>(rest.data()), rest.size()));
  else
    npy(rest);
  return 0;
}
