#include "core/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/tensor.h"

namespace hs {
namespace {

// Tensors a GPT-2 file may carry that are not weights: the causal-mask buffers older
// transformers versions saved with every attention layer.
bool is_mask_buffer(const std::string& name) {
  auto ends_with = [&](const char* s) {
    const std::string suffix(s);
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}

class Binder {
 public:
  Binder(const SafetensorsFile& file, std::vector<std::vector<float>>& owned) : file_(file), owned_(owned) {}

  // The tensor `name` (with or without the "transformer." prefix) as float32 of the given shape.
  const float* bind(const std::string& name, std::vector<int64_t> shape, bool prefixable = true) {
    const TensorInfo* plain = file_.find(name);
    const TensorInfo* prefixed = prefixable ? file_.find("transformer." + name) : nullptr;
    if (plain && prefixed)
      throw Error(file_.name() + ": holds both \"" + name + "\" and \"transformer." + name +
                  "\"; keep one naming scheme.");
    const TensorInfo* t = plain ? plain : prefixed;
    if (!t)
      throw Error(file_.name() + ": missing tensor \"" + name + "\" (expected shape " + shape_string(shape) +
                  "). The file is incomplete or is not a GPT-2 checkpoint that matches config.json.");
    used_.insert(t->name);
    if (t->shape != shape)
      throw Error(file_.name() + ": tensor \"" + t->name + "\" has shape " + shape_string(t->shape) +
                  " but config.json implies " + shape_string(shape) +
                  ". The config and the weights belong to different models.");
    if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16 && t->dtype != DType::F64)
      throw Error(file_.name() + ": tensor \"" + t->name + "\" has dtype " + t->dtype_text +
                  "; weights must be F32, F16 or BF16 (quantized or integer checkpoints are not supported).");
    if (const float* p = file_.f32_in_place(*t)) return p;
    owned_.push_back(file_.to_f32(*t));
    return owned_.back().data();
  }

  bool present(const std::string& name) const { return file_.find(name) || file_.find("transformer." + name); }

  void reject_unused() const {
    for (const auto& t : file_.tensors()) {
      if (used_.count(t.name) || is_mask_buffer(t.name)) continue;
      throw Error(file_.name() + ": unexpected tensor \"" + t.name + "\" " + shape_string(t.shape) +
                  ". GPT-2 checkpoints hold only wte, wpe, h.{layer}.*, ln_f and lm_head; check that config.json "
                  "(n_layer and sizes) matches the weights.");
    }
  }

 private:
  const SafetensorsFile& file_;
  std::vector<std::vector<float>>& owned_;
  std::set<std::string> used_;
};

}  // namespace

std::shared_ptr<const Weights> Weights::load(std::shared_ptr<const SafetensorsFile> file, const ModelConfig& c) {
  std::shared_ptr<Weights> w(new Weights());
  w->config_ = c;
  w->file_ = file;
  Binder b(*file, w->owned_);
  const int64_t D = c.d_model, M = c.d_mlp, V = c.d_vocab, C = c.n_ctx;
  w->wte_ = b.bind("wte.weight", {V, D});
  w->wpe_ = b.bind("wpe.weight", {C, D});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerWeights L{};
    L.ln1_w = b.bind(p + "ln_1.weight", {D});
    L.ln1_b = b.bind(p + "ln_1.bias", {D});
    L.attn_w = b.bind(p + "attn.c_attn.weight", {D, 3 * D});
    L.attn_b = b.bind(p + "attn.c_attn.bias", {3 * D});
    L.proj_w = b.bind(p + "attn.c_proj.weight", {D, D});
    L.proj_b = b.bind(p + "attn.c_proj.bias", {D});
    L.ln2_w = b.bind(p + "ln_2.weight", {D});
    L.ln2_b = b.bind(p + "ln_2.bias", {D});
    L.fc_w = b.bind(p + "mlp.c_fc.weight", {D, M});
    L.fc_b = b.bind(p + "mlp.c_fc.bias", {M});
    L.mlp_proj_w = b.bind(p + "mlp.c_proj.weight", {M, D});
    L.mlp_proj_b = b.bind(p + "mlp.c_proj.bias", {D});
    w->layers_.push_back(L);
  }
  w->ln_f_w_ = b.bind("ln_f.weight", {D});
  w->ln_f_b_ = b.bind("ln_f.bias", {D});
  if (file->find("lm_head.weight")) {
    w->unembed_ = b.bind("lm_head.weight", {V, D}, /*prefixable=*/false);
    w->tied_ = false;
  } else {
    w->unembed_ = w->wte_;
  }
  b.reject_unused();

  // Non-finite weights make every view meaningless; say so up front rather than crash or mislead.
  // A float is NaN or infinite when its exponent bits are all ones; testing the bits lets the
  // compiler vectorize the scan (std::isfinite did not). Small tensors are scanned on the calling
  // thread: GPT-2 small has ~150 of them, and an OpenMP team started for each cost more than
  // the scan itself whenever the other core was busy (the session-1 profile of model open).
  auto count_bad = [](const float* p, int64_t n) {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n >= (int64_t{1} << 22))
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof bits);
      bad += (bits & 0x7f800000u) == 0x7f800000u;
    }
    return bad;
  };
  auto check = [&](const char* what, const float* p, int64_t n) {
    if (int64_t bad = count_bad(p, n))
      w->warnings_.push_back(file->name() + ": " + std::to_string(bad) + " non-finite value(s) (NaN or infinity) in " +
                             what + "; activations computed from them are not meaningful.");
  };
  check("wte.weight", w->wte_, V * D);
  check("wpe.weight", w->wpe_, C * D);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w->layers_[static_cast<size_t>(l)];
    const std::string p = "h." + std::to_string(l) + ".";
    const std::pair<const char*, std::pair<const float*, int64_t>> parts[] = {
        {"ln_1", {L.ln1_w, D}},          {"ln_1", {L.ln1_b, D}},        {"attn.c_attn", {L.attn_w, D * 3 * D}},
        {"attn.c_attn", {L.attn_b, 3 * D}}, {"attn.c_proj", {L.proj_w, D * D}}, {"attn.c_proj", {L.proj_b, D}},
        {"ln_2", {L.ln2_w, D}},          {"ln_2", {L.ln2_b, D}},        {"mlp.c_fc", {L.fc_w, D * M}},
        {"mlp.c_fc", {L.fc_b, M}},       {"mlp.c_proj", {L.mlp_proj_w, M * D}}, {"mlp.c_proj", {L.mlp_proj_b, D}},
    };
    for (const auto& [name, span] : parts) check((p + name).c_str(), span.first, span.second);
  }
  check("ln_f", w->ln_f_w_, D);
  check("ln_f", w->ln_f_b_, D);
  if (!w->tied_) check("lm_head.weight", w->unembed_, V * D);

  // The forward pass reads the products' weights from packed copies (packed_gemm.h: twice the
  // speed of reading them in place at 20 tokens). Once a tensor is packed its mapped pages are
  // released: keeping both would hold every weight twice (GPT-2 small at 1024 tokens: 1.4 GB of
  // resident memory would become 1.9 GB). The few in-place reads that remain (embedding rows,
  // one head's W_O for a view) map their pages again on demand.
  auto pack = [&](const float* W, int64_t K, int64_t N) {
    PackedMatrix m = PackedMatrix::from_rows(W, K, N, N);
    file->release_resident(W, static_cast<size_t>(K * N) * sizeof(float));
    return m;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w->layers_[static_cast<size_t>(l)];
    w->packed_.push_back(PackedLayer{pack(L.attn_w, D, 3 * D), pack(L.proj_w, D, D), pack(L.fc_w, D, M),
                                     pack(L.mlp_proj_w, M, D)});
  }
  w->packed_unembed_ = PackedMatrix::from_transposed_rows(w->unembed_, V, D, D);
  file->release_resident(w->unembed_, static_cast<size_t>(V * D) * sizeof(float));
  return w;
}

void Weights::embedding_row(int32_t t, float* out) const {
  // Reading the released rows in place would map them again, and the kernel maps a whole
  // page-cache folio per fault: 1024 tokens of GPT-2 small brought back 160 MB of wte's 154 MB
  // (resident memory 1545 MiB at 1024 tokens, against 1.4 GB with this). The packed copy gives
  // the same floats.
  if (tied_) return packed_unembed_.column(t, out);
  const int64_t D = config_.d_model;
  std::copy_n(wte_ + t * D, D, out);
}

ConstStridedMatrixRef Weights::W_Q(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstStridedMatrixRef(layer(l).attn_w + h * dh, D, dh, Eigen::OuterStride<>(3 * D));
}
ConstStridedMatrixRef Weights::W_K(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstStridedMatrixRef(layer(l).attn_w + D + h * dh, D, dh, Eigen::OuterStride<>(3 * D));
}
ConstStridedMatrixRef Weights::W_V(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstStridedMatrixRef(layer(l).attn_w + 2 * D + h * dh, D, dh, Eigen::OuterStride<>(3 * D));
}
ConstMatrixRef Weights::W_O(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstMatrixRef(layer(l).proj_w + static_cast<int64_t>(h) * dh * D, dh, D);
}
ConstMatrixRef Weights::W_O_all(int l) const {
  const int D = config_.d_model;
  return ConstMatrixRef(layer(l).proj_w, D, D);
}
ConstVectorRef Weights::b_O(int l) const { return ConstVectorRef(layer(l).proj_b, config_.d_model); }

size_t Weights::packed_bytes() const {
  size_t n = packed_unembed_.bytes();
  for (const PackedLayer& p : packed_) n += p.attn.bytes() + p.proj.bytes() + p.fc.bytes() + p.mlp_proj.bytes();
  return n;
}

size_t Weights::owned_bytes() const {
  size_t n = 0;
  for (const auto& v : owned_) n += v.size() * sizeof(float);
  return n;
}

}  // namespace hs
