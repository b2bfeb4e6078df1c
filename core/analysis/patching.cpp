// The batched patching sweep (see patching.h for what it computes and why it is fast).
//
// Vocabulary of this file: a *cell* is one patched run (a layer and a position, or a layer and a
// head for z); a *member* is a cell inside the batch, holding rows first..S-1 of its residual
// stream (the rows that differ from the corrupted run). Per layer the members are stacked:
//
//   resid [rows, d_model]   members entering the layer at hook_resid_pre ("A" rows) first, then
//                           members entering after hook_z ("Z" rows: a z patch, every position),
//                           then "extra" rows: resid_mid of an attn_out patch at this layer's
//                           position, which only needs this layer's MLP and joins at the next.
//
// The layer is forward.cpp's, on those rows: norm, QKV, attention over the corrupted run's keys
// and values of the positions before `first` plus the member's own, W_O, norm, MLP. After it,
// every A and Z member continues as an A member. The last layer computes attention only for the
// last query and W_O and the MLP only for the last rows, whose final norm gives the metric.
#include "core/analysis/patching.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/model/forward.h"
#include "core/model/huge_pages.h"
#include "core/model/model.h"
#include "core/model/ops.h"
#include "core/model/thread_scope.h"

namespace hs {
namespace {

void check_pair(const ActivationCache& clean, const ActivationCache& corrupt, int32_t answer, int32_t wrong) {
  check_patching_runs(clean, corrupt);
  const int V = clean.config().d_vocab;
  for (int32_t t : {answer, wrong})
    if (t < 0 || t >= V)
      throw Error("token " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(V) + ").");
  if (answer == wrong) throw Error("the answer and the wrong answer are the same token; the metric would always be 0.");
}

RowMatrixXf normalize(const RowMatrixXf& raw, float m_clean, float m_corrupt) {
  return (raw.array() - m_corrupt) / (m_clean - m_corrupt);
}

// The activation at `hook` of layer l (a sweep site: stored in every run; hooks.h).
const PositionRows& at_hook(const ActivationCache& c, HookPoint hook, int l) { return *c.stored_rows(hook, l); }

// What the batched layers implement: forward.cpp's sequential block with either norm, learned or
// rotary positions and a plain or gated MLP. Parallel blocks (GPT-NeoX's default) and Gemma's and
// Qwen3's steps (norms after attention and the MLP, q/k norms, soft-caps, windows, local
// rotations, the scaled embedding) fall back to full runs until their steps are added here too
// (DESIGN.md, "Adding an architecture").
bool batched_layers_support(const ModelConfig& c) {
  const Architecture& a = c.architecture;
  return !a.parallel_blocks && !a.post_attn_norm && !a.post_mlp_norm && !a.qk_norm && !(a.attn_softcap > 0.0f) &&
         !(a.final_softcap > 0.0f) && a.window.empty() && !a.local_rotary && !a.embedding_scaled &&
         !(a.attn_scale > 0.0f);
}

// Applies `f(block_in, block_out)` to blocks of rows on the calling thread's team: the elementwise
// steps between products (norms, the activation), which are serial in forward() but would leave
// one core idle here, where a layer has thousands of rows.
template <class F>
void by_row_blocks(Eigen::Index rows, F&& f) {
  constexpr Eigen::Index kBlock = 64;
  const Eigen::Index blocks = (rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (Eigen::Index b = 0; b < blocks; ++b) f(b * kBlock, std::min(kBlock, rows - b * kBlock));
}


// out = norm(x), rows [0, rows) of two [*, d_model] buffers, with forward()'s kernel.
void norm_rows(RowMatrixXf& out, const RowMatrixXf& x, Eigen::Index rows, const float* w, const float* b, float eps,
               NormKind kind) {
  by_row_blocks(rows, [&](Eigen::Index r0, Eigen::Index n) {
    RowMatrixXf in = x.middleRows(r0, n), o;
    norm_forward(o, nullptr, in, w, b, eps, kind);
    out.middleRows(r0, n) = o;
  });
}

// x = act(x) in place, rows [0, rows); with a gate, x = act(gate) * x (gated_activation_forward's
// bits: the activation, then the product).
void activation_rows(RowMatrixXf& x, const RowMatrixXf* gate, Eigen::Index rows, Activation act) {
  by_row_blocks(rows, [&](Eigen::Index r0, Eigen::Index n) {
    float* p = x.data() + r0 * x.cols();
    const int64_t count = n * x.cols();
    if (!gate) return activation_forward(p, p, count, act);
    std::vector<float> a(static_cast<size_t>(count));
    activation_forward(a.data(), gate->data() + r0 * gate->cols(), count, act);
    for (int64_t i = 0; i < count; ++i) p[i] = a[static_cast<size_t>(i)] * p[i];
  });
}

// out rows [0, rows) = x rows [0, rows) @ W + b: linear_forward's product, into kept buffers.
// The buffers live for a whole group: sized anew per layer, the large ones were fresh pages from
// the kernel every time (glibc maps large blocks; forward.cpp fixes that threshold).
void gemm_rows(RowMatrixXf& out, const RowMatrixXf& x, Eigen::Index rows, const PackedMatrix& W, const float* b) {
  packed_gemm(rows, x.data(), x.cols(), W, 0, W.rows(), b, out.data(), out.cols());
}

struct Cell {
  int layer = 0;
  int index = 0;  // position, or head for z
};

class Sweep {
 public:
  Sweep(const ActivationCache& clean, const ActivationCache& corrupt, int32_t answer, int32_t wrong, HookPoint what,
        const SweepControl& control)
      : K_(clean), C_(corrupt), W_(*corrupt.weights()), c_(corrupt.config()), what_(what), control_(control) {
    S_ = corrupt.n_pos();
    if (c_.architecture.positions == PositionKind::Rotary)
      rotary_tables(rotary_cos_, rotary_sin_, rotary_inv_freq(c_.architecture.rotary), 0, S_);
    cols_ = what == HookPoint::Z ? c_.n_heads : S_;
    answer_row_.resize(c_.d_model);
    wrong_row_.resize(c_.d_model);
    W_.unembed_row(answer, answer_row_.data());
    W_.unembed_row(wrong, wrong_row_.data());
    m_corrupt_ = logit_difference(corrupt, answer, wrong);
    raw_ = RowMatrixXf::Constant(c_.n_layers, cols_, m_corrupt_);
  }

  RowMatrixXf run(int* recomputed) {
    std::vector<Cell> cells;
    for (int l = 0; l < c_.n_layers; ++l)
      for (int i = 0; i < cols_; ++i)
        if (!control_.skip_unchanged || changes_anything(l, i)) cells.push_back({l, i});
    *recomputed = static_cast<int>(cells.size());
    // Work per cell: its rows times the layers it goes through (for progress).
    auto work = [&](const Cell& cell) {
      const double rows = what_ == HookPoint::Z ? S_ : S_ - cell.index;
      return rows * (c_.n_layers - cell.layer);
    };
    for (const Cell& cell : cells) total_work_ += work(cell);
    // Groups of cells in order (by layer, then position or head), each within the row budget:
    // the working set is about rows x (6 d_model + 2 d_mlp) floats, and a group streams the
    // weights once per layer.
    const Eigen::Index max_rows = std::max<int64_t>(1, control_.max_group_rows);
    size_t begin = 0;
    while (begin < cells.size()) {
      size_t end = begin;
      Eigen::Index rows = 0;
      while (end < cells.size()) {
        const Eigen::Index r = what_ == HookPoint::Z ? S_ : S_ - cells[end].index;
        if (end > begin && rows + r > max_rows) break;
        rows += r;
        ++end;
      }
      run_group(std::vector<Cell>(cells.begin() + static_cast<long>(begin), cells.begin() + static_cast<long>(end)));
      begin = end;
    }
    return raw_;
  }

 private:
  struct Member {
    int layer, index;     // its cell
    int first;            // first position that differs from the corrupted run
    Eigen::Index row0;    // its first row in the stacked matrices
  };

  // Whether patching cell (l, i) copies anything that differs from the corrupted run.
  bool changes_anything(int l, int i) const {
    const PositionRows& k = at_hook(K_, what_, l);
    const PositionRows& c = at_hook(C_, what_, l);
    if (what_ == HookPoint::Z) {
      const Eigen::Index dh = c_.d_head;
      for (Eigen::Index p = 0; p < k.rows(); ++p)
        if (k.row(p).segment(i * dh, dh) != c.row(p).segment(i * dh, dh)) return true;
      return false;
    }
    return k.row(i) != c.row(i);
  }

  void check_cancel() const {
    if (control_.cancelled && control_.cancelled()) throw Cancelled();
  }
  void report(double work) {
    done_work_ += work;
    if (control_.progress && total_work_ > 0) control_.progress(std::min(1.0, done_work_ / total_work_));
  }

  // The metric of final residual rows: the final norm, then two unembedding rows. Each logit is
  // one chain of multiply-adds in d_model order from 0, as packed_gemm computes a logit, so an
  // unpatched row gives the bits of the corrupted run's own logits.
  void score(const RowMatrixXf& final_rows, const std::vector<Cell>& cells) {
    RowMatrixXf ln;
    norm_forward(ln, nullptr, final_rows, W_.final_norm_w(), W_.final_norm_b(), c_.norm_eps, c_.architecture.norm);
    for (Eigen::Index r = 0; r < ln.rows(); ++r) {
      float a = 0.0f, b = 0.0f;
      for (Eigen::Index k = 0; k < ln.cols(); ++k) {
        a += ln(r, k) * answer_row_[static_cast<size_t>(k)];
        b += ln(r, k) * wrong_row_[static_cast<size_t>(k)];
      }
      raw_(cells[static_cast<size_t>(r)].layer, cells[static_cast<size_t>(r)].index) = a - b;
    }
  }

  // Attention of member m (A rows [row0, row0 + S - first) of qkv) over the corrupted run's keys
  // and values before `first` and its own after; writes its z rows (or, when last_only, its last
  // row into z row `out_row`).
  void attend(const Member& m, int l, const RowMatrixXf& qkv, RowMatrixXf& z, Eigen::Index out_row, bool last_only,
              RowMatrixXf& K, RowMatrixXf& V, RowMatrixXf& pattern) const {
    const Eigen::Index S = S_, p = m.first, n = S - p, dh = c_.d_head;
    const Eigen::Index q_width = Eigen::Index{c_.n_heads} * dh, kv_width = Eigen::Index{c_.n_key_value_heads} * dh;
    const LayerActivations& a = C_.layer(l);
    K.resize(S, kv_width);
    V.resize(S, kv_width);
    K.topRows(p) = a.k.middle_rows(0, p);
    V.topRows(p) = a.v.middle_rows(0, p);
    K.bottomRows(n) = qkv.block(m.row0, q_width, n, kv_width);
    V.bottomRows(n) = qkv.block(m.row0, q_width + kv_width, n, kv_width);
    const float scale = C_.attention_scale(l);
    const Eigen::Index q0 = last_only ? n - 1 : 0, nq = n - q0;
    for (int h = 0; h < c_.n_heads; ++h) {
      const int kv = c_.kv_head(h);
      pattern.resize(nq, S);
      head_scores_forward(pattern.data(), S, qkv.data() + (m.row0 + q0) * qkv.cols() + Eigen::Index{h} * dh, qkv.cols(),
                          nq, p + q0, K.data() + kv * dh, K.cols(), S, dh);
      for (Eigen::Index r = 0; r < nq; ++r) {
        const Eigen::Index i = p + q0 + r;  // the query's position
        scaled_softmax_forward(pattern.row(r).data(), i + 1, scale);
        pattern.row(r).tail(S - i - 1).setZero();
      }
      const Eigen::Index zr = last_only ? out_row : m.row0;
      head_mix_forward(z.data() + zr * z.cols() + Eigen::Index{h} * dh, z.cols(), pattern.data(), S, nq, p + q0,
                       V.data() + kv * dh, V.cols(), S, dh);
    }
  }

  void run_group(const std::vector<Cell>& cells) {
    const int L = c_.n_layers;
    const Eigen::Index S = S_, D = c_.d_model, HD = Eigen::Index{c_.n_heads} * c_.d_head;
    // The most rows the group stacks: every cell's rows, and an attn_out cell's extra row.
    Eigen::Index max_rows = 0;
    int first_layer = L;
    for (const Cell& cell : cells) {
      max_rows += (what_ == HookPoint::Z ? S : S - cell.index) + (what_ == HookPoint::AttnOut ? 1 : 0);
      first_layer = std::min(first_layer, cell.layer);
    }
    const bool rotary = c_.architecture.positions == PositionKind::Rotary;
    const bool gated = c_.architecture.mlp == MlpKind::Gated;
    RowMatrixXf resid(max_rows, D), ln(max_rows, D), qkv(max_rows, W_.packed(0).W_qkv.cols()), z(max_rows, HD),
        attn(max_rows, D), hidden(max_rows, c_.d_mlp), out(max_rows, D), gate(gated ? max_rows : 0, c_.d_mlp);
    // Fresh memory for every sweep: in huge pages it faults in far less often (docs/benchmarks.md,
    // "Measurements behind the code").
    for (RowMatrixXf* m : {&resid, &ln, &qkv, &z, &attn, &hidden, &out})
      advise_huge_pages(m->data(), static_cast<size_t>(m->size()) * sizeof(float));
    RowMatrixXf last_resid;            // the last layer's rows: one per member, then the extra rows
    std::vector<Member> members;       // continuing members, in row order
    Eigen::Index n_cont = 0;           // their rows, at the top of resid
    std::vector<Cell> seeds;           // attn_out cells whose patched row went through the last MLP
    RowMatrixXf seed_rows;             // [seeds, d_model] their resid_post rows
    std::vector<RowMatrixXf> scratch(static_cast<size_t>(3 * std::max(1, omp_get_max_threads())));

    for (int l = first_layer; l < L; ++l) {
      check_cancel();
      const LayerWeights& Wl = W_.layer(l);
      const PackedLayer& WP = W_.packed(l);
      const LayerActivations& Cl = C_.layer(l);
      const LayerActivations& Kl = K_.layer(l);
      const bool last = l == L - 1;

      // New members at hook_resid_pre of layer l: a resid_pre patch at l, or an mlp_out or
      // attn_out patch at l - 1 (whose patched row is now part of this layer's input).
      std::vector<std::pair<Member, RowVectorXf>> entering;  // member, its row at `first`
      for (const Cell& cell : cells) {
        if (what_ == HookPoint::ResidPre && cell.layer == l)
          entering.push_back({{cell.layer, cell.index, cell.index, 0}, Kl.resid_pre.row(cell.index)});
        if (what_ == HookPoint::MlpOut && cell.layer == l - 1) {
          const LayerActivations& Cp = C_.layer(l - 1);
          RowVectorXf r = Cp.resid_pre.row(cell.index) + Cp.attn_out.row(cell.index);  // resid_mid
          r += K_.layer(l - 1).mlp_out.row(cell.index);
          entering.push_back({{cell.layer, cell.index, cell.index, 0}, r});
        }
      }
      for (size_t i = 0; i < seeds.size(); ++i)
        entering.push_back({{seeds[i].layer, seeds[i].index, seeds[i].index, 0}, seed_rows.row(static_cast<Eigen::Index>(i))});
      seeds.clear();
      // New members after hook_z of layer l: a z patch (one head, every position).
      std::vector<Cell> z_cells;
      for (const Cell& cell : cells)
        if (what_ == HookPoint::Z && cell.layer == l) z_cells.push_back(cell);
      // attn_out patches at layer l: their one row needs this layer's MLP (at the last layer only
      // the last position's matters; another leaves the last position as in the corrupted run).
      std::vector<Cell> extra_cells;
      for (const Cell& cell : cells)
        if (what_ == HookPoint::AttnOut && cell.layer == l && (!last || cell.index == S - 1)) extra_cells.push_back(cell);
      // mlp_out patches at the last layer change only their own position's final residual.
      if (what_ == HookPoint::MlpOut && last) {
        std::vector<Cell> final_cells;
        for (const Cell& cell : cells)
          if (cell.layer == l && cell.index == S - 1) final_cells.push_back(cell);
        if (!final_cells.empty()) {
          RowMatrixXf r = Cl.resid_pre.row(S - 1) + Cl.attn_out.row(S - 1);
          r += Kl.mlp_out.row(S - 1);
          score(r, final_cells);
        }
      }

      // Stack below the continuing rows: entering members (A), z members (Z), extra rows.
      Eigen::Index rows_a = n_cont;
      for (auto& [m, first_row] : entering) {
        const Eigen::Index n = S - m.first;
        m.row0 = rows_a;
        resid.middleRows(rows_a, n) = Cl.resid_pre.middle_rows(m.first, n);
        resid.row(rows_a) = first_row;
        members.push_back(m);
        rows_a += n;
      }
      const size_t n_a = members.size();
      const Eigen::Index rows_z = static_cast<Eigen::Index>(z_cells.size()) * S;
      for (size_t i = 0; i < z_cells.size(); ++i) {
        const Eigen::Index r0 = rows_a + static_cast<Eigen::Index>(i) * S;
        resid.middleRows(r0, S) = Cl.resid_pre.to_matrix();
        members.push_back({z_cells[i].layer, z_cells[i].index, 0, r0});
      }
      const Eigen::Index rows_e = static_cast<Eigen::Index>(extra_cells.size());
      for (size_t i = 0; i < extra_cells.size(); ++i) {
        const int p = extra_cells[i].index;
        resid.row(rows_a + rows_z + static_cast<Eigen::Index>(i)) = Cl.resid_pre.row(p) + Kl.attn_out.row(p);
      }
      const size_t n_members = members.size();
      if (n_members == 0 && rows_e == 0) continue;

      // z of every member: attention for the A rows, the patched z for the Z rows. In the last
      // layer only each member's last row, packed one row per member.
      if (rows_a > 0) {
        norm_rows(ln, resid, rows_a, Wl.norm1_w, Wl.norm1_b, c_.norm_eps, c_.architecture.norm);
        gemm_rows(qkv, ln, rows_a, WP.W_qkv, Wl.b_qkv);  // [A rows, Q | K | V]
        if (rotary) {
          // Each member's rows are positions first .. S-1: their queries and keys turned by those
          // positions' angles, as forward() turns them.
          const Eigen::Index q_width = Eigen::Index{c_.n_heads} * c_.d_head;
          const Eigen::Index kv_width = Eigen::Index{c_.n_key_value_heads} * c_.d_head;
          const int dim = c_.architecture.rotary.dim;
          for (size_t i = 0; i < n_a; ++i) {
            const Member& m = members[i];
            const Eigen::Index n = S - m.first;
            rotary_forward(qkv.block(m.row0, 0, n, q_width), c_.n_heads, c_.d_head, dim,
                           rotary_cos_.middleRows(m.first, n), rotary_sin_.middleRows(m.first, n));
            rotary_forward(qkv.block(m.row0, q_width, n, kv_width), c_.n_key_value_heads, c_.d_head, dim,
                           rotary_cos_.middleRows(m.first, n), rotary_sin_.middleRows(m.first, n));
          }
        }
        check_cancel();
#pragma omp parallel for schedule(dynamic)
        for (size_t i = 0; i < n_a; ++i) {
          const size_t t = static_cast<size_t>(omp_get_thread_num()) * 3;
          attend(members[i], l, qkv, z, static_cast<Eigen::Index>(i), last, scratch[t], scratch[t + 1], scratch[t + 2]);
        }
      }
      for (size_t i = 0; i < z_cells.size(); ++i) {
        const Eigen::Index dh = c_.d_head, c0 = Eigen::Index{z_cells[i].index} * dh;
        if (last) {
          const Eigen::Index r = static_cast<Eigen::Index>(n_a + i);
          z.row(r) = Cl.z.row(S - 1);
          z.row(r).segment(c0, dh) = Kl.z.row(S - 1).segment(c0, dh);
        } else {
          const Eigen::Index r0 = rows_a + static_cast<Eigen::Index>(i) * S;
          z.middleRows(r0, S) = Cl.z.to_matrix();
          z.block(r0, c0, S, dh) = Kl.z.middle_cols(c0, dh);
        }
      }

      // The rows that go on through W_O and the MLP: all of them, or in the last layer each
      // member's last row and the extra rows, gathered compactly.
      RowMatrixXf* work = &resid;
      Eigen::Index rows_z_out = rows_a + rows_z, rows_all = rows_a + rows_z + rows_e;
      if (last) {
        last_resid.resize(static_cast<Eigen::Index>(n_members) + rows_e, D);
        for (size_t i = 0; i < n_members; ++i) {
          const Member& m = members[i];
          last_resid.row(static_cast<Eigen::Index>(i)) = resid.row(m.row0 + (S - m.first) - 1);
        }
        last_resid.bottomRows(rows_e) = resid.middleRows(rows_a + rows_z, rows_e);
        work = &last_resid;
        rows_z_out = static_cast<Eigen::Index>(n_members);
        rows_all = last_resid.rows();
      }
      RowMatrixXf& w = *work;
      gemm_rows(attn, z, rows_z_out, WP.W_O, Wl.b_O);
      w.topRows(rows_z_out) += attn.topRows(rows_z_out);  // resid_mid
      check_cancel();

      norm_rows(ln, w, rows_all, Wl.norm2_w, Wl.norm2_b, c_.norm_eps, c_.architecture.norm);
      gemm_rows(hidden, ln, rows_all, WP.W_in, Wl.b_in);  // plain: pre; gated: the up projection
      if (gated) gemm_rows(gate, ln, rows_all, WP.W_gate, Wl.b_gate);
      activation_rows(hidden, gated ? &gate : nullptr, rows_all, c_.activation);
      gemm_rows(out, hidden, rows_all, WP.W_out, Wl.b_out);
      w.topRows(rows_all) += out.topRows(rows_all);  // resid_post

      if (last) {
        std::vector<Cell> scored;
        for (const Member& m : members) scored.push_back({m.layer, m.index});
        for (const Cell& e : extra_cells) scored.push_back(e);
        score(last_resid, scored);
      } else {
        // Every member continues at hook_resid_pre of the next layer, in the same row order;
        // the extra rows' patched resid_post enters there as new members.
        n_cont = rows_a + rows_z;
        seeds = extra_cells;
        seed_rows = resid.middleRows(n_cont, rows_e);
      }
      report(static_cast<double>(rows_a + rows_z + rows_e));
    }
  }

  const ActivationCache& K_;  // clean
  const ActivationCache& C_;  // corrupted
  const Weights& W_;
  const ModelConfig& c_;
  HookPoint what_;
  const SweepControl& control_;
  Eigen::Index S_ = 0;
  int cols_ = 0;
  std::vector<float> answer_row_, wrong_row_;
  RowMatrixXf rotary_cos_, rotary_sin_;  // [pos, rotary dim / 2]: every position's angles, with rotary
  float m_corrupt_ = 0.0f;
  RowMatrixXf raw_;
  double total_work_ = 0.0, done_work_ = 0.0;
};

std::string token_list(const Model& model, const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += " + ";
    s += "\"" + model.tokenizer().display(ids[i]) + "\"";
  }
  return s;
}

}  // namespace

void check_patching_runs(const ActivationCache& clean, const ActivationCache& corrupt) {
  if (clean.weights() != corrupt.weights())
    throw Error("the clean and corrupted runs were made with different models; run both prompts on one model.");
  if (clean.n_pos() != corrupt.n_pos())
    throw Error("the clean prompt is " + std::to_string(clean.n_pos()) + " tokens and the corrupted prompt " +
                std::to_string(corrupt.n_pos()) +
                "; patching copies activations position by position, so both must have the same number of tokens.");
  if (clean.n_layer() == 0 || corrupt.n_layer() == 0)
    throw Error("patching needs the runs' activations, but a run kept only its logits.");
  if (!clean.interventions.empty() || !corrupt.interventions.empty())
    throw Error("patching compares plain runs of the two prompts; these runs were made with ablations or patches.");
}

void check_patching_metrics(float m_clean, float m_corrupt, std::string_view metric) {
  if (!std::isfinite(m_clean) || !std::isfinite(m_corrupt))
    throw Error("the metric is not a finite number on one of the prompts (the model's logits overflowed).");
  if (m_clean == m_corrupt)
    throw Error(std::string(metric) + " is the same on both prompts, so there is no difference for patching to "
                "restore; choose prompts or answers that the model tells apart.");
}

int32_t single_token(const Model& model, std::string_view text, std::string_view role) {
  const std::vector<int32_t> ids = model.encode(text, false);
  if (ids.size() == 1) return ids.front();
  if (ids.empty()) throw Error(std::string(role) + " is empty; give the text of one token (often with a leading space, as \" Paris\").");
  throw Error(std::string(role) + " \"" + std::string(text) + "\" is " + std::to_string(ids.size()) + " tokens (" +
              token_list(model, ids) + "); it must be exactly one token (often with a leading space, as \" Paris\").");
}

PatchingInputs patching_inputs(const Model& model, std::string_view clean, std::string_view corrupt,
                               std::string_view answer, std::string_view wrong, bool prepend_bos) {
  PatchingInputs in;
  in.clean = model.encode(clean, prepend_bos);
  in.corrupt = model.encode(corrupt, prepend_bos);
  if (in.clean.empty()) throw Error("the clean prompt is empty; type a prompt.");
  if (in.corrupt.empty()) throw Error("the corrupted prompt is empty; type a prompt with as many tokens as the clean one.");
  if (in.clean.size() != in.corrupt.size())
    throw Error("the clean prompt is " + std::to_string(in.clean.size()) + " tokens and the corrupted prompt " +
                std::to_string(in.corrupt.size()) + (prepend_bos ? " (BOS included)" : "") +
                "; patching copies activations position by position, so both must have the same number of tokens.");
  in.answer = single_token(model, answer, "the answer");
  in.wrong = single_token(model, wrong, "the wrong answer");
  if (in.answer == in.wrong)
    throw Error("the answer and the wrong answer are the same token; the metric would always be 0.");
  return in;
}

float logit_difference(const ActivationCache& cache, int32_t answer, int32_t wrong) {
  const Eigen::Index last = cache.n_pos() - 1;
  return cache.logits(last, answer) - cache.logits(last, wrong);
}

PatchingResult patching_sweep(const ActivationCache& clean, const ActivationCache& corrupt, int32_t answer,
                              int32_t wrong, HookPoint what, const SweepControl& control) {
  check_pair(clean, corrupt, answer, wrong);
  const ModelConfig& c = corrupt.config();
  if (!batched_layers_support(c)) {
    // Full runs need owning pointers; the caches are the caller's, kept alive for the call.
    std::shared_ptr<const ActivationCache> k(std::shared_ptr<const ActivationCache>{}, &clean);
    std::shared_ptr<const ActivationCache> cc(std::shared_ptr<const ActivationCache>{}, &corrupt);
    return patching_sweep_full_runs(k, cc, answer, wrong, what, control);
  }
  PatchingResult r;
  r.what = what;
  r.metric_clean = logit_difference(clean, answer, wrong);
  r.metric_corrupt = logit_difference(corrupt, answer, wrong);
  check_patching_metrics(r.metric_clean, r.metric_corrupt);
  const ThreadScope threads(control.threads > 0 ? control.threads : omp_get_num_procs());
  Sweep sweep(clean, corrupt, answer, wrong, what, control);
  r.raw = sweep.run(&r.recomputed_runs);
  r.normalized = normalize(r.raw, r.metric_clean, r.metric_corrupt);
  if (control.progress) control.progress(1.0);
  return r;
}

PatchingResult patching_sweep_full_runs(std::shared_ptr<const ActivationCache> clean,
                                        std::shared_ptr<const ActivationCache> corrupt, int32_t answer, int32_t wrong,
                                        HookPoint what, const SweepControl& control) {
  check_pair(*clean, *corrupt, answer, wrong);
  const ModelConfig& c = corrupt->config();
  PatchingResult r;
  r.what = what;
  r.batched = false;
  r.metric_clean = logit_difference(*clean, answer, wrong);
  r.metric_corrupt = logit_difference(*corrupt, answer, wrong);
  check_patching_metrics(r.metric_clean, r.metric_corrupt);
  const int cols = what == HookPoint::Z ? c.n_heads : corrupt->n_pos();
  r.raw.resize(c.n_layers, cols);
  RunOptions o;
  o.logits_only = true;
  o.threads = control.threads;
  for (int l = 0; l < c.n_layers; ++l)
    for (int i = 0; i < cols; ++i) {
      if (control.cancelled && control.cancelled()) throw Cancelled();
      o.interventions = {patch_from(clean, what, l, i)};
      const auto run = forward(corrupt->weights(), corrupt->tokens(), o);
      r.raw(l, i) = logit_difference(*run, answer, wrong);
      ++r.recomputed_runs;
      if (control.progress) control.progress(static_cast<double>(l * cols + i + 1) / (c.n_layers * cols));
    }
  r.normalized = normalize(r.raw, r.metric_clean, r.metric_corrupt);
  return r;
}

}  // namespace hs
