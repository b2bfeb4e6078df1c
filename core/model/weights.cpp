#include "core/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <array>
#include <bit>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/model/pack_cache.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/tensor.h"

namespace hs {
namespace {

// Finds and checks the tensors a description names, in one file or in the shards of one, and
// converts those that are not read in place.
class Binder {
 public:
  Binder(const std::vector<std::shared_ptr<const SafetensorsFile>>& files, std::string set_name,
         const ArchitectureFamily& family, std::vector<FloatBuffer>& owned)
      : files_(files), set_name_(std::move(set_name)), family_(family), owned_(owned) {}

  // The file's tensor of `spec` (with or without the family's base prefix when prefixable), and
  // the shard that holds it.
  std::pair<const TensorInfo*, const SafetensorsFile*> find(const TensorSpec& spec) const {
    const std::string prefixed_name = std::string(family_.base_prefix()) + spec.name;
    std::pair<const TensorInfo*, const SafetensorsFile*> found{nullptr, nullptr};
    for (const auto& f : files_) {
      const TensorInfo* plain = f->find(spec.name);
      const TensorInfo* prefixed = spec.prefixable ? f->find(prefixed_name) : nullptr;
      if (plain && prefixed)
        throw Error(f->name() + ": holds both \"" + spec.name + "\" and \"" + prefixed_name +
                    "\"; keep one naming scheme.");
      const TensorInfo* t = plain ? plain : prefixed;
      if (!t) continue;
      if (found.first)
        throw Error(set_name_ + ": tensor \"" + t->name + "\" is in two shards, " + found.second->name() + " and " +
                    f->name() + "; keep one copy.");
      found = {t, f.get()};
    }
    return found;
  }

  // The tensor of `spec`, checked against it, and the shard that holds it.
  std::pair<const TensorInfo*, const SafetensorsFile*> bind_source(const TensorSpec& spec) {
    const auto [t, file] = find(spec);
    if (!t)
      throw Error(set_name_ + ": missing tensor \"" + spec.name + "\" (expected shape " + shape_string(spec.shape) +
                  "). The file is incomplete or is not a " + std::string(family_.name()) +
                  " checkpoint that matches config.json.");
    used_.insert({file, t->name});
    if (t->shape != spec.shape)
      throw Error(file->name() + ": tensor \"" + t->name + "\" has shape " + shape_string(t->shape) +
                  " but config.json implies " + shape_string(spec.shape) +
                  ". The config and the weights belong to different models.");
    if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16 && t->dtype != DType::F64)
      throw Error(file->name() + ": tensor \"" + t->name + "\" has dtype " + t->dtype_text +
                  "; weights must be F32, F16 or BF16 (quantized or integer checkpoints are not supported).");
    return {t, file};
  }

  // A bound tensor as float32: in place when it is aligned F32, else converted into owned memory.
  const float* as_f32(const TensorInfo& t, const SafetensorsFile& file) {
    if (const float* p = file.f32_in_place(t)) {
      mapped_[p] = &file;
      return p;
    }
    FloatBuffer& converted = owned_.emplace_back(static_cast<size_t>(t.numel()));
    file.to_f32(t, converted.data());
    return converted.data();
  }

  // Drops the float32 copy at `p` (n floats) that a packed copy replaces: a conversion is freed,
  // the pages of a tensor read in place are released (mapped again if read).
  void drop(const float* p, int64_t n) {
    for (FloatBuffer& v : owned_)
      if (!v.empty() && v.data() == p) {
        FloatBuffer().swap(v);
        return;
      }
    if (const auto it = mapped_.find(p); it != mapped_.end())
      it->second->release_resident(p, static_cast<size_t>(n) * sizeof(float));
  }

  bool owned(const float* p) const {
    for (const FloatBuffer& v : owned_)
      if (!v.empty() && v.data() == p) return true;
    return false;
  }

  void reject_unused() const {
    for (const auto& f : files_)
      for (const auto& t : f->tensors()) {
        if (used_.count({f.get(), t.name}) || family_.is_ignorable(t.name)) continue;
        throw Error(f->name() + ": unexpected tensor \"" + t.name + "\" " + shape_string(t.shape) + ". " +
                    std::string(family_.unexpected_tensor_hint()));
      }
  }

 private:
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files_;
  std::string set_name_;
  const ArchitectureFamily& family_;
  std::vector<FloatBuffer>& owned_;
  std::set<std::pair<const SafetensorsFile*, std::string>> used_;
  std::map<const float*, const SafetensorsFile*> mapped_;
};

}  // namespace

std::shared_ptr<const Weights> Weights::load(std::shared_ptr<const SafetensorsFile> file, const ModelConfig& c) {
  const std::string name = file->name();
  return load(std::vector<std::shared_ptr<const SafetensorsFile>>{std::move(file)}, c, name);
}

std::shared_ptr<const Weights> Weights::load(std::vector<std::shared_ptr<const SafetensorsFile>> shards,
                                             const ModelConfig& c, const std::string& index_name) {
  require_implemented(c);
  const ArchitectureFamily& family = *c.architecture.family;
  const std::vector<TensorSpec> specs = tensor_specs(c);
  std::shared_ptr<Weights> w(new Weights());
  w->config_ = c;
  w->files_ = std::move(shards);
  Binder b(w->files_, index_name, family, w->owned_);
  auto matrix = [](const float* rows) {
    auto m = std::make_unique<Matrix>();
    m->rows = rows;
    return m;
  };
  w->layers_.resize(static_cast<size_t>(c.n_layers));
  w->matrices_.resize(static_cast<size_t>(kLayerMatrices * c.n_layers));
  w->tied_ = true;
  if (c.architecture.embedding_scaled) w->embedding_scale_ = static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
  // The matrices of the products (and the token embedding, which a tied unembedding packs) in a
  // 16-bit file are never converted to float32: they are packed from the mapping in their own
  // type (packed_gemm.h), half the memory of float32 panels, and opening writes each weight once.
  // Until packed, such a tensor is a Source with a 16-bit type and no float32 rows.
  struct Source {
    const float* f32 = nullptr;                // float32 rows (in place or converted)
    PanelType type = PanelType::F32;           // BF16 or F16: a 16-bit tensor left in the file
    const TensorInfo* info = nullptr;
    const SafetensorsFile* file = nullptr;
    bool is16() const { return type != PanelType::F32; }
    const unsigned char* raw() const { return file->raw_bytes(*info).data(); }
  };
  std::vector<Source> layer_sources(static_cast<size_t>(kLayerMatrices * c.n_layers));
  Source embed_source, unembed_source;
  // Separate Q, K, V (and their biases) as bound, per layer, until they are joined below.
  std::vector<std::array<Source, 3>> qkv_parts(static_cast<size_t>(c.n_layers));
  std::vector<std::array<const float*, 3>> qkv_bias_parts(static_cast<size_t>(c.n_layers));
  // Each bound tensor with its canonical name, for the scan of non-finite values below.
  struct Bound {
    const TensorSpec* spec;
    Source source;
  };
  std::vector<Bound> bound;
  bound.reserve(specs.size());
  for (const TensorSpec& spec : specs) {
    if (spec.optional && !b.find(spec).first) continue;  // an unembedding the file leaves tied
    const auto [t, file] = b.bind_source(spec);
    Source src{nullptr, PanelType::F32, t, file};
    const bool matrix_role = is_packed_matrix(spec.role) || spec.role == TensorRole::TokenEmbedding;
    if (matrix_role && t->dtype == DType::BF16) src.type = PanelType::BF16;
    else if (matrix_role && t->dtype == DType::F16) src.type = PanelType::F16;
    else src.f32 = b.as_f32(*t, *file);
    bound.push_back({&spec, src});
    const float* p = src.f32;
    // Gemma's norms multiply by (1 + w): the 1 is folded into an owned copy, in float32 as
    // Gemma2RMSNorm.forward's `output * (1.0 + self.weight.float())` computes it.
    if (c.architecture.norm_weight_plus_one && is_norm_weight(spec.role)) {
      const int64_t n = Tensor::count(spec.shape);
      FloatBuffer& folded = w->owned_.emplace_back(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) folded[static_cast<size_t>(i)] = 1.0f + p[i];
      p = folded.data();
    }
    const int l = spec.layer;
    LayerWeights* L = l >= 0 ? &w->layers_[static_cast<size_t>(l)] : nullptr;
    auto set_matrix = [&](LayerMatrix which) {
      w->matrices_[static_cast<size_t>(kLayerMatrices * l + which)] = matrix(p);
      layer_sources[static_cast<size_t>(kLayerMatrices * l + which)] = src;
    };
    switch (spec.role) {
      case TensorRole::TokenEmbedding:
        w->W_E_ = matrix(p);
        embed_source = src;
        break;
      case TensorRole::PositionEmbedding: w->W_pos_ = p; break;
      case TensorRole::Norm1Weight: L->norm1_w = p; break;
      case TensorRole::Norm1Bias: L->norm1_b = p; break;
      case TensorRole::QkvWeight: set_matrix(kQkv); break;
      case TensorRole::QkvBias: L->b_qkv = p; break;
      case TensorRole::QWeight: qkv_parts[static_cast<size_t>(l)][0] = src; break;
      case TensorRole::KWeight: qkv_parts[static_cast<size_t>(l)][1] = src; break;
      case TensorRole::VWeight: qkv_parts[static_cast<size_t>(l)][2] = src; break;
      case TensorRole::QBias: qkv_bias_parts[static_cast<size_t>(l)][0] = p; break;
      case TensorRole::KBias: qkv_bias_parts[static_cast<size_t>(l)][1] = p; break;
      case TensorRole::VBias: qkv_bias_parts[static_cast<size_t>(l)][2] = p; break;
      case TensorRole::AttnOutWeight: set_matrix(kAttnOut); break;
      case TensorRole::AttnOutBias: L->b_O = p; break;
      case TensorRole::Norm2Weight: L->norm2_w = p; break;
      case TensorRole::Norm2Bias: L->norm2_b = p; break;
      case TensorRole::MlpInWeight: set_matrix(kMlpIn); break;
      case TensorRole::MlpInBias: L->b_in = p; break;
      case TensorRole::MlpGateWeight: set_matrix(kMlpGate); break;
      case TensorRole::MlpGateBias: L->b_gate = p; break;
      case TensorRole::MlpOutWeight: set_matrix(kMlpOut); break;
      case TensorRole::MlpOutBias: L->b_out = p; break;
      case TensorRole::QNormWeight: L->q_norm_w = p; break;
      case TensorRole::KNormWeight: L->k_norm_w = p; break;
      case TensorRole::PostAttnNormWeight: L->post_attn_norm_w = p; break;
      case TensorRole::PostMlpNormWeight: L->post_mlp_norm_w = p; break;
      case TensorRole::FinalNormWeight: w->final_norm_w_ = p; break;
      case TensorRole::FinalNormBias: w->final_norm_b_ = p; break;
      case TensorRole::Unembedding:
        w->W_U_ = matrix(p);
        unembed_source = src;
        w->tied_ = false;
        break;
    }
  }
  b.reject_unused();
  if (!c.architecture.attn_out_bias) w->zeros_.assign(static_cast<size_t>(c.d_model), 0.0f);
  // An untied token embedding is read row by row, not packed: it is converted like the vectors.
  if (!w->tied_ && embed_source.is16()) w->W_E_->rows = b.as_f32(*embed_source.info, *embed_source.file);

  // Non-finite weights make every view meaningless; say so up front rather than crash or mislead.
  // A value is NaN or infinite when its exponent bits are all ones; testing the bits lets the
  // compiler vectorize the scan (std::isfinite did not). 16-bit tensors are scanned in the file,
  // with their own exponent field. Small tensors are scanned on the calling thread: an OpenMP team
  // started for each of a model's many vectors cost more than the scan itself whenever the other
  // core was busy.
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
  // A tensor packed from the file in 16 bits is checked as it is packed (or by the count its entry
  // in the pack cache kept), rather than by another pass over the file; only a packed copy with a
  // bad value has its tensors scanned in the file, for the count per tensor.
  auto warn_bad = [&](const Bound& t) {
    const Source& src = t.source;
    const int64_t n = Tensor::count(t.spec->shape);
    const int64_t bad = src.is16() ? count_non_finite16(src.raw(), n, src.type) : count_bad(src.f32, n);
    if (bad)
      w->warnings_.push_back(index_name + ": " + std::to_string(bad) + " non-finite value(s) (NaN or infinity) in " +
                             t.spec->name + "; activations computed from them are not meaningful.");
  };
  auto packed_from_file = [&](const Bound& t) { return t.source.is16() && t.source.f32 == nullptr; };
  for (const Bound& t : bound)
    if (!packed_from_file(t) || (!w->tied_ && t.spec->role == TensorRole::TokenEmbedding)) warn_bad(t);
  // The file scan of layer l's 16-bit tensors of a matrix (q, k and v for the QKV).
  auto warn_layer16 = [&](int l, TensorRole role) {
    const bool qkv = role == TensorRole::QkvWeight;
    for (const Bound& t : bound) {
      const TensorRole r = t.spec->role;
      if (t.spec->layer == l && packed_from_file(t) &&
          (r == role || (qkv && (r == TensorRole::QWeight || r == TensorRole::KWeight || r == TensorRole::VWeight))))
        warn_bad(t);
    }
  };

  const int64_t D = c.d_model, V = c.d_vocab;
  const int64_t q_width = int64_t{c.n_heads} * c.d_head, kv_width = int64_t{c.n_key_value_heads} * c.d_head;
  // Separate Q, K and V, or a fused matrix whose family orders its outputs its own way
  // (ArchitectureFamily::output_order), become one [d_model, Q | K | V] matrix (and one bias),
  // so the product stays one GEMM and the per-head views (W_Q, W_K, W_V) read one layout
  // whatever the file's.
  const QkvLayout qkv_layout = c.architecture.qkv;
  const ArchitectureFamily::OutputOrder fused_order =
      qkv_layout == QkvLayout::Separate ? nullptr : family.output_order(c, TensorRole::QkvWeight);
  const bool join_qkv = qkv_layout == QkvLayout::Separate || fused_order;
  // A joined QKV from 16-bit [out, in] parts of one type is packed from their rows (row j of the
  // joined matrix's transpose), per layer; empty when it was joined in float32.
  std::vector<std::function<const void*(int64_t)>> joined_rows16(static_cast<size_t>(c.n_layers));
  std::vector<PanelType> joined_type16(static_cast<size_t>(c.n_layers), PanelType::F32);
  if (join_qkv) {
    const int64_t N = q_width + 2 * kv_width;
    const bool out_in = family.layout(qkv_layout == QkvLayout::Separate ? TensorRole::QWeight : TensorRole::QkvWeight) ==
                        Layout::OutIn;
    // Output j of the joined matrix: which stored matrix (0..2 for separate q, k, v; 0 for the
    // fused one) and which of its outputs.
    auto source = [=](int64_t j) -> std::pair<int, int64_t> {
      if (fused_order) return {0, fused_order(j)};
      const int part = j < q_width ? 0 : j < q_width + kv_width ? 1 : 2;
      return {part, j - (part == 0 ? 0 : part == 1 ? q_width : q_width + kv_width)};
    };
    for (int l = 0; l < c.n_layers; ++l) {
      const size_t L = static_cast<size_t>(l);
      std::array<Source, 3> parts = qkv_parts[L];
      std::array<const float*, 3> bias_parts = qkv_bias_parts[L];
      if (qkv_layout != QkvLayout::Separate) {
        parts = {layer_sources[static_cast<size_t>(kLayerMatrices * l + kQkv)], Source{}, Source{}};
        bias_parts = {w->layers_[L].b_qkv, nullptr, nullptr};
      }
      const int64_t widths[3] = {qkv_layout == QkvLayout::Separate ? q_width : N, kv_width, kv_width};
      const int n_parts = qkv_layout == QkvLayout::Separate ? 3 : 1;
      bool same16 = out_in;
      for (int part = 0; part < n_parts; ++part)
        same16 = same16 && parts[static_cast<size_t>(part)].is16() && parts[static_cast<size_t>(part)].type == parts[0].type;
      if (same16) {
        std::array<const unsigned char*, 3> rows{};
        for (int part = 0; part < n_parts; ++part) rows[static_cast<size_t>(part)] = parts[static_cast<size_t>(part)].raw();
        joined_rows16[L] = [rows, source, D](int64_t j) -> const void* {
          const auto [part, o] = source(j);
          return rows[static_cast<size_t>(part)] + 2 * o * D;
        };
        joined_type16[L] = parts[0].type;
        w->matrices_[static_cast<size_t>(kLayerMatrices * l + kQkv)] = matrix(nullptr);
      } else {
        warn_layer16(l, TensorRole::QkvWeight);  // 16-bit parts joined in float32 are not checked when packed
        std::array<const float*, 3> f32{};
        for (int part = 0; part < n_parts; ++part) {
          Source& src = parts[static_cast<size_t>(part)];
          f32[static_cast<size_t>(part)] = src.is16() ? b.as_f32(*src.info, *src.file) : src.f32;
        }
        FloatBuffer& joined = w->owned_.emplace_back(static_cast<size_t>(D * N));
        for (int64_t j = 0; j < N; ++j) {
          const auto [part, o] = source(j);
          const float* src = f32[static_cast<size_t>(part)];
          const int64_t n = widths[part];
          for (int64_t i = 0; i < D; ++i) joined[static_cast<size_t>(i * N + j)] = out_in ? src[o * D + i] : src[i * n + o];
        }
        for (int part = 0; part < n_parts; ++part) b.drop(f32[static_cast<size_t>(part)], D * widths[part]);
        w->matrices_[static_cast<size_t>(kLayerMatrices * l + kQkv)] = matrix(joined.data());
      }
      if (c.architecture.qkv_bias) {
        FloatBuffer& bias = w->owned_.emplace_back(static_cast<size_t>(N));
        for (int64_t j = 0; j < N; ++j) {
          const auto [part, o] = source(j);
          bias[static_cast<size_t>(j)] = bias_parts[static_cast<size_t>(part)][o];
        }
        w->layers_[L].b_qkv = bias.data();
      }
    }
  }

  // The forward pass reads the products' weights from packed copies (packed_gemm.h: far faster
  // than reading them in place at few tokens). Once a tensor is packed, its other copy goes:
  // keeping both would hold every weight twice (docs/benchmarks.md has the resident figures).
  // - In place in the mapped file (F32, [in, out], or any 16-bit matrix, packed in its own type):
  //   its pages are released, and the few reads in place that remain (embedding rows, a head's W_O
  //   for a view) map them again on demand or read the packed copy.
  // - A float32 conversion (F64), a joined QKV, or a matrix stored [out, in] (whose rows are not
  //   the [in, out] rows the accessors give): the copy is dropped, and [in, out] rows are rebuilt
  //   from the packed copy (the same floats) only if something reads the matrix in place.
  w->packed_.reserve(static_cast<size_t>(c.n_layers));  // Matrix::packed points into it
  auto release = [&](Matrix& m, const PackedMatrix& packed, bool transposed, int64_t elements, bool keep_rows) {
    m.packed = &packed;
    m.transposed = transposed;
    const bool owned = b.owned(m.rows);
    b.drop(m.rows, elements);
    if (owned || !keep_rows) m.rows = nullptr;
  };
  // A 16-bit matrix's packed copy is made from the file; then the file's pages go, and rows read
  // in place are rebuilt from the packed copy.
  auto release16 = [](Matrix& m, const PackedMatrix& packed, bool transposed, const Source& src) {
    m.packed = &packed;
    m.transposed = transposed;
    m.rows = nullptr;
    if (src.info) src.file->release_resident(src.raw(), static_cast<size_t>(src.info->end - src.info->begin));
  };
  // A 16-bit matrix's rows are fetched through its file, not its mapping (copy_mapped says why).
  const PackedMatrix::CopySource through_file = [files = &w->files_](const void* p, size_t bytes, void* dst) {
    for (const auto& f : *files)
      if (f->copy_mapped(p, bytes, dst)) return true;
    return false;
  };
  // The [out, in] rows of a 16-bit tensor, for packing its transpose.
  auto rows16 = [](const Source& src, int64_t row_elements) {
    const unsigned char* data = src.raw();
    return [data, row_elements](int64_t j) -> const void* { return data + 2 * j * row_elements; };
  };
  // Packed copies come from the cache on disk when it holds this model's (pack_cache.h).
  const std::string model_key = "model " + c.model_type + " (" + std::string(c.architecture.family->name()) + ") layers " +
                                std::to_string(c.n_layers) + " heads " + std::to_string(c.n_heads) + "/" +
                                std::to_string(c.n_key_value_heads) + " d_model " + std::to_string(D) + " d_head " +
                                std::to_string(c.d_head) + " d_mlp " + std::to_string(c.d_mlp) + " d_vocab " +
                                std::to_string(V) + " qkv " + std::to_string(static_cast<int>(qkv_layout)) +
                                (w->tied_ ? " tied" : " untied");
  PackCache cache(w->files_, model_key);
  size_t cache_index = 0;
  // The layer matrices' [in, out] shapes and roles, in LayerMatrix order.
  const TensorRole roles[kLayerMatrices] = {TensorRole::QkvWeight, TensorRole::AttnOutWeight, TensorRole::MlpInWeight,
                                            TensorRole::MlpOutWeight, TensorRole::MlpGateWeight};
  for (int l = 0; l < c.n_layers; ++l) {
    PackedLayer& P = w->packed_.emplace_back();
    PackedMatrix* targets[kLayerMatrices] = {&P.W_qkv, &P.W_O, &P.W_in, &P.W_out, &P.W_gate};
    for (int which = 0; which < kLayerMatrices; ++which) {
      const std::unique_ptr<Matrix>& mp = w->matrices_[static_cast<size_t>(kLayerMatrices * l + which)];
      if (!mp) continue;  // no gate
      Matrix& m = *mp;
      const std::vector<int64_t> shape = logical_shape(c, roles[which]);
      const int64_t K = shape[0], N = shape[1];
      // A joined QKV is [in, out] whatever the file's layout.
      const bool joined = which == kQkv && join_qkv;
      const bool out_in = !joined && family.layout(roles[which]) == Layout::OutIn;
      const Source& src = layer_sources[static_cast<size_t>(kLayerMatrices * l + which)];
      if (joined && joined_rows16[static_cast<size_t>(l)]) {
        *targets[which] = cache.take(cache_index++, joined_type16[static_cast<size_t>(l)], K, N, [&] {
          return PackedMatrix::from_transposed_rows(joined_type16[static_cast<size_t>(l)], N, K,
                                                    joined_rows16[static_cast<size_t>(l)], through_file);
        });
        if (targets[which]->count_non_finite() > 0) warn_layer16(l, TensorRole::QkvWeight);
        if (qkv_layout == QkvLayout::Separate)
          for (const Source& part : qkv_parts[static_cast<size_t>(l)]) release16(m, *targets[which], false, part);
        else
          release16(m, *targets[which], false, src);
      } else if (!joined && src.is16()) {
        *targets[which] = cache.take(cache_index++, src.type, K, N, [&] {
          return out_in ? PackedMatrix::from_transposed_rows(src.type, N, K, rows16(src, K), through_file)
                        : PackedMatrix::from_rows(src.type, src.raw(), K, N, N);
        });
        if (targets[which]->count_non_finite() > 0) warn_layer16(l, roles[which]);
        release16(m, *targets[which], false, src);
      } else {
        *targets[which] = cache.take(cache_index++, PanelType::F32, K, N, [&] {
          return out_in ? PackedMatrix::from_transposed_rows(m.rows, N, K, K) : PackedMatrix::from_rows(m.rows, K, N, N);
        });
        release(m, *targets[which], false, K * N, !out_in);
      }
    }
  }
  Matrix& unembed = w->tied_ ? *w->W_E_ : *w->W_U_;
  const Source& unembed_src = w->tied_ ? embed_source : unembed_source;
  if (unembed_src.is16()) {
    w->packed_unembed_ = cache.take(cache_index++, unembed_src.type, D, V, [&] {
      return PackedMatrix::from_transposed_rows(unembed_src.type, V, D, rows16(unembed_src, D), through_file);
    });
    if (w->packed_unembed_.count_non_finite() > 0)
      for (const Bound& t : bound)
        if (packed_from_file(t) && (t.spec->role == TensorRole::Unembedding || (w->tied_ && t.spec->role == TensorRole::TokenEmbedding)))
          warn_bad(t);
    release16(unembed, w->packed_unembed_, true, unembed_src);
  } else {
    w->packed_unembed_ =
        cache.take(cache_index++, PanelType::F32, D, V, [&] { return PackedMatrix::from_transposed_rows(unembed.rows, V, D, D); });
    release(unembed, w->packed_unembed_, true, V * D, true);
  }
  w->packed_from_cache_ = cache.hit();
  cache.finish();
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

ConstMatrixRef Weights::layer_rows(int l, LayerMatrix which) const {
  const PackedMatrix& p = *layer_matrix(l, which).packed;
  return ConstMatrixRef(rows_of(layer_matrix(l, which)), p.rows(), p.cols());
}

ConstMatrixRef Weights::W_qkv(int l) const { return layer_rows(l, kQkv); }
ConstMatrixRef Weights::W_O_all(int l) const { return layer_rows(l, kAttnOut); }
ConstMatrixRef Weights::W_in(int l) const { return layer_rows(l, kMlpIn); }
ConstMatrixRef Weights::W_gate(int l) const {
  if (!layer_matrix_ptr(l, kMlpGate)) throw Error("W_gate: this model's MLP is not gated.");
  return layer_rows(l, kMlpGate);
}
ConstMatrixRef Weights::W_out(int l) const { return layer_rows(l, kMlpOut); }
const float* Weights::W_E() const { return rows_of(*W_E_); }
const float* Weights::unembed_rows() const { return rows_of(unembed()); }

void Weights::unembed_row(int32_t t, float* out) const {
  // From the packed copy, always: the same floats, without mapping released pages again or
  // rebuilding a freed conversion.
  packed_unembed_.column(t, out);
}

void Weights::embedding_row(int32_t t, float* out) const {
  // Reading the released rows in place would map them again, and the kernel maps a whole
  // page-cache folio per fault, so a long prompt brought most of the table back (docs/benchmarks.md,
  // "the weights are resident once"). The packed copy gives the same floats.
  const int64_t D = config_.d_model;
  if (tied_)
    unembed_row(t, out);
  else
    std::copy_n(W_E_->rows + t * D, D, out);  // an untied W_E is not packed: never released
  // Gemma2Model.forward: hidden_states * normalizer, in the hidden dtype (float32 here).
  if (embedding_scale_ != 1.0f)
    for (int64_t i = 0; i < D; ++i) out[i] *= embedding_scale_;
}

// The fused QKV's columns are [Q | K | V]: n_heads query blocks, then n_kv key and n_kv value blocks.
ConstStridedMatrixRef Weights::W_Q(int l, int h) const {
  const ConstMatrixRef qkv = W_qkv(l);
  const int dh = config_.d_head;
  return ConstStridedMatrixRef(qkv.data() + h * dh, qkv.rows(), dh, Eigen::OuterStride<>(qkv.cols()));
}
ConstStridedMatrixRef Weights::W_K(int l, int kv) const {
  const ConstMatrixRef qkv = W_qkv(l);
  const int dh = config_.d_head;
  return ConstStridedMatrixRef(qkv.data() + (config_.n_heads + kv) * dh, qkv.rows(), dh,
                               Eigen::OuterStride<>(qkv.cols()));
}
ConstStridedMatrixRef Weights::W_V(int l, int kv) const {
  const ConstMatrixRef qkv = W_qkv(l);
  const int dh = config_.d_head;
  return ConstStridedMatrixRef(qkv.data() + (config_.n_heads + config_.n_key_value_heads + kv) * dh, qkv.rows(), dh,
                               Eigen::OuterStride<>(qkv.cols()));
}
ConstMatrixRef Weights::W_O(int l, int h) const {
  const int D = config_.d_model, dh = config_.d_head;
  return ConstMatrixRef(W_O_all(l).data() + static_cast<int64_t>(h) * dh * D, dh, D);
}
ConstVectorRef Weights::b_O(int l) const {
  const float* b = layer(l).b_O;
  return ConstVectorRef(b ? b : zeros_.data(), config_.d_model);
}

size_t Weights::packed_bytes() const {
  size_t n = packed_unembed_.bytes();
  for (const PackedLayer& p : packed_)
    n += p.W_qkv.bytes() + p.W_O.bytes() + p.W_in.bytes() + p.W_gate.bytes() + p.W_out.bytes();
  return n;
}

size_t Weights::owned_bytes() const {
  size_t n = 0;
  for (const auto& v : owned_) n += v.size() * sizeof(float);
  auto rebuilt = [&](const Matrix& m) {
    if (m.built.load(std::memory_order_acquire)) n += m.rebuilt.size() * sizeof(float);
  };
  for (const auto& m : matrices_)
    if (m) rebuilt(*m);
  rebuilt(*W_E_);
  if (W_U_) rebuilt(*W_U_);
  return n;
}

}  // namespace hs
