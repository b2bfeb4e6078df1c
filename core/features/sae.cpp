// Running an SAE or transcoder: the encoder and decoder of SAELens 6 (sae_lens/saes/*.py) and
// circuit-tracer (circuit_tracer/transcoder/single_layer_transcoder.py), float32 products with
// float64 row statistics. tools/reference/saeref.py is the float64 twin.
#include "core/features/sae.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/model/config.h"
#include "core/model/hooks.h"
#include "core/model/thread_scope.h"

namespace hs {
namespace {

// The per-position state of SAELens's run-time normalisation (SAE._setup_activation_normalization):
// in: (x - shift) * in_scale; out: y * out_scale + shift.
struct NormRows {
  VectorXf shift, in_scale, out_scale;  // [pos]
};

NormRows norm_rows(const Sae& s, const RowMatrixXf& x) {
  const Eigen::Index n = x.rows();
  NormRows r{VectorXf::Zero(n), VectorXf::Ones(n), VectorXf::Ones(n)};
  for (Eigen::Index p = 0; p < n; ++p) {
    const Eigen::RowVectorXd row = x.row(p).cast<double>();
    if (s.norm == SaeNorm::ConstantNormRescale) {
      // x_norm_coeff = sqrt(d_in) / |x|; out divides by it. A zero row (no direction) stays as it is.
      const double norm = row.norm();
      if (norm > 0) {
        r.in_scale(p) = static_cast<float>(std::sqrt(static_cast<double>(s.d_in)) / norm);
        r.out_scale(p) = static_cast<float>(norm / std::sqrt(static_cast<double>(s.d_in)));
      }
    } else if (s.norm == SaeNorm::LayerNorm) {
      // run_time_activation_ln_in: x - mu, divided by torch's x.std() (unbiased, n - 1) + 1e-5;
      // run_time_activation_ln_out: x * std + mu (the std without the epsilon).
      const double mu = row.mean();
      const double var = (row.array() - mu).square().sum() / static_cast<double>(std::max<Eigen::Index>(row.size() - 1, 1));
      const double sd = std::sqrt(var);
      r.shift(p) = static_cast<float>(mu);
      r.in_scale(p) = static_cast<float>(1.0 / (sd + 1e-5));
      r.out_scale(p) = static_cast<float>(sd);
    }
  }
  return r;
}

// SAE.process_sae_in (Transcoder.process_sae_in: no b_dec): the rows the encoder multiplies.
RowMatrixXf encoder_input(const Sae& s, const RowMatrixXf& x, const NormRows& nr) {
  RowMatrixXf in = x;
  if (s.norm != SaeNorm::None)
    for (Eigen::Index p = 0; p < in.rows(); ++p) in.row(p) = (in.row(p).array() - nr.shift(p)) * nr.in_scale(p);
  if (s.apply_b_dec_to_input) in.rowwise() -= s.b_dec;
  return in;
}

void check_width(const Sae& s, const RowMatrixXf& m, Eigen::Index want, const char* what) {
  if (m.cols() != want)
    throw Error("the SAE " + s.name + " expects " + what + " of width " + std::to_string(want) + ", got " +
                std::to_string(m.cols()) + ".");
}

inline float relu(float v) { return v > 0.0f ? v : 0.0f; }

// The activation on the pre-activations of one row (b_enc added), in place.
void activate_row(const Sae& s, float* pre, std::vector<int>& order) {
  const int n = s.d_sae;
  switch (s.activation) {
    case SaeActivation::Relu:
      for (int i = 0; i < n; ++i) pre[i] = relu(pre[i]);
      break;
    case SaeActivation::JumpRelu:
      // SAELens JumpReLUSAE.encode: relu(pre) * (pre > threshold); circuit-tracer's jumprelu:
      // pre * (pre > threshold), no ReLU (a negative threshold lets negative values through).
      for (int i = 0; i < n; ++i)
        pre[i] = pre[i] > s.threshold[i] ? (s.relu_after ? relu(pre[i]) : pre[i]) : 0.0f;
      break;
    case SaeActivation::TopK: {
      // SAELens TopK.forward: torch.topk, then relu on the kept values; circuit-tracer TopK:
      // x * gate, no ReLU. Ties go to the lower index (torch leaves them unspecified).
      order.resize(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      const auto larger = [pre](int a, int b) { return pre[a] > pre[b] || (pre[a] == pre[b] && a < b); };
      std::nth_element(order.begin(), order.begin() + (s.k - 1), order.end(), larger);
      const int kth = order[static_cast<size_t>(s.k - 1)];
      for (int i = 0; i < n; ++i) {
        const bool kept = larger(i, kth) || i == kth;
        pre[i] = kept ? (s.relu_after ? relu(pre[i]) : pre[i]) : 0.0f;
      }
      break;
    }
    case SaeActivation::Gated:
      break;  // encoded in sae_encode, which needs the shared product twice
  }
}

}  // namespace

RowMatrixXf sae_encode(const Sae& s, const RowMatrixXf& x) {
  check_width(s, x, s.d_in, "input rows");
  const NormRows nr = norm_rows(s, x);
  const RowMatrixXf in = encoder_input(s, x, nr);
  RowMatrixXf acts(x.rows(), s.d_sae);  // [pos, d_sae]
  // One GEMM for every position and latent, its columns (latents) split into blocks shared among
  // the calling thread's OpenMP team; each block is one single-threaded Eigen product (Eigen's own
  // threaded GEMM spins, DESIGN.md). A latent's value is a sum over d_in whatever the split; only
  // Eigen's blocking of that sum can differ, within float32 rounding. Small products (a typed
  // key's new row) stay on the calling thread.
  const Eigen::Index n_rows = x.rows();
  const int team = static_cast<double>(n_rows) * s.d_in * s.d_sae >= 8.0e6 ? omp_get_max_threads() : 1;
  const Eigen::Index block = 512;  // latents per task: a multiple of every SIMD width
  const Eigen::Index n_blocks = (s.d_sae + block - 1) / block;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (Eigen::Index b = 0; b < n_blocks; ++b) {
    ThreadScope one(1);
    const Eigen::Index c0 = b * block, w = std::min<Eigen::Index>(block, s.d_sae - c0);
    acts.middleCols(c0, w).noalias() = in * s.W_enc.middleCols(c0, w);
  }
  if (s.activation == SaeActivation::Gated) {
    // GatedSAE.encode: gate (in @ W_enc + b_gate > 0), magnitude relu(in @ (W_enc * exp(r_mag)) +
    // b_mag); the column scaling by exp(r_mag) commutes with the product.
    const RowVectorXf mag_scale = s.r_mag.array().exp();
    for (Eigen::Index p = 0; p < acts.rows(); ++p)
      for (int i = 0; i < s.d_sae; ++i) {
        const float pre = acts(p, i);
        acts(p, i) = pre + s.b_gate[i] > 0.0f ? relu(pre * mag_scale[i] + s.b_mag[i]) : 0.0f;
      }
    return acts;
  }
  acts.rowwise() += s.b_enc;
  // TopKSAE.encode: hidden_pre * |W_dec[i]| before the top k under rescale_acts_by_decoder_norm.
  if (s.activation == SaeActivation::TopK && s.rescale_acts_by_decoder_norm) acts.array().rowwise() *= s.W_dec_norm.array();
  const int row_team = s.activation == SaeActivation::TopK && n_rows >= 8 ? team : 1;
#pragma omp parallel num_threads(row_team) if (row_team > 1)
  {
    std::vector<int> order;
#pragma omp for schedule(static)
    for (Eigen::Index p = 0; p < n_rows; ++p) activate_row(s, acts.row(p).data(), order);
  }
  return acts;
}

RowMatrixXf sae_decode(const Sae& s, const RowMatrixXf& feature_acts, const RowMatrixXf& x) {
  check_width(s, feature_acts, s.d_sae, "latents");
  check_width(s, x, s.d_in, "input rows");
  if (feature_acts.rows() != x.rows())
    throw Error("the SAE " + s.name + " was given latents for " + std::to_string(feature_acts.rows()) +
                " positions and input rows for " + std::to_string(x.rows()) + ".");
  const Eigen::Index n = x.rows();
  RowMatrixXf out(n, s.d_out);  // [pos, d_out]
  out.rowwise() = s.b_dec;
  // TopKSAE.decode: feature_acts / |W_dec[i]| under rescale_acts_by_decoder_norm.
  const bool rescale = s.activation == SaeActivation::TopK && s.rescale_acts_by_decoder_norm;
  const Eigen::Index nonzero = (feature_acts.array() != 0.0f).count();
  if (nonzero * 8 > feature_acts.size()) {
    // Dense latents (a ReLU SAE far from sparse): one GEMM.
    ThreadScope one(1);
    if (rescale)
      out.noalias() += (feature_acts.array().rowwise() / s.W_dec_norm.array()).matrix() * s.W_dec;
    else
      out.noalias() += feature_acts * s.W_dec;
  } else {
    // Sparse latents: the decoder rows of the active ones, in latent order.
    for (Eigen::Index p = 0; p < n; ++p)
      for (int i = 0; i < s.d_sae; ++i) {
        const float a = feature_acts(p, i);
        if (a != 0.0f) out.row(p) += (rescale ? a / s.W_dec_norm[i] : a) * s.W_dec.row(i);
      }
  }
  if (s.norm_out && s.norm != SaeNorm::None) {
    const NormRows nr = norm_rows(s, x);
    for (Eigen::Index p = 0; p < n; ++p) out.row(p) = out.row(p).array() * nr.out_scale(p) + nr.shift(p);
  }
  // SkipTranscoder.forward / circuit-tracer decode: + x @ W_skip^T, x as read (not normalised).
  if (s.W_skip.size() != 0) {
    ThreadScope one(1);
    out.noalias() += x * s.W_skip.transpose();
  }
  return out;
}

SaeRun run_sae(const Sae& s, const RowMatrixXf& x) {
  SaeRun r;
  r.sae_in = x;
  r.feature_acts = sae_encode(s, x);
  r.sae_out = sae_decode(s, r.feature_acts, x);
  return r;
}

RowVectorXf sae_decoder_row(const Sae& s, int latent) {
  if (latent < 0 || latent >= s.d_sae)
    throw Error("the SAE " + s.name + " has latents 0 to " + std::to_string(s.d_sae - 1) + ", not " +
                std::to_string(latent) + ".");
  return s.W_dec.row(latent);
}

VectorXf sae_output_scale(const Sae& s, const RowMatrixXf& x) {
  check_width(s, x, s.d_in, "input rows");
  if (!s.norm_out || s.norm == SaeNorm::None) return VectorXf::Ones(x.rows());
  return norm_rows(s, x).out_scale;
}

RowMatrixXf sae_decoder_times(const Sae& s, const RowMatrixXf& g) {
  check_width(s, g, s.d_out, "output gradients");
  RowMatrixXf r(g.rows(), s.d_sae);  // [pos, d_sae]
  {
    ThreadScope one(1);
    r.noalias() = g * s.W_dec.transpose();
  }
  if (s.activation == SaeActivation::TopK && s.rescale_acts_by_decoder_norm) r.array().rowwise() /= s.W_dec_norm.array();
  return r;
}

RowMatrixXf sae_encode_naive(const Sae& s, const RowMatrixXf& x) {
  check_width(s, x, s.d_in, "input rows");
  const Eigen::Index n = x.rows();
  RowMatrixXf acts = RowMatrixXf::Zero(n, s.d_sae);
  for (Eigen::Index p = 0; p < n; ++p) {
    // process_sae_in, in float64.
    std::vector<double> in(static_cast<size_t>(s.d_in));
    double mu = 0, scale = 1;
    if (s.norm == SaeNorm::LayerNorm) {
      for (int j = 0; j < s.d_in; ++j) mu += x(p, j);
      mu /= s.d_in;
      double ss = 0;
      for (int j = 0; j < s.d_in; ++j) ss += (x(p, j) - mu) * (x(p, j) - mu);
      scale = 1.0 / (std::sqrt(ss / (s.d_in - 1)) + 1e-5);
    } else if (s.norm == SaeNorm::ConstantNormRescale) {
      double ss = 0;
      for (int j = 0; j < s.d_in; ++j) ss += static_cast<double>(x(p, j)) * x(p, j);
      if (ss > 0) scale = std::sqrt(static_cast<double>(s.d_in)) / std::sqrt(ss);
    }
    for (int j = 0; j < s.d_in; ++j)
      in[j] = (x(p, j) - mu) * scale - (s.apply_b_dec_to_input ? s.b_dec[j] : 0.0);
    std::vector<double> pre(static_cast<size_t>(s.d_sae));
    for (int i = 0; i < s.d_sae; ++i) {
      double v = 0;
      for (int j = 0; j < s.d_in; ++j) v += in[j] * s.W_enc(j, i);
      pre[i] = v;
    }
    for (int i = 0; i < s.d_sae; ++i) {
      double v = pre[i];
      switch (s.activation) {
        case SaeActivation::Relu: v = std::max(v + s.b_enc[i], 0.0); break;
        case SaeActivation::JumpRelu:
          v += s.b_enc[i];
          v = v > s.threshold[i] ? (s.relu_after ? std::max(v, 0.0) : v) : 0.0;
          break;
        case SaeActivation::Gated:
          v = v + s.b_gate[i] > 0 ? std::max(v * std::exp(static_cast<double>(s.r_mag[i])) + s.b_mag[i], 0.0) : 0.0;
          break;
        case SaeActivation::TopK:
          v += s.b_enc[i];
          if (s.rescale_acts_by_decoder_norm) v *= s.W_dec_norm[i];
          break;
      }
      acts(p, i) = static_cast<float>(v);
    }
    if (s.activation == SaeActivation::TopK) {
      std::vector<int> order(static_cast<size_t>(s.d_sae));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return acts(p, a) > acts(p, b); });
      for (size_t r = 0; r < order.size(); ++r) {
        float& a = acts(p, order[r]);
        a = static_cast<int>(r) < s.k ? (s.relu_after ? relu(a) : a) : 0.0f;
      }
    }
  }
  return acts;
}

void check_sae_fits(const Sae& s, const ModelConfig& c) {
  const auto check = [&](const std::string& hook, int width, const char* side, const char* dim) {
    const std::optional<HookKey> k = parse_hook_key(c, hook);
    if (!k)
      throw Error("the SAE " + s.name + " " + side + " " + hook + ", which is not a hook of this model (" +
                  std::to_string(c.n_layers) + " layers; `headscope-cli hooks --model DIR` lists them).");
    if (!hook_readable(c, k->hook))
      throw Error("the SAE " + s.name + " " + side + " " + hook + ", which this model does not have (its architecture has no " +
                  std::string(hook_info(k->hook).name) + ").");
    const HookInfo& info = hook_info(k->hook);
    if (info.shape[0] != Dim::Pos || k->hook == HookPoint::Pattern || k->hook == HookPoint::AttnScores)
      throw Error("the SAE " + s.name + " " + side + " " + hook + ", which has no row per position.");
    const int64_t w = hook_row_width(c, k->hook, 1);
    if (w != width)
      throw Error("the SAE " + s.name + " " + side + " " + hook + " with " + dim + " = " + std::to_string(width) +
                  ", but this model's " + hook + " has " + std::to_string(w) + " values per position" +
                  (k->hook == HookPoint::Z ? " (n_heads x d_head)" : "") +
                  ": the SAE was trained on another model.");
  };
  check(s.hook_in, s.d_in, "reads", "d_in");
  check(s.hook_out, s.d_out, "writes", "d_out");
  if (s.hook_out_before_post_norm && c.architecture.post_mlp_norm)
    throw Error("the transcoder " + s.name + " writes circuit-tracer's mlp.hook_out, the MLP's output before its "
                "post-MLP norm, which this model has and HeadScope keeps no hook for.");
}

}  // namespace hs
