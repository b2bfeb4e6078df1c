#include "core/features/features.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/model/cache.h"
#include "core/model/forward.h"
#include "core/model/hooks.h"
#include "core/model/metric.h"
#include "core/model/ops.h"
#include "core/model/weights.h"

namespace hs {
namespace {

// ln1/ln2.hook_normalized are cache keys on RMSNorm models only; on LayerNorm models the cache
// derives the same rows on request (hooks.h: hook_readable), which is what an SAE trained on
// TransformerLens's unprocessed model read.
bool is_block_norm(HookPoint h) { return h == HookPoint::Ln1Normalized || h == HookPoint::Ln2Normalized; }

HookKey parse_rows_hook(const ModelConfig& c, std::string_view hook) {
  const std::optional<HookKey> k = parse_hook_key(c, hook);
  if (!k)
    throw Error("the hook \"" + std::string(hook) + "\" is not one of this model's (" + std::to_string(c.n_layers) +
                " layers; `headscope-cli hooks --model DIR` lists them).");
  if (!hook_readable(c, k->hook))
    throw Error("this model has no hook \"" + std::string(hook) + "\" (its architecture has no " +
                std::string(hook_info(k->hook).name) + ").");
  const HookInfo& info = hook_info(k->hook);
  if (k->hook == HookPoint::Pattern || k->hook == HookPoint::AttnScores || info.shape[0] != Dim::Pos)
    throw Error("the hook \"" + std::string(hook) + "\" is not indexed by position first, so it has no rows to encode.");
  return *k;
}

// Keeps, per thread, the rows the last callable at a transcoder's input saw (one forward pass runs
// its hooks on one thread; two runs on two threads each see their own).
class InputCapture {
 public:
  void put(Eigen::Index first_pos, RowMatrixXf rows) {
    std::lock_guard lock(m_);
    auto& slot = by_thread_[std::this_thread::get_id()];
    slot.first_pos = first_pos;
    slot.rows = std::move(rows);
  }
  RowMatrixXf take(Eigen::Index first_pos, Eigen::Index n) {
    std::lock_guard lock(m_);
    const auto it = by_thread_.find(std::this_thread::get_id());
    if (it == by_thread_.end() || it->second.first_pos != first_pos || it->second.rows.rows() != n)
      throw Error("internal: a transcoder's output hook ran without its input rows of the same positions.");
    RowMatrixXf rows = std::move(it->second.rows);
    by_thread_.erase(it);
    return rows;
  }

 private:
  struct Slot {
    Eigen::Index first_pos = 0;
    RowMatrixXf rows;
  };
  std::mutex m_;
  std::map<std::thread::id, Slot> by_thread_;
};

bool touches(const std::vector<LatentEdit>& edits, Eigen::Index first, Eigen::Index n) {
  for (const LatentEdit& e : edits)
    if (e.pos < 0 || (e.pos >= first && e.pos < first + n)) return true;
  return false;
}

// The output rows of a spliced SAE for input rows x (positions first .. first + n - 1), in place
// on `out` (the output hook's rows of this run).
void splice_rows(const Sae& sae, const SpliceOptions& o, const RowMatrixXf& x, Eigen::Ref<RowMatrixXf> out,
                 Eigen::Index first) {
  const Eigen::Index n = out.rows();
  if (o.error_term && !touches(o.edits, first, n)) return;  // decode(a) + (x - decode(a)) is x
  const SaeRun clean = run_sae(sae, x);
  RowMatrixXf acts = clean.feature_acts;
  // The positions whose latents an edit changed (zeroing or scaling an inactive latent changes
  // nothing, and its position is left as it was).
  std::vector<char> changed(static_cast<size_t>(n), 0);
  for (const LatentEdit& e : o.edits) {
    if (e.kind == LatentEdit::Kind::Add) continue;
    const Eigen::Index p0 = e.pos < 0 ? 0 : e.pos - first, p1 = e.pos < 0 ? n : p0 + 1;
    if (p0 < 0 || p0 >= n) continue;
    for (Eigen::Index p = p0; p < p1; ++p) {
      const float before = acts(p, e.latent);
      acts(p, e.latent) = e.kind == LatentEdit::Kind::Zero ? 0.0f : before * e.value;
      if (acts(p, e.latent) != before) changed[static_cast<size_t>(p)] = 1;
    }
  }
  const bool any = std::find(changed.begin(), changed.end(), 1) != changed.end();
  const RowMatrixXf decoded = any ? sae_decode(sae, acts, x) : clean.sae_out;
  for (Eigen::Index p = 0; p < n; ++p) {
    if (o.error_term) {
      if (!changed[static_cast<size_t>(p)]) continue;
      // SAELens's order (SAE.forward with use_error_term): sae_out + (x - x_reconstruct_clean).
      RowVectorXf error = out.row(p) - clean.sae_out.row(p);
      out.row(p) = decoded.row(p) + error;
    } else {
      out.row(p) = decoded.row(p);
    }
  }
  for (const LatentEdit& e : o.edits) {
    if (e.kind != LatentEdit::Kind::Add) continue;
    const Eigen::Index p0 = e.pos < 0 ? 0 : e.pos - first, p1 = e.pos < 0 ? n : p0 + 1;
    if (p0 < 0 || p0 >= n) continue;
    const RowVectorXf direction = sae_decoder_row(sae, e.latent);
    for (Eigen::Index p = p0; p < p1; ++p) out.row(p) += e.value * direction;
  }
}

float parse_float(std::string_view s, std::string_view item) {
  float v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v))
    throw Error("the latent edit \"" + std::string(item) + "\" has no number where \"" + std::string(s) +
                "\" is; write LATENT:zero, LATENT:xS or LATENT:+S, e.g. 12:zero,40:x2.5,7:+3@4.");
  return v;
}

int parse_int(std::string_view s, std::string_view item, std::string_view what) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0)
    throw Error("the latent edit \"" + std::string(item) + "\" has no " + std::string(what) + " where \"" +
                std::string(s) + "\" is; write LATENT:zero, LATENT:xS or LATENT:+S[@POS], e.g. 12:zero,40:x2.5,7:+3@4.");
  return v;
}

}  // namespace

RowMatrixXf hook_rows(const ActivationCache& cache, std::string_view hook) {
  const HookKey k = parse_rows_hook(cache.config(), hook);
  return cache.rows(k.hook, k.layer);  // ln1/ln2.hook_normalized: the block's norm on every norm kind
}

std::shared_ptr<const Sae> sae_at_layer(const SaeSet& set, int layer) {
  std::string layers;
  for (const Sae& s : set.saes) {
    if ((layer < 0 && set.saes.size() == 1) || s.layer == layer) return std::make_shared<const Sae>(s);
    layers += (layers.empty() ? "" : ", ") + std::to_string(s.layer);
  }
  if (layer < 0)
    throw Error(set.folder.string() + " holds " + std::to_string(set.saes.size()) +
                " SAEs, one per layer (" + layers + "); choose one with --layer L.");
  throw Error(set.folder.string() + " has no SAE reading layer " + std::to_string(layer) + "; its layers are " + layers +
              ".");
}

SaeRun run_sae(const ActivationCache& cache, const Sae& sae) { return run_sae(sae, hook_rows(cache, sae.hook_in)); }

std::vector<LatentEdit> parse_latent_edits(std::string_view spec) {
  std::vector<LatentEdit> out;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    LatentEdit e;
    std::string_view body = item;
    if (const size_t at = body.find('@'); at != std::string_view::npos) {
      e.pos = parse_int(body.substr(at + 1), item, "position");
      body = body.substr(0, at);
    }
    const size_t colon = body.find(':');
    if (colon == std::string_view::npos)
      throw Error("the latent edit \"" + std::string(item) +
                  "\" has no ':'; write LATENT:zero, LATENT:xS or LATENT:+S[@POS], e.g. 12:zero,40:x2.5,7:+3@4.");
    e.latent = parse_int(body.substr(0, colon), item, "latent number");
    const std::string_view op = body.substr(colon + 1);
    if (op == "zero") {
      e.kind = LatentEdit::Kind::Zero;
    } else if (!op.empty() && op[0] == 'x') {
      e.kind = LatentEdit::Kind::Scale;
      e.value = parse_float(op.substr(1), item);
    } else if (!op.empty() && (op[0] == '+' || op[0] == '-')) {
      e.kind = LatentEdit::Kind::Add;
      e.value = parse_float(op[0] == '+' ? op.substr(1) : op, item);
    } else {
      throw Error("the latent edit \"" + std::string(item) + "\" has \"" + std::string(op) +
                  "\" where zero, xS or +S belongs, e.g. 12:zero,40:x2.5,7:+3@4.");
    }
    out.push_back(e);
  }
  if (out.empty()) throw Error("no latent edits given; write LATENT:zero, LATENT:xS or LATENT:+S[@POS], e.g. 12:zero.");
  return out;
}

std::string describe(const LatentEdit& e) {
  std::string s = "latent " + std::to_string(e.latent);
  char buf[32];
  switch (e.kind) {
    case LatentEdit::Kind::Zero: s += " zeroed"; break;
    case LatentEdit::Kind::Scale: std::snprintf(buf, sizeof buf, " x%g", e.value); s += buf; break;
    case LatentEdit::Kind::Add: std::snprintf(buf, sizeof buf, " steered %+g", e.value); s += buf; break;
  }
  if (e.pos >= 0) s += " at pos " + std::to_string(e.pos);
  return s;
}

Interventions splice_sae(std::shared_ptr<const Sae> sae, const Weights& weights, const SpliceOptions& options) {
  const ModelConfig& c = weights.config();
  check_sae_fits(*sae, c);
  for (const LatentEdit& e : options.edits)
    if (e.latent < 0 || e.latent >= sae->d_sae)
      throw Error(describe(e) + ": the SAE " + sae->name + " has latents 0 to " + std::to_string(sae->d_sae - 1) + ".");
  const HookKey in = parse_rows_hook(c, sae->hook_in), out = parse_rows_hook(c, sae->hook_out);
  if (hook_info(out.hook).edit == EditUnit::None)
    throw Error("the SAE " + sae->name + " writes " + sae->hook_out +
                ", which cannot be edited during a run, so it cannot be spliced (`headscope-cli hooks` lists the "
                "editable hooks).");
  auto opts = std::make_shared<const SpliceOptions>(options);
  const std::string label = "SAE " + sae->name + (options.error_term ? " spliced" : " in place of " + sae->hook_out);
  Interventions result;
  if (sae->hook_in == sae->hook_out) {
    auto call = std::make_shared<CallableEdit>();
    call->position_local = true;
    call->name = label;
    call->edit = [sae, opts](Eigen::Ref<RowMatrixXf> rows, Eigen::Index first) {
      const RowMatrixXf x = rows;
      splice_rows(*sae, *opts, x, rows, first);
    };
    result.push_back(call_at(out.hook, out.layer, std::move(call)));
    return result;
  }
  // A transcoder: its input rows come from the same run, kept at the input's nearest editable hook.
  HookPoint capture_at = in.hook;
  const bool norm = is_block_norm(in.hook);
  if (norm)
    capture_at = in.hook == HookPoint::Ln1Normalized || c.architecture.parallel_blocks ? HookPoint::ResidPre
                                                                                       : HookPoint::ResidMid;
  if (hook_info(capture_at).edit == EditUnit::None)
    throw Error("the transcoder " + sae->name + " reads " + sae->hook_in +
                ", which HeadScope cannot follow during a run, so it cannot be spliced.");
  if (in.layer > out.layer || (in.layer == out.layer && static_cast<int>(capture_at) >= static_cast<int>(out.hook)))
    throw Error("the transcoder " + sae->name + " reads " + sae->hook_in + " after the hook it writes (" +
                sae->hook_out + "), so it cannot be spliced.");
  auto capture = std::make_shared<InputCapture>();
  auto keep = std::make_shared<CallableEdit>();
  keep->position_local = true;
  keep->name = label + " (its input)";
  const LayerWeights* W = &weights.layer(in.layer);
  const bool first_norm = in.hook == HookPoint::Ln1Normalized;
  const float eps = c.norm_eps;
  const NormKind kind = c.architecture.norm;
  keep->edit = [capture, norm, W, first_norm, eps, kind](Eigen::Ref<RowMatrixXf> rows, Eigen::Index first) {
    RowMatrixXf x = rows;
    if (norm) {
      // The forward pass's own norm kernel on the same rows (forward.cpp: norm_forward), so the
      // transcoder reads the bits the MLP reads.
      RowMatrixXf normalized;
      norm_forward(normalized, nullptr, x, first_norm ? W->norm1_w : W->norm2_w, first_norm ? W->norm1_b : W->norm2_b,
                   eps, kind);
      x = std::move(normalized);
    }
    capture->put(first, std::move(x));
  };
  auto write = std::make_shared<CallableEdit>();
  write->position_local = true;
  write->name = label;
  write->edit = [sae, opts, capture](Eigen::Ref<RowMatrixXf> rows, Eigen::Index first) {
    const RowMatrixXf x = capture->take(first, rows.rows());
    splice_rows(*sae, *opts, x, rows, first);
  };
  result.push_back(call_at(capture_at, in.layer, std::move(keep)));
  result.push_back(call_at(out.hook, out.layer, std::move(write)));
  return result;
}

SaeQuality sae_quality(const ActivationCache& clean, const Sae& sae, const RowMatrixXf& feature_acts,
                       const RowMatrixXf& sae_out, int threads) {
  check_sae_fits(sae, clean.config());
  const RowMatrixXf target = hook_rows(clean, sae.hook_out);
  if (feature_acts.rows() != target.rows() || sae_out.rows() != target.rows() || sae_out.cols() != target.cols())
    throw Error("the SAE's latents and output do not have the run's positions and the output hook's width.");
  SaeQuality q;
  q.positions = static_cast<int>(target.rows());
  double sq = 0, var = 0, active = 0;
  const Eigen::RowVectorXd mean = target.cast<double>().colwise().mean();
  for (Eigen::Index p = 0; p < target.rows(); ++p) {
    sq += (target.row(p).cast<double>() - sae_out.row(p).cast<double>()).squaredNorm();
    var += (target.row(p).cast<double>() - mean).squaredNorm();
    active += static_cast<double>((feature_acts.row(p).array() != 0.0f).count());
  }
  q.mse = sq / static_cast<double>(target.size());
  q.explained_variance = var > 0 ? 1.0 - sq / var : 0.0;
  q.l0 = active / static_cast<double>(target.rows());
  if (clean.n_pos() >= 2) {
    q.loss_clean = metric_value(loss_metric(), clean);
    RunOptions spliced;
    spliced.threads = threads;
    spliced.logits_only = true;  // the loss reads the logits only: no per-layer cache to allocate
    spliced.interventions =
        splice_sae(std::make_shared<const Sae>(sae), *clean.weights(), {.error_term = false, .edits = {}});
    q.loss_spliced = metric_value(loss_metric(), *forward(clean.weights(), clean.tokens(), spliced));
  }
  return q;
}

SaeQuality sae_quality(const ActivationCache& clean, const Sae& sae, const SaeRun& r, int threads) {
  return sae_quality(clean, sae, r.feature_acts, r.sae_out, threads);
}

SaeQuality sae_quality(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens, const Sae& sae,
                       int threads) {
  check_sae_fits(sae, weights->config());
  RunOptions o;
  o.threads = threads;
  const auto clean = forward(weights, tokens, o);
  return sae_quality(*clean, sae, run_sae(*clean, sae), threads);
}

RowMatrixXf latent_attribution(const Sae& sae, const SaeRun& run, const RowMatrixXf& grad_out) {
  // sae_out(p) = s_p * (acts(p) @ W_dec) + terms without the latents, with s_p the output
  // normalisation's factor at p (1 without one): d sae_out(p) / d acts(p, i) = s_p * W_dec[i].
  const VectorXf s = sae_output_scale(sae, run.sae_in);
  RowMatrixXf g = sae_decoder_times(sae, grad_out);  // [pos, d_sae] = grad_out @ W_dec^T
  for (Eigen::Index p = 0; p < g.rows(); ++p) g.row(p) *= s(p);
  return run.feature_acts.cwiseProduct(g);
}

}  // namespace hs
