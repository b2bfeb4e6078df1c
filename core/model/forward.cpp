// The forward pass. Read top to bottom, this file is the model: embeddings, then per block
// norm -> attention (queries and keys rotated with rotary positions) -> residual add -> norm ->
// MLP (plain or gated) -> residual add, then the final norm and the unembedding. Every
// intermediate lands in the ActivationCache. The architecture description (architecture.h) says
// which variant runs, decided once per run and per layer, never per element; options it does not
// implement are refused before anything is computed (require_implemented).
//
// The pass computes positions [P, S) given a cache whose rows [0, P) are already filled (P = 0
// for a fresh run, P > 0 when a typed prompt extends the previous one).
#include "core/model/forward.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "core/model/ops.h"
#include "core/model/thread_scope.h"

namespace hs {
namespace {

#if defined(__GLIBC__)
// glibc serves a large block with mmap and returns it on free, but after the first such free it
// raises its mmap threshold to that block's size, and later blocks of the same size come from
// the heap, which keeps freed memory resident. A forward pass at long context allocates and
// frees several multi-megabyte temporaries per layer: fixing the threshold (which also turns
// the adjustment off) lowers the peak resident memory of a long run at no cost in time.
//
// Fixing it also fixes the trim threshold at its small default: each run's freed cache was
// handed back to the kernel and the next run faulted it in again, zeroed. The heap now keeps
// some freed memory for the next run, as a tensor library's caching allocator would.
// (docs/benchmarks.md has the figures of both.)
constexpr int kMmapThresholdBytes = 4 << 20;
constexpr int kTrimThresholdBytes = 64 << 20;
[[maybe_unused]] const bool kMallocTuned = [] {
  return mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
}();
#endif

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Attention is the only layer that mixes information across positions. For each head and each
// new query i in [P, S): scores = q_h[i] k_kv^T * scale over keys 0..i, pattern = softmax(scores),
// z_h[i] = pattern v_kv, where kv = c.kv_head(h) is the key/value head that h shares. `q_new` holds
// the new queries [S - P, n_heads*d_head]; keys and values are read from the cache's position
// blocks, one block of keys at a time, and z of the new positions goes to `z_new`.
// `scratch` holds one [new pos, pos] buffer per OpenMP thread, reused across heads and layers:
// a fresh one per head was, at long context, an allocation that glibc served by mmap, each
// faulting in and zeroing new pages.
struct LayerHooks;
// What a layer's attention does to q.k besides the causal mask (ActivationCache::attention_*).
struct AttentionOptions {
  float scale;    // times q.k
  float softcap;  // cap * tanh(s / cap) when > 0
  int window;     // keys q - window < k <= q when > 0
};
void edit_pattern(const LayerHooks& hooks, int h, RowMatrixXf& pattern, Eigen::Index P);

// A thread's packed keys and values of one key/value head: the query heads that share it (grouped-
// query attention puts 4-8 on each, and a thread's heads are consecutive) pack it once. Emptied at
// the start of each layer's attention, since the same buffers then hold other keys.
struct KVPanels {
  std::vector<float> keys, values;
  int64_t keys_of = -1, values_of = -1;  // the caller's id of the kv head they hold, or -1
  static KVPanels& of_this_thread() {
    thread_local KVPanels panels;
    panels.keys_of = panels.values_of = -1;
    return panels;
  }
};

// Head h of one layer for the new queries P .. S-1 (q_new [S - P, n_heads*d_head]): its scores,
// pattern and z. `for_each_key_block(f)` and `for_each_value_block(f)` call f(k0, rows) for the
// key and value rows 0 .. S-1 a position block at a time (rows [n, kv width], the kv head's slice
// at kv * d_head), so a run's cache and a batch's stacked rows give the same products, bit for
// bit. Row i of the pattern goes to pattern_out(i) (i + 1 floats), and the scores to scores_hqk
// ([head, query_pos, key_pos]) when it is not null. `pattern` is [N, S] scratch; `packed` holds
// the kv head's panels when `kv_id` says they are already there.
template <class KeyBlocks, class ValueBlocks, class PatternOut>
void head_attention(int h, KVPanels& packed, int64_t kv_id, const RowMatrixXf& q_new, RowMatrixXf& z_new,
                    RowMatrixXf& pattern, Eigen::Index P, Eigen::Index S, const ModelConfig& c,
                    const AttentionOptions& o, float* scores_hqk,
                    const KeyBlocks& for_each_key_block, const ValueBlocks& for_each_value_block,
                    const PatternOut& pattern_out, const LayerHooks* pattern_edits, bool compute_z = true) {
  const Eigen::Index N = S - P;
  const int d_head = c.d_head, kv = c.kv_head(h);
  const size_t SS = static_cast<size_t>(S * S);
  pattern.resize(N, S);  // [new query_pos, key_pos]; no reallocation when the size is unchanged
  // The keys (as keys^T) and values of the head, packed for packed_gemm_lower: its products cover
  // the causal half only, half the multiply-adds of Eigen's over the whole square and without its
  // packing per product (3.9% of a batched scan before, 2.5% now). `kv_id` names the kv head
  // among the caller's (a batch's prompts have one each).
  if (packed.keys_of != kv_id) {
    packed.keys.resize(static_cast<size_t>(std::max<int64_t>(packed.keys.size(), panel_floats(d_head, S))));
    for_each_key_block([&](Eigen::Index k0, const ConstStridedMatrixRef& keys) {
      pack_transposed_into(packed.keys.data(), d_head, k0, keys.rows(), keys.data() + kv * d_head, keys.outerStride());
    });
    packed.keys_of = kv_id;
  }
  packed_gemm_lower(N, q_new.data() + h * d_head, q_new.cols(), packed.keys.data(), d_head, S, P, LowerLimit::Columns,
                    pattern.data(), S);
  for (Eigen::Index r = 0; r < N; ++r) {
    const Eigen::Index i = P + r;
    // Keys first .. i: the causal mask, and a sliding window's on its layers (q - W < k <= q).
    const Eigen::Index first = first_key(o.window, static_cast<int>(i));
    auto row = pattern.row(r).segment(first, i + 1 - first).array();
    row *= o.scale;
    // Soft-capping comes before the mask (Gemma2's eager_attention_forward).
    if (o.softcap > 0.0f) softcap_forward(row.data(), row.size(), o.softcap);
    if (scores_hqk) std::copy_n(row.data(), row.size(), scores_hqk + h * SS + static_cast<size_t>(i * S + first));
    const float m = row.maxCoeff();
    row = (row - m).exp();
    row /= row.sum();
    pattern.row(r).head(first).setZero();
    pattern.row(r).tail(S - i - 1).setZero();
    std::copy_n(pattern.row(r).data(), i + 1, pattern_out(i));
  }
  if (pattern_edits) {
    // The edited pattern is what multiplies v, and what the cache keeps.
    edit_pattern(*pattern_edits, h, pattern, P);
    for (Eigen::Index r = 0; r < N; ++r) std::copy_n(pattern.row(r).data(), P + r + 1, pattern_out(P + r));
  }
  if (!compute_z) return;
  if (packed.values_of != kv_id) {
    packed.values.resize(static_cast<size_t>(std::max<int64_t>(packed.values.size(), panel_floats(S, d_head))));
    for_each_value_block([&](Eigen::Index k0, const ConstStridedMatrixRef& values) {
      pack_rows_into(packed.values.data(), S, d_head, k0, values.rows(), values.data() + kv * d_head,
                     values.outerStride());
    });
    packed.values_of = kv_id;
  }
  // An edit may weigh any key of a row's pattern, up to the last: then every row reads all S.
  packed_gemm_lower(N, pattern.data(), S, packed.values.data(), S, d_head, pattern_edits ? S : P, LowerLimit::Depth,
                    z_new.data() + h * d_head, z_new.cols());
}

void attention_forward(LayerActivations& a, const RowMatrixXf& q_new, RowMatrixXf& z_new, Eigen::Index P,
                       const ModelConfig& c, const AttentionOptions& o, bool store_scores,
                       std::vector<RowMatrixXf>& scratch, const LayerHooks* pattern_edits) {
  const Eigen::Index S = a.k.rows(), N = S - P;
  const int n_heads = c.n_heads, d_head = c.d_head;
  if (store_scores) a.scores_hqk.assign(static_cast<size_t>(n_heads) * static_cast<size_t>(S * S), kNegInf);
  z_new.resize(N, q_new.cols());
  // Edits of the pattern run on one thread: a callable edit need not be thread-safe.
  //
  // Heads go to threads once the layer's attention is worth a fork (about half a million
  // multiply-adds). Below that they run on one thread. (When each head's two products were
  // Eigen's, Eigen forked its own team for a product of 100k multiply-adds or more: with Gemma's
  // 256-wide heads at 20 tokens that was two forks per head. packed_gemm_lower never forks.) The
  // bits do not change: each head is computed the same way on whichever thread.
  const bool parallel = static_cast<int64_t>(n_heads) * N * S * d_head >= (int64_t{1} << 19) && !pattern_edits;
#pragma omp parallel if (parallel)
  {
    KVPanels& packed = KVPanels::of_this_thread();
#pragma omp for schedule(static)
    for (int h = 0; h < n_heads; ++h) {
      head_attention(h, packed, c.kv_head(h), q_new, z_new, scratch[static_cast<size_t>(omp_get_thread_num())], P, S,
                     c, o, store_scores ? a.scores_hqk.data() : nullptr,
                     [&](const auto& f) { a.k.for_each_block(0, S, f); },
                     [&](const auto& f) { a.v.for_each_block(0, S, f); },
                     [&](Eigen::Index i) { return a.pattern.mutable_row(h, i); }, pattern_edits);
    }
  }
}

void check_tokens(const ModelConfig& c, std::span<const int32_t> tokens) {
  if (tokens.empty()) throw Error("the prompt is empty: give at least one token (with --text, BOS is added).");
  if (tokens.size() > static_cast<size_t>(c.n_ctx))
    throw Error("the prompt is " + std::to_string(tokens.size()) + " tokens but this model's context is " +
                std::to_string(c.n_ctx) + " (n_positions); shorten the text.");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.d_vocab)
      throw Error("token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.d_vocab) + ").");
}

// How many leading positions of `previous` can be reused for `tokens`.
Eigen::Index reusable_prefix(const ActivationCache* previous, const Weights* weights, std::span<const int32_t> tokens,
                             const RunOptions& o) {
  if (!previous || previous->weights().get() != weights || !cache_covers(*previous, o)) return 0;
  if (!prefix_stable(o.interventions)) return 0;
  const auto& old = previous->tokens();
  size_t p = 0;
  while (p < old.size() && p < tokens.size() && old[p] == tokens[p]) ++p;
  // Always recompute the last position, so a run of the very same tokens still runs.
  return static_cast<Eigen::Index>(std::min(p, tokens.size() - 1));
}

// A layer's interventions, by hook (intervention.h). Built once per run; a plain run has none
// and its layers never look further than the empty test.
struct LayerHooks {
  std::vector<const Intervention*> at[kHookCount];  // indexed by HookPoint
  const std::vector<const Intervention*>& operator[](HookPoint h) const { return at[static_cast<int>(h)]; }
  bool edits(HookPoint h) const { return !at[static_cast<int>(h)].empty(); }
};

struct RunHooks {
  LayerHooks model;                // hook_embed, hook_pos_embed
  std::vector<LayerHooks> layers;  // empty for a plain run
};

RunHooks hooks_by_layer(const Interventions& interventions, int n_layers) {
  RunHooks out;
  if (interventions.empty()) return out;
  out.layers.resize(static_cast<size_t>(n_layers));
  for (const Intervention& i : interventions) {
    LayerHooks& at = hook_info(i.hook).per_layer ? out.layers[static_cast<size_t>(i.layer)] : out.model;
    at.at[static_cast<int>(i.hook)].push_back(&i);
  }
  return out;
}

// Rows [first, first + n) of `hook` at layer l of `source`, as a patch copies them.
RowMatrixXf source_rows(const ActivationCache& source, HookPoint hook, int l, Eigen::Index first, Eigen::Index n) {
  if (const PositionRows* stored = source.stored_rows(hook, l)) return stored->middle_rows(first, n);
  return source.rows(hook, l).middleRows(first, n);
}

// Edits the new rows [P, S) of an activation (`rows`: [S - P, width]) as `hooks` say: the unit's
// columns (a head's d_head, a neuron's one) or the whole row; at one position or all of them.
// A mean is over every position, so it runs only with P = 0 (reusable_prefix sees to that).
void apply_hooks(const std::vector<const Intervention*>& hooks, Eigen::Ref<RowMatrixXf> rows, Eigen::Index P,
                 const ModelConfig& c) {
  for (const Intervention* i : hooks) {
    const Eigen::Index unit_width = hook_unit_width(c, i->hook, P + rows.rows());
    const Eigen::Index c0 = i->head >= 0 ? Eigen::Index{i->head} * unit_width : 0;
    const Eigen::Index width = i->head >= 0 ? unit_width : rows.cols();
    Eigen::Index r0 = 0, n = rows.rows();
    if (i->pos >= 0) {
      if (i->pos < P) continue;  // in the reused prefix, which was made with the same edit
      r0 = i->pos - P;
      n = 1;
    }
    auto block = rows.block(r0, c0, n, width);
    switch (i->kind) {
      case InterventionKind::Zero:
        block.setZero();
        break;
      case InterventionKind::Mean: {
        const RowVectorXf mean = block.colwise().mean();
        block.rowwise() = mean;
        break;
      }
      case InterventionKind::Patch:
        block = source_rows(*i->source, i->hook, i->layer, P + r0, n).middleCols(c0, width);
        break;
      case InterventionKind::Add: {
        const RowVectorXf add = ConstRowVectorRef(i->vector->data(), width) * i->scale;
        block.rowwise() += add;
        break;
      }
      case InterventionKind::Call:
        i->call->edit(block, P + r0);
        break;
    }
  }
}

// Edits head h's new pattern rows ([S - P, S]: query positions P.., every key) as the layer's
// attn.hook_pattern interventions say. Zero, patch (the source's row of the same head and
// query), or a callable, after which the keys above the diagonal are set back to zero.
void edit_pattern(const LayerHooks& hooks, int h, RowMatrixXf& pattern, Eigen::Index P) {
  const Eigen::Index N = pattern.rows(), S = pattern.cols();
  for (const Intervention* i : hooks[HookPoint::Pattern]) {
    if (i->head >= 0 && i->head != h) continue;
    Eigen::Index r0 = 0, n = N;
    if (i->pos >= 0) {
      if (i->pos < P) continue;
      r0 = i->pos - P;
      n = 1;
    }
    switch (i->kind) {
      case InterventionKind::Zero:
        pattern.middleRows(r0, n).setZero();
        break;
      case InterventionKind::Patch:
        for (Eigen::Index r = r0; r < r0 + n; ++r)
          pattern.row(r).head(P + r + 1) = i->source->pattern_row(i->layer, h, static_cast<int>(P + r));
        break;
      case InterventionKind::Call:
        i->call->edit(pattern.middleRows(r0, n), P + r0);
        for (Eigen::Index r = r0; r < r0 + n; ++r) pattern.row(r).tail(S - (P + r) - 1).setZero();
        break;
      case InterventionKind::Mean:
      case InterventionKind::Add:
        break;  // refused by check_interventions
    }
  }
}

// A norm after a block's attention or MLP (Architecture::post_attn_norm, post_mlp_norm), in place.
void post_norm(RowMatrixXf& rows, const float* w, const ModelConfig& c) {
  RowMatrixXf normalized;
  norm_forward(normalized, nullptr, rows, w, nullptr, c.norm_eps, c.architecture.norm);
  rows.swap(normalized);
}

// Keeps the edited rows of a key the cache would otherwise derive (its derivation misses the edit).
void store_edited(PositionRows& into, const PositionRows* previous, Eigen::Index P, Eigen::Index S,
                  const ConstStridedRowsRef& rows) {
  into.extend(previous, P, S, rows.cols());
  into.set_rows(P, rows);
}

}  // namespace

int auto_threads(const ModelConfig& config, int n_tokens) {
  // Multiply-adds of the run, roughly: parameters x tokens. Below ~2e8 (a forward pass of a
  // millisecond or two) one thread wins on a quiet machine and wins by far on a busy one.
  const double params = static_cast<double>(config.parameter_count());
  const double work = params * n_tokens;
  // Unless the weights are too large for the caches: then even one new token (a typed key) is a
  // stream of every weight from memory, and each core adds bandwidth (docs/benchmarks.md, "A
  // typed key on GPT-2 small uses both cores").
  const bool streams_weights = params * sizeof(float) >= 64.0 * (1 << 20);
  return work < 2e8 && !streams_weights ? 1 : omp_get_num_procs();
}

bool cache_covers(const ActivationCache& cache, const RunOptions& o) {
  if (o.logits_only || cache.n_layer() == 0) return false;
  const LayerActivations& l0 = cache.layer(0);
  const bool has_pre = !l0.mlp_pre.empty() && (!cache.has_gated_mlp() || !l0.mlp_pre_linear.empty());
  return (!o.store_scores || !l0.scores_hqk.empty()) && (!o.store_results || !l0.result_phd.empty()) &&
         (!o.store_mlp_pre || has_pre) && cache.interventions == o.interventions;
}

std::shared_ptr<ActivationCache> forward(std::shared_ptr<const Weights> weights, std::span<const int32_t> tokens,
                                         const RunOptions& options, std::shared_ptr<const ActivationCache> previous) {
  const ModelConfig& c = weights->config();
  require_implemented(c);
  check_tokens(c, tokens);
  if (!options.interventions.empty()) check_interventions(options.interventions, *weights, static_cast<int>(tokens.size()));
  const RunHooks hooks = hooks_by_layer(options.interventions, c.n_layers);
  const bool edited = !hooks.layers.empty();
  const Eigen::Index P = reusable_prefix(previous.get(), weights.get(), tokens, options);
  const ThreadScope threads(options.threads > 0 ? options.threads
                                                : auto_threads(c, static_cast<int>(tokens.size() - static_cast<size_t>(P))));
  const ActivationCache* prev = P > 0 ? previous.get() : nullptr;
  auto cache = std::make_shared<ActivationCache>(weights, std::vector<int32_t>(tokens.begin(), tokens.end()));
  cache->reused_prefix = static_cast<int>(P);
  cache->interventions = options.interventions;
  const Eigen::Index S = static_cast<Eigen::Index>(tokens.size()), N = S - P, D = c.d_model, H = c.n_heads;
  const Eigen::Index q_width = H * c.d_head, kv_width = Eigen::Index{c.n_key_value_heads} * c.d_head;

  // hook_embed [pos, d_model], and hook_pos_embed [pos, d_model] with learned positions
  cache->embed.extend(prev ? &prev->embed : nullptr, P, S, D);
  for (Eigen::Index i = P; i < S; ++i) weights->embedding_row(tokens[static_cast<size_t>(i)], cache->embed.mutable_row(i));
  RowMatrixXf resid = cache->embed.middle_rows(P, N);  // [new pos, d_model]
  if (edited && hooks.model.edits(HookPoint::Embed)) {
    apply_hooks(hooks.model[HookPoint::Embed], resid, P, c);
    cache->embed.set_rows(P, resid);
  }
  if (cache->has_pos_embed()) {
    cache->pos_embed.extend(prev ? &prev->pos_embed : nullptr, P, S, D);
    const ConstMatrixRef positions(weights->W_pos() + P * D, N, D);
    if (edited && hooks.model.edits(HookPoint::PosEmbed)) {
      RowMatrixXf edited_positions = positions;
      apply_hooks(hooks.model[HookPoint::PosEmbed], edited_positions, P, c);
      cache->pos_embed.set_rows(P, edited_positions);
      resid += edited_positions;
    } else {
      cache->pos_embed.set_rows(P, positions);
      resid += positions;
    }
  }

  // The block's variant: the norm's kind, whether queries and keys are rotated (with the angles of
  // the new positions, computed once for every layer), whether the MLP is gated, whether it reads
  // the block's input (parallel) or the stream after attention.
  const NormKind norm = c.architecture.norm;
  const bool rotary = c.architecture.positions == PositionKind::Rotary;
  const bool gated = c.architecture.mlp == MlpKind::Gated;
  const bool parallel = c.architecture.parallel_blocks;
  const int rotary_dim = c.architecture.rotary.dim;
  // [new pos, rotary_dim / 2]; the local ones for the sliding layers of a model that rotates them
  // otherwise (Gemma 3's rope_local_base_freq).
  RowMatrixXf rotary_cos, rotary_sin, local_cos, local_sin;
  if (rotary) rotary_tables(rotary_cos, rotary_sin, rotary_inv_freq(c.architecture.rotary), P, N);
  if (rotary && c.architecture.local_rotary)
    rotary_tables(local_cos, local_sin, rotary_inv_freq(c.architecture.rotary_local), P, N);
  const bool qk_norm = c.architecture.qk_norm;

  LayerActivations scratch;  // reused across layers when only logits are kept
  std::vector<RowMatrixXf> attention_scratch(static_cast<size_t>(std::max(1, omp_get_max_threads())));
  RowMatrixXf normalized, qkv, mlp_post, block_out, mlp_gate, z_new;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& W = weights->layer(l);
    const PackedLayer& WP = weights->packed(l);
    LayerActivations& a = options.logits_only ? scratch : cache->layer(l);
    const LayerActivations* pa = prev ? &prev->layer(l) : nullptr;
    const LayerHooks* hook = edited ? &hooks.layers[static_cast<size_t>(l)] : nullptr;
    if (hook) apply_hooks((*hook)[HookPoint::ResidPre], resid, P, c);
    a.resid_pre.extend(pa ? &pa->resid_pre : nullptr, P, S, D);
    a.resid_pre.set_rows(P, resid);

    norm_forward(normalized, nullptr, resid, W.norm1_w, W.norm1_b, c.norm_eps, norm);
    linear_forward(qkv, normalized, WP.W_qkv, W.b_qkv);  // [new pos, Q | K | V]
    a.q.extend(pa ? &pa->q : nullptr, P, S, q_width);
    a.k.extend(pa ? &pa->k : nullptr, P, S, kv_width);
    a.v.extend(pa ? &pa->v : nullptr, P, S, kv_width);
    if (hook) {
      // hook_q and hook_k sit before the rotation; with rotary the cache derives them from
      // resid_pre, so an edited one is kept.
      apply_hooks((*hook)[HookPoint::Q], qkv.leftCols(q_width), P, c);
      apply_hooks((*hook)[HookPoint::K], qkv.middleCols(q_width, kv_width), P, c);
      apply_hooks((*hook)[HookPoint::V], qkv.rightCols(kv_width), P, c);
      if (rotary && hook->edits(HookPoint::Q))
        store_edited(a.q_pre_rotary, pa ? &pa->q_pre_rotary : nullptr, P, S, qkv.leftCols(q_width));
      if (rotary && hook->edits(HookPoint::K))
        store_edited(a.k_pre_rotary, pa ? &pa->k_pre_rotary : nullptr, P, S, qkv.middleCols(q_width, kv_width));
    }
    if (qk_norm) {
      // Gemma 3 and Qwen3 normalize each query and key head before the rotation; the cache
      // derives the norms' keys from hook_q and hook_k (ActivationCache::qk_norm).
      head_rmsnorm_forward(qkv.leftCols(q_width), H, c.d_head, W.q_norm_w, c.norm_eps, nullptr);
      head_rmsnorm_forward(qkv.middleCols(q_width, kv_width), c.n_key_value_heads, c.d_head, W.k_norm_w, c.norm_eps,
                           nullptr);
    }
    if (rotary) {
      // Position enters here and nowhere else: each query and key is turned by its position's
      // angles, so a score depends on the distance between the two. The cache keeps the rotated
      // side and derives the other on request (ActivationCache::pre_rotary).
      const bool local = c.architecture.local_rotary && attention_window(c, l) > 0;
      const RowMatrixXf& cos = local ? local_cos : rotary_cos;
      const RowMatrixXf& sin = local ? local_sin : rotary_sin;
      rotary_forward(qkv.leftCols(q_width), H, c.d_head, rotary_dim, cos, sin);
      rotary_forward(qkv.middleCols(q_width, kv_width), c.n_key_value_heads, c.d_head, rotary_dim, cos, sin);
    }
    a.q.set_rows(P, qkv.leftCols(q_width));
    a.k.set_rows(P, qkv.middleCols(q_width, kv_width));
    a.v.set_rows(P, qkv.rightCols(kv_width));
    a.pattern.extend(pa ? &pa->pattern : nullptr, P, S, H);
    const RowMatrixXf q_new = qkv.leftCols(q_width);
    const AttentionOptions attention{cache->attention_scale(l), c.architecture.attn_softcap, attention_window(c, l)};
    attention_forward(a, q_new, z_new, P, c, attention, options.store_scores, attention_scratch,
                      hook && hook->edits(HookPoint::Pattern) ? hook : nullptr);
    if (hook) apply_hooks((*hook)[HookPoint::Z], z_new, P, c);
    a.z.extend(pa ? &pa->z : nullptr, P, S, q_width);
    a.z.set_rows(P, z_new);
    if (pa && options.store_scores) {
      // The earlier run's scores are [head, S_prev, S_prev]; its first P query rows carry over.
      const size_t S_prev = static_cast<size_t>(prev->n_pos()), SS = static_cast<size_t>(S);
      for (size_t h = 0; h < static_cast<size_t>(H); ++h)
        for (size_t i = 0; i < static_cast<size_t>(P); ++i)
          std::copy_n(pa->scores_hqk.data() + (h * S_prev + i) * S_prev, i + 1, a.scores_hqk.data() + (h * SS + i) * SS);
    }

    // attn_out: the concatenated heads through all of W_O at once. Each head's own result
    // (z_h @ W_O[h]) is computed here only when asked to be stored; otherwise the cache derives it
    // on request with the same kernel and bits, and concat_vs_sum (core/analysis) checks the
    // identity for the view. Computing them every run, for a check nothing read, was a noticeable
    // share of a short pass.
    linear_forward(block_out, z_new, WP.W_O, W.b_O);
    // Gemma's post-attention norm: hook_attn_out is what joins the stream, after it.
    if (W.post_attn_norm_w) post_norm(block_out, W.post_attn_norm_w, c);
    if (hook) apply_hooks((*hook)[HookPoint::AttnOut], block_out, P, c);
    a.attn_out.extend(pa ? &pa->attn_out : nullptr, P, S, D);
    a.attn_out.set_rows(P, block_out);
    if (options.store_results) {
      a.result_phd.resize(static_cast<size_t>(S * H * D));
      if (pa) std::copy_n(pa->result_phd.data(), static_cast<size_t>(P * H * D), a.result_phd.data());
      // Heads are independent: one per thread, each product on its own thread.
#pragma omp parallel for schedule(static) if (N * D * D >= (int64_t{1} << 20))
      for (int h = 0; h < H; ++h)
        head_result_forward(a.result_phd.data() + (P * H + h) * D, H * D, z_new, h, c.d_head, WP.W_O);
    }

    // Parallel blocks (GPT-NeoX) feed the MLP the block's input, not the stream after attention.
    if (parallel) norm_forward(normalized, nullptr, resid, W.norm2_w, W.norm2_b, c.norm_eps, norm);
    add_in_place(resid, block_out);  // resid_mid
    if (hook && hook->edits(HookPoint::ResidMid)) {
      apply_hooks((*hook)[HookPoint::ResidMid], resid, P, c);
      store_edited(a.resid_mid, pa ? &pa->resid_mid : nullptr, P, S, resid);
    }
    if (!parallel) norm_forward(normalized, nullptr, resid, W.norm2_w, W.norm2_b, c.norm_eps, norm);
    // The MLP's pre-activations are not kept (unless asked): the widest activations of a layer,
    // and cheap to derive on request from resid_mid with the same kernels (ActivationCache::mlp_pre).
    linear_forward(block_out, normalized, WP.W_in, W.b_in);  // plain: pre; gated: the up projection
    if (gated) linear_forward(mlp_gate, normalized, WP.W_gate, W.b_gate);
    const bool edits_pre = hook && hook->edits(HookPoint::MlpPre);
    if (edits_pre || options.store_mlp_pre) {
      RowMatrixXf& pre = gated ? mlp_gate : block_out;  // mlp.hook_pre: the gate's, when gated
      if (edits_pre) apply_hooks((*hook)[HookPoint::MlpPre], pre, P, c);
      store_edited(a.mlp_pre, pa ? &pa->mlp_pre : nullptr, P, S, pre);
    }
    if (gated && options.store_mlp_pre) store_edited(a.mlp_pre_linear, pa ? &pa->mlp_pre_linear : nullptr, P, S, block_out);
    if (gated)
      gated_activation_forward(mlp_post, mlp_gate, block_out, c.activation);
    else
      activation_forward(mlp_post, block_out, c.activation);
    if (hook && hook->edits(HookPoint::MlpPost)) {
      apply_hooks((*hook)[HookPoint::MlpPost], mlp_post, P, c);
      store_edited(a.mlp_post, pa ? &pa->mlp_post : nullptr, P, S, mlp_post);
    }
    linear_forward(block_out, mlp_post, WP.W_out, W.b_out);
    if (W.post_mlp_norm_w) post_norm(block_out, W.post_mlp_norm_w, c);
    if (hook) apply_hooks((*hook)[HookPoint::MlpOut], block_out, P, c);
    a.mlp_out.extend(pa ? &pa->mlp_out : nullptr, P, S, D);
    a.mlp_out.set_rows(P, block_out);
    add_in_place(resid, block_out);  // resid_post
    if (hook && hook->edits(HookPoint::ResidPost)) {
      apply_hooks((*hook)[HookPoint::ResidPost], resid, P, c);
      store_edited(a.resid_post, pa ? &pa->resid_post : nullptr, P, S, resid);
    }
  }
  // The layers' temporaries go before the logits are written, so they are not held at the run's
  // peak of resident memory.
  for (RowMatrixXf* m : {&normalized, &qkv, &mlp_post, &block_out, &mlp_gate, &z_new}) m->resize(0, 0);
  scratch = LayerActivations();
  attention_scratch.clear();
  if (options.logits_only) cache->layers().clear();

  // ln_final and logits for the new positions; the prefix's rows are copied.
  RowMatrixXf ln_new;
  VectorXf scale_new;
  norm_forward(ln_new, &scale_new, resid, weights->final_norm_w(), weights->final_norm_b(), c.norm_eps, norm);
  cache->ln_final_normalized.extend(prev ? &prev->ln_final_normalized : nullptr, P, S, D);
  cache->ln_final_normalized.set_rows(P, ln_new);
  cache->ln_final_scale.resize(S);
  if (prev) cache->ln_final_scale.head(P) = prev->ln_final_scale.head(P);
  cache->ln_final_scale.tail(N) = scale_new;
  // logits [pos, d_vocab] = ln_final [pos, d_model] @ W_U; W_U's rows are kept [d_vocab, d_model].
  // Written straight into the cache's blocks, in one product: a separate matrix of new logits,
  // copied in afterwards, had been the peak of a long run's resident memory.
  cache->logits.extend(prev ? &prev->logits : nullptr, P, S, c.d_vocab);
  unembed_forward(cache->logits.row_segments(P, S), ln_new, weights->packed_unembed());
  // Gemma2ForCausalLM.forward: logits = cap * tanh(logits / cap). The logits kept are the capped
  // ones; direct logit attribution splits the ones before it (ActivationCache::logits_capped).
  if (const float cap = c.architecture.final_softcap; cap > 0.0f)
    for (const auto& [rows, n] : cache->logits.row_segments(P, S)) softcap_forward(rows, n * c.d_vocab, cap);
  bool finite = !prev || prev->logits_finite;
  cache->logits.for_each_block(P, S, [&](Eigen::Index, const ConstStridedMatrixRef& rows) { finite = finite && rows.allFinite(); });
  cache->logits_finite = finite;
  return cache;
}

namespace {

// Rows 0 .. S-1 of a prompt's slice of the stacked rows, a position block at a time, as
// PositionRows::for_each_block gives a run's cache: so the products see the same shapes.
template <class F>
void for_each_stacked_block(const float* first_row, Eigen::Index S, Eigen::Index cols, Eigen::Index stride, const F& f) {
  for (Eigen::Index i = 0; i < S;) {
    const Eigen::Index end = std::min(S, (i / kPositionBlock + 1) * kPositionBlock);
    f(i, ConstStridedMatrixRef(first_row + i * stride, end - i, cols, Eigen::OuterStride<>(stride)));
    i = end;
  }
}

}  // namespace

std::vector<std::shared_ptr<ActivationCache>> forward_batch(std::shared_ptr<const Weights> weights,
                                                            std::span<const std::vector<int32_t>> prompts,
                                                            const BatchRunOptions& options, BatchScratch* kept) {
  const ModelConfig& c = weights->config();
  require_implemented(c);
  const int B = static_cast<int>(prompts.size());
  std::vector<Eigen::Index> offset(static_cast<size_t>(B) + 1, 0);  // prompt b's rows: offset[b] .. offset[b+1]-1
  for (int b = 0; b < B; ++b) {
    check_tokens(c, prompts[static_cast<size_t>(b)]);
    offset[static_cast<size_t>(b) + 1] = offset[static_cast<size_t>(b)] + static_cast<Eigen::Index>(prompts[static_cast<size_t>(b)].size());
  }
  std::vector<std::shared_ptr<ActivationCache>> caches;
  for (const auto& p : prompts) caches.push_back(std::make_shared<ActivationCache>(weights, p));
  if (B == 0) return caches;
  const Eigen::Index R = offset.back(), D = c.d_model, H = c.n_heads;
  const ThreadScope threads(options.threads > 0 ? options.threads : auto_threads(c, static_cast<int>(R)));
  const int layers = options.logits || options.layers < 0 ? c.n_layers : std::min(options.layers, c.n_layers);
  const Eigen::Index q_width = H * c.d_head, kv_width = Eigen::Index{c.n_key_value_heads} * c.d_head;
  const auto rows_of = [&](int b) { return offset[static_cast<size_t>(b) + 1] - offset[static_cast<size_t>(b)]; };

  BatchScratch own;
  BatchScratch& work = kept ? *kept : own;
  // [rows, d_model]: every prompt's embeddings (and learned positions, from 0 for each prompt).
  RowMatrixXf& resid = work.resid;
  resid.resize(R, D);
  for (int b = 0; b < B; ++b) {
    const auto& tokens = prompts[static_cast<size_t>(b)];
    for (Eigen::Index i = 0; i < rows_of(b); ++i)
      weights->embedding_row(tokens[static_cast<size_t>(i)], resid.row(offset[static_cast<size_t>(b)] + i).data());
    if (caches[0]->has_pos_embed())
      resid.middleRows(offset[static_cast<size_t>(b)], rows_of(b)) += ConstMatrixRef(weights->W_pos(), rows_of(b), D);
  }
  const NormKind norm = c.architecture.norm;
  const bool rotary = c.architecture.positions == PositionKind::Rotary;
  const bool gated = c.architecture.mlp == MlpKind::Gated;
  const bool parallel = c.architecture.parallel_blocks;
  // Rotation tables for positions 0 .. the longest prompt: each prompt's rows take their head.
  Eigen::Index longest = 0;
  for (int b = 0; b < B; ++b) longest = std::max(longest, rows_of(b));
  RowMatrixXf rotary_cos, rotary_sin, local_cos, local_sin;
  if (rotary) rotary_tables(rotary_cos, rotary_sin, rotary_inv_freq(c.architecture.rotary), 0, longest);
  if (rotary && c.architecture.local_rotary)
    rotary_tables(local_cos, local_sin, rotary_inv_freq(c.architecture.rotary_local), 0, longest);

  std::vector<RowMatrixXf>& scratch = work.attention;
  scratch.resize(static_cast<size_t>(std::max(1, omp_get_max_threads())));
  std::vector<RowMatrixXf>& q_new = work.q_new;
  std::vector<RowMatrixXf>& z_new = work.z_new;
  if (q_new.size() < static_cast<size_t>(B)) q_new.resize(static_cast<size_t>(B));
  if (z_new.size() < static_cast<size_t>(B)) z_new.resize(static_cast<size_t>(B));
  RowMatrixXf &normalized = work.normalized, &qkv = work.qkv, &z = work.z, &attn_out = work.attn_out,
              &mlp_pre = work.mlp_pre, &mlp_gate = work.mlp_gate, &mlp_post = work.mlp_post, &mlp_out = work.mlp_out;
  z.resize(R, q_width);
  RowMatrixXf cos, sin;
  for (int l = 0; l < layers; ++l) {
    const LayerWeights& W = weights->layer(l);
    const PackedLayer& WP = weights->packed(l);
    // The last block a scan of patterns alone needs stops at its pattern.
    const bool last = l + 1 == layers && !options.logits;
    const bool want_z = !last || options.keep_z;
    norm_forward(normalized, nullptr, resid, W.norm1_w, W.norm1_b, c.norm_eps, norm);
    // [rows, Q | K | V]. A last block that stops at its pattern reads no values: its product stops
    // at Q | K when they end on a panel (the same bits for them, packed_gemm.h), and V's columns
    // keep whatever the scratch held. The matrix keeps its shape, which the scratch is kept for.
    const bool qk_only = !want_z && (q_width + kv_width) % PackedMatrix::panel_width() == 0;
    qkv.resize(R, WP.W_qkv.cols());
    packed_gemm(R, normalized.data(), normalized.cols(),
                qk_only ? WP.W_qkv.leading_columns(q_width + kv_width) : WP.W_qkv, 0, WP.W_qkv.rows(), W.b_qkv,
                qkv.data(), qkv.cols());
    if (c.architecture.qk_norm) {
      head_rmsnorm_forward(qkv.leftCols(q_width), H, c.d_head, W.q_norm_w, c.norm_eps, nullptr);
      head_rmsnorm_forward(qkv.middleCols(q_width, kv_width), c.n_key_value_heads, c.d_head, W.k_norm_w, c.norm_eps,
                           nullptr);
    }
    if (rotary) {
      const bool local = c.architecture.local_rotary && attention_window(c, l) > 0;
      for (int b = 0; b < B; ++b) {
        const Eigen::Index T = rows_of(b), r0 = offset[static_cast<size_t>(b)];
        cos = (local ? local_cos : rotary_cos).topRows(T);
        sin = (local ? local_sin : rotary_sin).topRows(T);
        rotary_forward(qkv.block(r0, 0, T, q_width), H, c.d_head, c.architecture.rotary.dim, cos, sin);
        rotary_forward(qkv.block(r0, q_width, T, kv_width), c.n_key_value_heads, c.d_head, c.architecture.rotary.dim,
                       cos, sin);
      }
    }
    // Per-prompt copies and allocations on both threads: on one, the other waited for them
    // (about 1% of a batched scan's time).
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b) {
      const Eigen::Index T = rows_of(b);
      q_new[static_cast<size_t>(b)] = qkv.block(offset[static_cast<size_t>(b)], 0, T, q_width);
      z_new[static_cast<size_t>(b)].resize(T, q_width);
      caches[static_cast<size_t>(b)]->layer(l).pattern.extend(nullptr, 0, T, static_cast<int>(H));
    }
    // Attention per (prompt, head): B x H independent pieces, shared between the threads.
    const AttentionOptions attention{caches[0]->attention_scale(l), c.architecture.attn_softcap, attention_window(c, l)};
    const int pieces = B * static_cast<int>(H);
#pragma omp parallel
    {
      KVPanels& packed = KVPanels::of_this_thread();
#pragma omp for schedule(dynamic, 4)
      for (int piece = 0; piece < pieces; ++piece) {
        const int b = piece / static_cast<int>(H), h = piece % static_cast<int>(H);
        const Eigen::Index T = rows_of(b);
        const float* rows = qkv.data() + offset[static_cast<size_t>(b)] * qkv.cols();
        LayerActivations& a = caches[static_cast<size_t>(b)]->layer(l);
        head_attention(
            h, packed, int64_t{b} * c.n_key_value_heads + c.kv_head(h), q_new[static_cast<size_t>(b)],
            z_new[static_cast<size_t>(b)], scratch[static_cast<size_t>(omp_get_thread_num())], 0, T, c, attention,
            nullptr, [&](const auto& f) { for_each_stacked_block(rows + q_width, T, kv_width, qkv.cols(), f); },
            [&](const auto& f) { for_each_stacked_block(rows + q_width + kv_width, T, kv_width, qkv.cols(), f); },
            [&](Eigen::Index i) { return a.pattern.mutable_row(h, i); }, nullptr, want_z);
      }
    }
    if (!want_z) break;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b) {
      z.middleRows(offset[static_cast<size_t>(b)], rows_of(b)) = z_new[static_cast<size_t>(b)];
      if (options.keep_z) {
        LayerActivations& a = caches[static_cast<size_t>(b)]->layer(l);
        a.z.extend(nullptr, 0, rows_of(b), q_width);
        a.z.set_rows(0, z_new[static_cast<size_t>(b)]);
      }
    }
    if (last) break;

    linear_forward(attn_out, z, WP.W_O, W.b_O);
    if (W.post_attn_norm_w) post_norm(attn_out, W.post_attn_norm_w, c);
    if (parallel) norm_forward(normalized, nullptr, resid, W.norm2_w, W.norm2_b, c.norm_eps, norm);
    add_in_place(resid, attn_out);  // resid_mid
    if (!parallel) norm_forward(normalized, nullptr, resid, W.norm2_w, W.norm2_b, c.norm_eps, norm);
    linear_forward(mlp_pre, normalized, WP.W_in, W.b_in);
    if (gated) {
      linear_forward(mlp_gate, normalized, WP.W_gate, W.b_gate);
      gated_activation_forward(mlp_post, mlp_gate, mlp_pre, c.activation);
    } else {
      activation_forward(mlp_post, mlp_pre, c.activation);
    }
    linear_forward(mlp_out, mlp_post, WP.W_out, W.b_out);
    if (W.post_mlp_norm_w) post_norm(mlp_out, W.post_mlp_norm_w, c);
    add_in_place(resid, mlp_out);  // resid_post
  }
  if (!kept)
    for (RowMatrixXf* m : {&normalized, &qkv, &z, &attn_out, &mlp_pre, &mlp_gate, &mlp_post, &mlp_out}) m->resize(0, 0);
  if (!options.logits) return caches;

  RowMatrixXf ln;
  VectorXf scale;
  norm_forward(ln, &scale, resid, weights->final_norm_w(), weights->final_norm_b(), c.norm_eps, norm);
  for (int b = 0; b < B; ++b) {
    ActivationCache& cache = *caches[static_cast<size_t>(b)];
    const Eigen::Index T = rows_of(b), r0 = offset[static_cast<size_t>(b)];
    cache.ln_final_scale = scale.segment(r0, T);
    cache.logits.extend(nullptr, 0, T, c.d_vocab);
    const RowMatrixXf ln_b = ln.middleRows(r0, T);
    unembed_forward(cache.logits.row_segments(0, T), ln_b, weights->packed_unembed());
    if (const float cap = c.architecture.final_softcap; cap > 0.0f)
      for (const auto& [rows, n] : cache.logits.row_segments(0, T)) softcap_forward(rows, n * c.d_vocab, cap);
    bool finite = true;
    cache.logits.for_each_block(0, T, [&](Eigen::Index, const ConstStridedMatrixRef& rows) { finite = finite && rows.allFinite(); });
    cache.logits_finite = finite;
  }
  return caches;
}

}  // namespace hs
