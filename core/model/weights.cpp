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
  auto matrix = [](const float* rows) {
    auto m = std::make_unique<Matrix>();
    m->rows = rows;
    return m;
  };
  w->wte_ = matrix(b.bind("wte.weight", {V, D}));
  w->wpe_ = b.bind("wpe.weight", {C, D});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerWeights L{};
    L.ln1_w = b.bind(p + "ln_1.weight", {D});
    L.ln1_b = b.bind(p + "ln_1.bias", {D});
    w->matrices_.push_back(matrix(b.bind(p + "attn.c_attn.weight", {D, 3 * D})));
    L.attn_b = b.bind(p + "attn.c_attn.bias", {3 * D});
    w->matrices_.push_back(matrix(b.bind(p + "attn.c_proj.weight", {D, D})));
    L.proj_b = b.bind(p + "attn.c_proj.bias", {D});
    L.ln2_w = b.bind(p + "ln_2.weight", {D});
    L.ln2_b = b.bind(p + "ln_2.bias", {D});
    w->matrices_.push_back(matrix(b.bind(p + "mlp.c_fc.weight", {D, M})));
    L.fc_b = b.bind(p + "mlp.c_fc.bias", {M});
    w->matrices_.push_back(matrix(b.bind(p + "mlp.c_proj.weight", {M, D})));
    L.mlp_proj_b = b.bind(p + "mlp.c_proj.bias", {D});
    w->layers_.push_back(L);
  }
  w->ln_f_w_ = b.bind("ln_f.weight", {D});
  w->ln_f_b_ = b.bind("ln_f.bias", {D});
  if (file->find("lm_head.weight")) {
    w->lm_head_ = matrix(b.bind("lm_head.weight", {V, D}, /*prefixable=*/false));
    w->tied_ = false;
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
  check("wte.weight", w->wte_->rows, V * D);
  check("wpe.weight", w->wpe_, C * D);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w->layers_[static_cast<size_t>(l)];
    const std::string p = "h." + std::to_string(l) + ".";
    const std::pair<const char*, std::pair<const float*, int64_t>> parts[] = {
        {"ln_1", {L.ln1_w, D}},
        {"ln_1", {L.ln1_b, D}},
        {"attn.c_attn", {w->layer_matrix(l, 0).rows, D * 3 * D}},
        {"attn.c_attn", {L.attn_b, 3 * D}},
        {"attn.c_proj", {w->layer_matrix(l, 1).rows, D * D}},
        {"attn.c_proj", {L.proj_b, D}},
        {"ln_2", {L.ln2_w, D}},
        {"ln_2", {L.ln2_b, D}},
        {"mlp.c_fc", {w->layer_matrix(l, 2).rows, D * M}},
        {"mlp.c_fc", {L.fc_b, M}},
        {"mlp.c_proj", {w->layer_matrix(l, 3).rows, M * D}},
        {"mlp.c_proj", {L.mlp_proj_b, D}},
    };
    for (const auto& [name, span] : parts) check((p + name).c_str(), span.first, span.second);
  }
  check("ln_f", w->ln_f_w_, D);
  check("ln_f", w->ln_f_b_, D);
  if (!w->tied_) check("lm_head.weight", w->lm_head_->rows, V * D);

  // The forward pass reads the products' weights from packed copies (packed_gemm.h: twice the
  // speed of reading them in place at 20 tokens). Once a tensor is packed, its other copy goes:
  // keeping both would hold every weight twice (GPT-2 small at 1024 tokens: 1.4 GB of resident
  // memory would become 1.9 GB; an F16 GPT-2 medium would hold 2.8 GB instead of 1.4).
  // - In place in the mapped file (F32): its pages are released, and the few reads in place that
  //   remain (embedding rows, a head's W_O for a view) map them again on demand.
  // - A float32 conversion (F16/BF16): it is freed, and rebuilt from the packed copy (the same
  //   floats) only if something reads the matrix in place.
  w->packed_.reserve(static_cast<size_t>(c.n_layers));  // Matrix::packed points into it
  auto release = [&](Matrix& m, const PackedMatrix& packed, bool transposed, int64_t elements) {
    m.packed = &packed;
    m.transposed = transposed;
    for (std::vector<float>& v : w->owned_)
      if (v.data() == m.rows) {
        std::vector<float>().swap(v);
        m.rows = nullptr;
        return;
      }
    file->release_resident(m.rows, static_cast<size_t>(elements) * sizeof(float));
  };
  const int64_t sizes[4][2] = {{D, 3 * D}, {D, D}, {D, M}, {M, D}};
  for (int l = 0; l < c.n_layers; ++l) {
    PackedLayer& P = w->packed_.emplace_back();
    PackedMatrix* targets[4] = {&P.attn, &P.proj, &P.fc, &P.mlp_proj};
    for (int which = 0; which < 4; ++which) {
      Matrix& m = *w->matrices_[static_cast<size_t>(4 * l + which)];
      const int64_t K = sizes[which][0], N = sizes[which][1];
      *targets[which] = PackedMatrix::from_rows(m.rows, K, N, N);
      release(m, *targets[which], false, K * N);
    }
  }
  Matrix& unembed = w->tied_ ? *w->wte_ : *w->lm_head_;
  w->packed_unembed_ = PackedMatrix::from_transposed_rows(unembed.rows, V, D, D);
  release(unembed, w->packed_unembed_, true, V * D);
  return w;
}

const float* Weights::rows_of(const Matrix& m) const {
  if (m.rows) return m.rows;
  std::call_once(m.once, [&] {
    const PackedMatrix& p = *m.packed;
    if (m.transposed) {  // [N, K] rows: row j is column j of the packed matrix
      m.rebuilt.resize(static_cast<size_t>(p.cols() * p.rows()));
      for (int64_t j = 0; j < p.cols(); ++j) p.column(j, m.rebuilt.data() + j * p.rows());
    } else {
      m.rebuilt.resize(static_cast<size_t>(p.rows() * p.cols()));
      p.unpack_rows(m.rebuilt.data());
    }
    m.built.store(true, std::memory_order_release);
  });
  return m.rebuilt.data();
}

const float* Weights::attn_w(int l) const { return rows_of(layer_matrix(l, 0)); }
const float* Weights::proj_w(int l) const { return rows_of(layer_matrix(l, 1)); }
const float* Weights::fc_w(int l) const { return rows_of(layer_matrix(l, 2)); }
const float* Weights::mlp_proj_w(int l) const { return rows_of(layer_matrix(l, 3)); }
const float* Weights::wte() const { return rows_of(*wte_); }
const float* Weights::unembed_rows() const { return rows_of(unembed()); }

void Weights::unembed_row(int32_t t, float* out) const {
  // From the packed copy, always: the same floats, without mapping released pages again or
  // rebuilding a freed conversion.
  packed_unembed_.column(t, out);
}

void Weights::embedding_row(int32_t t, float* out) const {
  // Reading the released rows in place would map them again, and the kernel maps a whole
  // page-cache folio per fault: 1024 tokens of GPT-2 small brought back 160 MB of wte's 154 MB
  // (resident memory 1545 MiB at 1024 tokens, against 1.4 GB with this). The packed copy gives
  // the same floats.
  if (tied_) return unembed_row(t, out);
  const int64_t D = config_.d_model;
  std::copy_n(wte_->rows + t * D, D, out);  // an untied wte is not packed: never released
}

ConstStridedMatrixRef Weights::W_Q(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstStridedMatrixRef(attn_w(l) + h * dh, D, dh, Eigen::OuterStride<>(3 * D));
}
ConstStridedMatrixRef Weights::W_K(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstStridedMatrixRef(attn_w(l) + D + h * dh, D, dh, Eigen::OuterStride<>(3 * D));
}
ConstStridedMatrixRef Weights::W_V(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstStridedMatrixRef(attn_w(l) + 2 * D + h * dh, D, dh, Eigen::OuterStride<>(3 * D));
}
ConstMatrixRef Weights::W_O(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstMatrixRef(proj_w(l) + static_cast<int64_t>(h) * dh * D, dh, D);
}
ConstMatrixRef Weights::W_O_all(int l) const {
  const int D = config_.d_model;
  return ConstMatrixRef(proj_w(l), D, D);
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
  auto rebuilt = [&](const Matrix& m) {
    if (m.built.load(std::memory_order_acquire)) n += m.rebuilt.size() * sizeof(float);
  };
  for (const auto& m : matrices_) rebuilt(*m);
  rebuilt(*wte_);
  if (lm_head_) rebuilt(*lm_head_);
  return n;
}

}  // namespace hs
