// Fuzz target: the safetensors header validation and the weight loader.
//
// Any byte string is a candidate file. It must either be refused with hs::Error or yield tensors
// whose every byte can be read (to_f32 touches all of them, so ASan sees any offset that escaped
// the checks), and Weights::load against a fixed tiny config must either refuse it or bind every
// weight. Anything else (a crash, a sanitizer report, another exception type) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "core/model/weights.h"
#include "core/tensor/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const hs::SafetensorsFile> file;
  try {
    file = hs::SafetensorsFile::from_bytes(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  } catch (const hs::Error&) {
    return 0;
  }
  // Every tensor that passed the header checks lies inside the data: read all of it.
  float sink = 0.0f;
  for (const hs::TensorInfo& t : file->tensors()) {
    const auto raw = file->raw_bytes(t);
    for (uint8_t b : raw) sink += static_cast<float>(b);
    try {
      const std::vector<float> v = file->to_f32(t);
      if (static_cast<int64_t>(v.size()) != t.numel()) __builtin_trap();
      for (float x : v) sink += x;
    } catch (const hs::Error&) {
      // integer and other non-float dtypes are refused by to_f32
    }
  }
  try {
    const auto w = hs::Weights::load(file, hs::fuzz::tiny_config());
    const hs::ModelConfig& c = w->config();
    // Touch every bound weight through the typed accessors the forward pass uses.
    for (int64_t i = 0; i < int64_t{c.d_vocab} * c.d_model; ++i) sink += w->W_E()[i] + w->unembed_rows()[i];
    for (int64_t i = 0; i < int64_t{c.n_ctx} * c.d_model; ++i) sink += w->W_pos()[i];
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h) sink += w->W_Q(l, h).sum() + w->W_K(l, c.kv_head(h)).sum() + w->W_V(l, c.kv_head(h)).sum() + w->W_O(l, h).sum();
  } catch (const hs::Error&) {
  }
  volatile float keep = sink;
  (void)keep;
  return 0;
}
