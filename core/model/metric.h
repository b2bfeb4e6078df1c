// What the backward pass differentiates: a scalar metric of one forward pass. Each metric gives
// its value (from the cache, in double) and seeds the backward pass with its derivative with
// respect to the one activation it reads (the logits, or any hook's activation for a dot product).
//
// The kinds, at a query position `pos` (-1: the last):
//   logit_diff  logit(answer) - logit(wrong)            (the patching sweep's metric)
//   logit       logit(token)
//   logprob     log softmax(logits)[token]
//   loss        mean over positions 0..S-2 of -log softmax(logits[p])[tokens[p+1]] (no pos; S >= 2)
//   dot         activation(hook, layer)[pos] . vector, over the whole row or one unit of it: a head
//               ([pos, head, d_head] keys, [pos, head, d_model] for attn.hook_result; key/value
//               heads for hook_k/v/rot_k), a neuron (mlp.hook_pre/pre_linear/post), or, for
//               attn.hook_pattern and hook_attn_scores ([head, query, key]), the query row `pos`
//               of one head (S wide) or of every head (n_heads x S, head-major). A masked score
//               (key after the query) counts as 0 in the value and gets no seed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/hooks.h"
#include "core/tensor/eigen.h"

namespace hs {

class ActivationCache;
struct ModelConfig;

enum class MetricKind : uint8_t { LogitDiff, Logit, LogProb, Loss, Dot };

struct Metric {
  MetricKind kind = MetricKind::LogitDiff;
  int pos = -1;          // query position; -1: the last (ignored by loss)
  int32_t token = -1;    // logit_diff: the answer; logit, logprob: the token
  int32_t wrong = -1;    // logit_diff: the token subtracted
  // dot:
  HookPoint hook = HookPoint::ResidPost;
  int layer = -1;        // -1 for model-wide hooks
  int unit = -1;         // head, key/value head or neuron; -1: the whole row
  std::vector<float> vector;
};

Metric logit_diff_metric(int32_t answer, int32_t wrong, int pos = -1);
Metric logit_metric(int32_t token, int pos = -1);
Metric logprob_metric(int32_t token, int pos = -1);
Metric loss_metric();
Metric dot_metric(HookPoint hook, int layer, std::vector<float> vector, int pos = -1, int unit = -1);

std::string_view to_string(MetricKind k);  // "logit_diff", "logit", "logprob", "loss", "dot"
// By name; nullopt for another word.
std::optional<MetricKind> parse_metric_kind(std::string_view name);
// "logit_diff|logit|logprob|loss|dot", for messages.
std::string metric_kind_names();

// Throws hs::Error when the metric does not fit the model or a run of n_pos tokens: a token
// outside the vocabulary, a position out of range, loss over one token, a dot product's hook that
// the model does not have, its layer or unit out of range, or a vector of the wrong length (the
// message says the expected length).
void check_metric(const Metric& m, const ModelConfig& c, int n_pos);
// The position the metric reads (pos, or the last when -1).
int metric_position(const Metric& m, int n_pos);

// The metric's value on a run (checked first).
double metric_value(const Metric& m, const ActivationCache& cache);

// For the backward pass. The floats of one dot-product unit of `hook` (a head's d_head, a
// neuron's 1, a query row's n_pos) and how many units the hook has (0: none, the whole row only).
int64_t metric_unit_width(const ModelConfig& c, HookPoint hook, int n_pos);
int metric_unit_count(const ModelConfig& c, HookPoint hook);
// The length a dot product's vector must have.
int64_t metric_vector_length(const Metric& m, const ModelConfig& c, int n_pos);
// Whether the metric reads the activation of (hook, layer) directly: the logits for every kind
// but dot.
bool metric_reads(const Metric& m, HookPoint hook, int layer);
// Adds the metric's derivative with respect to the activation it reads into g, laid out as the
// backward pass holds that activation's gradient: [pos, row width] for per-position hooks,
// [head * n_pos + query, key] for attn.hook_pattern and hook_attn_scores, [pos, d_vocab] for the
// logits. Call only when metric_reads(m, hook, layer).
void add_metric_seed(const Metric& m, const ActivationCache& cache, RowMatrixXf& g);

}  // namespace hs
