// The architecture description's seams (core/model/architecture.h): the registry, the GPT-2
// entry's names, shapes and parameter count against the fixtures' files, the refusal of options
// nothing implements, and a model whose description differs from GPT-2's (grouped key/value
// heads, no position embedding, no biases) through the forward pass, the reference loops, the
// cache, the memory guard and the analyses.
#include <catch2/catch.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/analysis/concat_sum.h"
#include "core/analysis/dla.h"
#include "core/analysis/residual.h"
#include "core/analysis/top_k.h"
#include "core/error.h"
#include "core/model/arch/llama.h"
#include "core/model/forward.h"
#include "core/model/memory_guard.h"
#include "core/model/model.h"
#include "core/tensor/safetensors.h"
#include "forward_reference.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

const char* kSmallGpt2 =
    R"({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 16, "vocab_size": 50})";

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The file's tensor of a spec, with or without the family's base prefix.
const TensorInfo* find(const SafetensorsFile& f, const ModelConfig& c, const TensorSpec& spec) {
  if (const TensorInfo* t = f.find(spec.name)) return t;
  return spec.prefixable ? f.find(std::string(c.architecture.family->base_prefix()) + spec.name) : nullptr;
}

// A file for `c` written from its description's own tensor list (F32, small random values;
// norm weights near 1), bound by Weights::load.
std::shared_ptr<const Weights> synthetic_weights(const ModelConfig& c, const fs::path& file, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<test::Entry> entries;
  for (const TensorSpec& spec : tensor_specs(c)) {
    if (spec.optional) continue;  // the unembedding stays tied
    const bool norm_weight = spec.role == TensorRole::Norm1Weight || spec.role == TensorRole::Norm2Weight ||
                             spec.role == TensorRole::FinalNormWeight;
    std::vector<float> v(static_cast<size_t>(numel(spec.shape)));
    for (float& x : v) x = norm_weight ? 1.0f + noise(rng) / 3 : noise(rng);
    entries.push_back({spec.name, "F32", spec.shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  }
  {
    std::ofstream out(file, std::ios::binary);
    out << test::build_safetensors(entries);
  }
  return Weights::load(SafetensorsFile::open(file), c);
}

struct ScratchDir {
  fs::path dir = test::scratch_dir() / "architecture";
  ScratchDir() { fs::create_directories(dir); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

TEST_CASE("architecture: config.json finds its family in the registry", "[architecture]") {
  const ModelConfig c = parse_config(kSmallGpt2, "config.json");
  REQUIRE(c.architecture.family != nullptr);
  CHECK(c.architecture.family->name() == "GPT-2");
  CHECK(c.model_type == "gpt2");
  CHECK(c.n_key_value_heads == c.n_heads);
  const Architecture& a = c.architecture;
  CHECK(a.norm == NormKind::LayerNorm);
  CHECK(a.norm_bias);
  CHECK(a.positions == PositionKind::LearnedAbsolute);
  CHECK(a.mlp == MlpKind::Plain);
  CHECK(a.qkv == QkvLayout::FusedBlocks);
  CHECK((a.qkv_bias && a.attn_out_bias && a.mlp_bias));
  CHECK_FALSE(a.parallel_blocks);
  CHECK(a.unembedding == UnembeddingTie::TiedUnlessPresent);
  CHECK_NOTHROW(require_implemented(c));

  // Without model_type, the class in architectures[0] names the family; with neither, GPT-2.
  auto without_type = [](nlohmann::json j) {
    j.erase("model_type");
    return j;
  };
  nlohmann::json j = without_type(nlohmann::json::parse(kSmallGpt2));
  const ModelConfig none = parse_config(j.dump(), "config.json");
  CHECK(none.architecture.family == c.architecture.family);
  j["architectures"] = {"GPT2LMHeadModel"};
  const ModelConfig by_class = parse_config(j.dump(), "config.json");
  CHECK(by_class.architecture.family == c.architecture.family);
  CHECK(by_class.model_type == "gpt2");

  // Anything else is refused, naming what the config asked for and every family of the registry,
  // each as its description says, in registry order.
  std::string families;
  const auto& registry = architecture_families();
  for (size_t i = 0; i < registry.size(); ++i)
    families += (i == 0 ? "" : i + 1 == registry.size() ? " or " : ", ") + std::string(registry[i]->description());
  REQUIRE(registry.size() > 1);
  nlohmann::json mamba = nlohmann::json::parse(kSmallGpt2);
  mamba["model_type"] = "mamba";
  CHECK_THROWS_WITH(parse_config(mamba.dump(), "m/config.json"),
                    "m/config.json: model_type is \"mamba\"; HeadScope reads " + families + ".");
  j["architectures"] = {"MambaForCausalLM"};
  CHECK_THROWS_WITH(parse_config(j.dump(), "m/config.json"), Catch::Contains("model_type is \"MambaForCausalLM\""));
  // The Llama and Qwen2 entries, by model_type and by class.
  const char* kLlama = R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
                           "intermediate_size": 64, "vocab_size": 50, "max_position_embeddings": 16})";
  const ModelConfig llama = parse_config(kLlama, "config.json");
  CHECK(llama.architecture.family->name() == "Llama");
  CHECK(llama.n_key_value_heads == 4);
  CHECK(llama.norm_eps == 1e-6f);
  CHECK(llama.architecture.rotary.base == 10000.0);
  CHECK(llama.architecture.unembedding == UnembeddingTie::Untied);
  nlohmann::json by_llama_class = nlohmann::json::parse(kLlama);
  by_llama_class.erase("model_type");
  by_llama_class["architectures"] = {"Qwen2ForCausalLM"};
  CHECK(parse_config(by_llama_class.dump(), "config.json").architecture.family->name() == "Qwen2");
}

TEST_CASE("architecture: README's Models table has one row per family of the registry", "[architecture]") {
  // Rows of the table under "## Models": | family | `Class` | what HeadScope implements |
  const std::string readme = test::read_text(test::source_dir() / "README.md");
  const size_t models = readme.find("\n## Models\n");
  REQUIRE(models != std::string::npos);
  const size_t table = readme.find("\n| --- |", models);
  REQUIRE(table != std::string::npos);
  std::vector<const ArchitectureFamily*> rows;
  for (size_t at = readme.find('\n', table + 1) + 1; at < readme.size() && readme[at] == '|';
       at = readme.find('\n', at) + 1) {
    const std::string row = readme.substr(at, readme.find('\n', at) - at);
    INFO(row);
    const size_t open = row.find(" | `"), close = row.find("` |", open + 4);
    REQUIRE(close != std::string::npos);
    const ArchitectureFamily* f = find_family_by_class(row.substr(open + 4, close - open - 4));
    REQUIRE(f != nullptr);
    CHECK(row.starts_with("| " + std::string(f->name())));
    rows.push_back(f);
  }
  CHECK(rows == architecture_families());
}

TEST_CASE("architecture: GPT-NeoX orders its fused QKV's outputs per head, the others keep the file's order",
          "[architecture]") {
  const char* kNeox = R"({"model_type": "gpt_neox", "hidden_size": 12, "num_attention_heads": 3, "num_hidden_layers": 1,
                          "intermediate_size": 16, "vocab_size": 20, "max_position_embeddings": 8})";
  const ModelConfig c = parse_config(kNeox, "config.json");
  const ArchitectureFamily::OutputOrder order = c.architecture.family->output_order(c, TensorRole::QkvWeight);
  REQUIRE(order);
  // W_qkv is [Q | K | V] column blocks of 3 heads of 4; the file groups q_h, k_h, v_h per head.
  const int64_t dh = 4, heads = 3;
  for (int64_t part = 0; part < 3; ++part)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < dh; ++i) CHECK(order((part * heads + h) * dh + i) == h * 3 * dh + part * dh + i);
  for (TensorRole r : {TensorRole::QkvBias, TensorRole::AttnOutWeight, TensorRole::MlpInWeight, TensorRole::Unembedding})
    CHECK_FALSE(c.architecture.family->output_order(c, r));
  for (const ArchitectureFamily* f : architecture_families())
    if (f != c.architecture.family) CHECK_FALSE(f->output_order(c, TensorRole::QkvWeight));
}

TEST_CASE("architecture: the GPT-2 entry names each fixture tensor with its shape, and counts them", "[architecture]") {
  for (const char* name : {"f32_prefixed", "f16_plain", "bf16_prefixed", "full_context"}) {
    INFO(name);
    const fs::path dir = test::fixture_model(name);
    const auto model = Model::load(dir);
    const ModelConfig& c = model->config();
    const auto file = SafetensorsFile::open(dir / "model.safetensors");
    // Every weight of the file is one the description names, with the shape it gives.
    size_t named = 0;
    for (const TensorSpec& spec : tensor_specs(c)) {
      const TensorInfo* t = find(*file, c, spec);
      if (!t && spec.optional) continue;
      INFO(spec.name);
      REQUIRE(t != nullptr);
      CHECK(t->shape == spec.shape);
      ++named;
    }
    size_t weights = 0;
    int64_t floats = 0;
    for (const TensorInfo& t : file->tensors()) {
      if (c.architecture.family->is_ignorable(t.name)) continue;
      ++weights;
      floats += t.numel();
    }
    CHECK(named == weights);
    // The parameter-count formula counts a tied unembedding once, as the token embedding.
    const int64_t own_unembedding = model->weights()->tied_unembedding() ? 0 : int64_t{c.d_vocab} * c.d_model;
    CHECK(c.parameter_count() + own_unembedding == floats);
  }
}

TEST_CASE("architecture: the Llama, Qwen2 and GPT-NeoX entries name each fixture tensor with its shape, and count them",
          "[architecture][llama]") {
  for (const char* name : {"llama_gqa", "llama_tied_headdim", "qwen2_bias", "neox_parallel", "neox_sequential"}) {
    INFO(name);
    const fs::path dir = test::fixture_model(name);
    const auto model = Model::load(dir);
    const ModelConfig& c = model->config();
    const auto fixture = nlohmann::json::parse(test::read_text(dir / "fixture.json"));
    const auto& shapes = fixture["shapes"];
    CHECK(c.n_layers == shapes["n_layer"]);
    CHECK(c.n_heads == shapes["n_head"]);
    CHECK(c.n_key_value_heads == shapes["n_key_value_heads"]);
    CHECK(c.d_head == shapes["d_head"]);
    CHECK(c.d_mlp == shapes["d_mlp"]);
    const Architecture& a = c.architecture;
    const bool neox = a.family->name() == "GPT-NeoX";
    CHECK(a.positions == PositionKind::Rotary);
    if (neox) {
      CHECK(a.norm == NormKind::LayerNorm);
      CHECK(a.norm_bias);
      CHECK(a.mlp == MlpKind::Plain);
      CHECK(a.qkv == QkvLayout::FusedPerHead);
      CHECK(a.rotary.dim < c.d_head);  // partial rotary
      CHECK(a.parallel_blocks == (std::string(name) == "neox_parallel"));
    } else {
      CHECK(a.norm == NormKind::RMSNorm);
      CHECK_FALSE(a.norm_bias);
      CHECK(a.rotary.dim == c.d_head);
      CHECK(a.mlp == MlpKind::Gated);
      CHECK(a.qkv == QkvLayout::Separate);
    }
    // The file's tensors, from model.safetensors or every shard of the index.
    std::vector<std::shared_ptr<const SafetensorsFile>> files;
    if (fs::exists(dir / "model.safetensors")) files.push_back(SafetensorsFile::open(dir / "model.safetensors"));
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().starts_with("model-")) files.push_back(SafetensorsFile::open(e.path()));
    REQUIRE_FALSE(files.empty());
    size_t named = 0;
    for (const TensorSpec& spec : tensor_specs(c)) {
      const TensorInfo* t = nullptr;
      for (const auto& f : files)
        if (!t) t = find(*f, c, spec);
      INFO(spec.name);
      REQUIRE(t != nullptr);
      CHECK(t->shape == spec.shape);
      ++named;
    }
    size_t weights = 0;
    int64_t floats = 0;
    for (const auto& f : files)
      for (const TensorInfo& t : f->tensors()) {
        if (a.family->is_ignorable(t.name)) continue;  // neox_parallel's old buffers
        ++weights;
        floats += t.numel();
      }
    CHECK(named == weights);
    CHECK(c.parameter_count() == floats);  // tied or untied, the file holds each parameter once
    CHECK(model->weights()->tied_unembedding() == (a.unembedding == UnembeddingTie::Tied));
  }
  // llama_tied_headdim: head_dim 12 with 4 heads in a 32-wide model, one key/value head, biases.
  const ModelConfig t = load_config(test::fixture_model("llama_tied_headdim") / "config.json");
  CHECK(t.d_head * t.n_heads == 48);
  CHECK(t.n_key_value_heads == 1);
  CHECK((t.architecture.qkv_bias && t.architecture.attn_out_bias && t.architecture.mlp_bias));
  CHECK(t.architecture.rotary.scaling == RopeScaling::Linear);
  const ModelConfig neox = load_config(test::fixture_model("neox_parallel") / "config.json");
  CHECK(neox.architecture.rotary.dim == 4);  // int(8 * rotary_pct 0.5)
  const ModelConfig q = load_config(test::fixture_model("qwen2_bias") / "config.json");
  CHECK((q.architecture.qkv_bias && !q.architecture.attn_out_bias && !q.architecture.mlp_bias));
}

TEST_CASE("architecture: rope_scaling llama3 slows the low frequencies and keeps the high ones", "[architecture]") {
  RotaryParams r;
  r.dim = 8;
  r.base = 10000.0;  // wavelengths 2 pi * (1, 10, 100, 1000)
  const std::vector<double> plain = rotary_inv_freq(r);
  r.scaling = RopeScaling::Llama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_context = 16;  // kept below wavelength 4, slowed above 16, ramp between
  const std::vector<double> scaled = rotary_inv_freq(r);
  const double smooth = (16 / (2 * M_PI) - 1) / 3;
  CHECK(scaled[0] == Approx((1 - smooth) * plain[0] / 8 + smooth * plain[0]).epsilon(1e-12));
  for (int i = 1; i < 4; ++i) CHECK(scaled[static_cast<size_t>(i)] == Approx(plain[static_cast<size_t>(i)] / 8).epsilon(1e-12));
  r.scaling = RopeScaling::Linear;
  r.factor = 2;
  for (int i = 0; i < 4; ++i)
    CHECK(rotary_inv_freq(r)[static_cast<size_t>(i)] == Approx(plain[static_cast<size_t>(i)] / 2).epsilon(1e-12));
}

TEST_CASE("architecture: options nothing implements yet are refused by name", "[architecture]") {
  const fs::path dir = test::fixture_model("f32_prefixed");
  const ModelConfig gpt2 = load_config(dir / "config.json");
  const auto file = SafetensorsFile::open(dir / "model.safetensors");
  // Rotary embeddings over an odd number of dimensions have no rotate-half pairs.
  ModelConfig c = gpt2;
  c.architecture.positions = PositionKind::Rotary;
  c.architecture.rotary.dim = 3;
  const std::string message =
      "this GPT-2 model's architecture asks for rotary embeddings over 3 of 8 head dimensions (an even number up to "
      "d_head is needed), which HeadScope's forward pass does not implement yet.";
  CHECK_THROWS_WITH(require_implemented(c), message);
  // Binding the weights refuses it before reading a tensor, so no model with it ever runs.
  CHECK_THROWS_WITH(Weights::load(file, c), message);

  // A family's own order of outputs is applied to the fused QKV only.
  struct ReorderedMlp final : arch::LlamaLike {
    std::string_view name() const override { return "Reordered"; }
    std::string_view model_type() const override { return "reordered"; }
    bool reads_class(std::string_view) const override { return false; }
    std::string_view description() const override { return "none"; }
    std::string_view unexpected_tensor_hint() const override { return "none"; }
    OutputOrder output_order(const ModelConfig&, TensorRole role) const override {
      if (role != TensorRole::MlpInWeight) return {};
      return [](int64_t j) { return j; };
    }
    void read_family_options(const ConfigJson&, ModelConfig&) const override {}
  };
  static const ReorderedMlp reordered;
  ModelConfig llama = parse_config(R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
                                       "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 50,
                                       "max_position_embeddings": 16})",
                                   "config.json");
  CHECK_NOTHROW(require_implemented(llama));
  llama.architecture.family = &reordered;
  CHECK_THROWS_WITH(require_implemented(llama),
                    "this Reordered model's architecture asks for its own order of the outputs of a tensor other than "
                    "the fused QKV, which HeadScope's forward pass does not implement yet.");
  // A QKV grouped per head needs its family's order.
  c = gpt2;
  c.architecture.qkv = QkvLayout::FusedPerHead;
  CHECK_THROWS_WITH(require_implemented(c), Catch::Contains("a QKV grouped per head without the order of its outputs"));
}

TEST_CASE("architecture: DLA's frozen final norm centres for LayerNorm and not for RMSNorm", "[architecture][analysis]") {
  RowVectorXf x(3), direction(3);
  x << 1.0f, 2.0f, 3.0f;
  direction << 1.0f, 1.0f, 1.0f;
  CHECK(frozen_final_norm_dot(x, direction, 2.0f, NormKind::LayerNorm) == 0.0f);  // a constant direction reads no centred part
  CHECK(frozen_final_norm_dot(x, direction, 2.0f, NormKind::RMSNorm) == 3.0f);
}

TEST_CASE("architecture: grouped key/value heads, no position embedding and no biases, end to end", "[architecture]") {
  ModelConfig c = parse_config(kSmallGpt2, "config.json");
  c.n_key_value_heads = 2;  // heads 0, 1 read key/value head 0; heads 2, 3 read 1
  Architecture& a = c.architecture;
  a.positions = PositionKind::None;
  a.norm_bias = a.qkv_bias = a.attn_out_bias = a.mlp_bias = false;
  const int S = 9, L = c.n_layers, H = c.n_heads, dh = c.d_head;
  ScratchDir scratch;
  const auto weights = synthetic_weights(c, scratch.dir / "model.safetensors", 7);
  CHECK(weights->W_pos() == nullptr);
  CHECK(weights->final_norm_b() == nullptr);
  CHECK(weights->layer(0).b_qkv == nullptr);
  CHECK(weights->b_O(1).isZero());
  CHECK(weights->W_qkv(0).cols() == (H + 2 * 2) * dh);
  CHECK(weights->W_V(0, 1).data() == weights->W_qkv(0).data() + (H + 2 + 1) * dh);
  CHECK(c.parameter_count() == int64_t{50} * 32 + L * (2 * 32 + 32 * 64 + 32 * 32 + 2 * 32 * 128) + 32);

  const std::vector<int32_t> tokens = {1, 5, 9, 3, 44, 7, 0, 12, 5};
  RunOptions stored;
  stored.store_scores = stored.store_results = true;
  const auto cache = forward(weights, tokens, stored);

  // The cache's keys and shapes follow the description.
  CHECK_FALSE(cache->has("hook_pos_embed"));
  CHECK(cache->keys().size() == 1 + 14 * static_cast<size_t>(L) + 2);
  CHECK_THROWS_WITH(cache->get("hook_pos_embed"), Catch::Contains("unknown activation"));
  CHECK(cache->get("blocks.1.attn.hook_q").shape == std::vector<int64_t>{S, H, dh});
  CHECK(cache->get("blocks.1.attn.hook_k").shape == std::vector<int64_t>{S, 2, dh});
  CHECK(cache->get("blocks.1.attn.hook_v").shape == std::vector<int64_t>{S, 2, dh});
  CHECK(cache->get("blocks.1.attn.hook_z").shape == std::vector<int64_t>{S, H, dh});

  // The fast pass equals the reference loops, which index the shared heads on their own.
  const auto slow = test::forward_reference(weights, tokens);
  for (const std::string& key : cache->keys()) {
    INFO(key);
    const test::Comparison cmp = test::compare(slow->get(key).data, cache->get(key).data);
    CHECK(cmp.masks_agree);
    CHECK(cmp.relative <= 1e-5);
  }
  // A run that reuses a prefix equals the full run.
  const std::vector<int32_t> first(tokens.begin(), tokens.begin() + 5);
  const auto incremental = forward(weights, tokens, stored, forward(weights, first, stored));
  CHECK(incremental->reused_prefix == 5);
  for (const std::string& key : cache->keys()) {
    INFO(key);
    CHECK(test::compare(cache->get(key).data, incremental->get(key).data).relative <= 1e-5);
  }

  // The memory guard's estimates follow the same description.
  CHECK(estimate_cache_bytes(c, S, stored) >= cache->stored_bytes());
  CHECK(estimate_cache_bytes(c, S, stored) <= 2 * cache->stored_bytes());
  uint64_t packed = 0;
  for (const TensorSpec& spec : tensor_specs(c))
    if (is_packed_matrix(spec.role) && !spec.optional) packed += static_cast<uint64_t>(numel(spec.shape));
  packed += static_cast<uint64_t>(c.d_vocab) * c.d_model;  // the tied unembedding, packed from W_E
  CHECK(estimate_load_bytes(*SafetensorsFile::open(scratch.dir / "model.safetensors"), c) == 4 * packed);

  // The residual's parts are those the model has: no pos_embed, no b_O.
  for (int pos = 0; pos < S; ++pos) {
    const ResidualDecomposition d = decompose_residual(*cache, pos);
    REQUIRE(d.labels.size() == static_cast<size_t>(1 + L * (H + 1)));
    CHECK(d.labels[1] == "L0H0");
    CHECK(d.labels[static_cast<size_t>(H + 1)] == "L0 MLP");
    for (ComponentKind k : d.kinds) CHECK((k != ComponentKind::PosEmbed && k != ComponentKind::AttnBias));
    CHECK(d.max_abs_error <= 1e-5f * d.residual.cwiseAbs().maxCoeff());
    // Direct logit attribution still adds up to the logit, with no final-norm bias term.
    for (const Prediction& p : top_predictions(*cache, pos, 2)) {
      const LogitAttribution attribution = direct_logit_attribution(*cache, d, p.id);
      CHECK(attribution.bias_term == 0.0f);
      CHECK(attribution.max_abs_error <= 1e-4f * std::max(1.0f, std::abs(attribution.logit)));
    }
  }
  for (int l = 0; l < L; ++l) {
    const ConcatVsSum cs = concat_vs_sum(*cache, l);
    CHECK(cs.max_abs_vs_cache == 0.0f);
    CHECK(cs.max_abs_diff <= 1e-5f);
  }
}

TEST_CASE("architecture: headscope-cli info reports the architecture", "[architecture][cli]") {
  const test::CliRun r = test::run_cli("info --model " + test::quote(test::fixture_model("f16_plain").string()));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["n_key_value_heads"] == 4);
  const auto& a = j["architecture"];
  CHECK(a["family"] == "GPT-2");
  CHECK(a["norm"] == "LayerNorm");
  CHECK(a["norm_bias"] == true);
  CHECK(a["positions"] == "learned absolute");
  CHECK(a["mlp"] == "plain");
  CHECK(a["qkv"] == "fused [Q|K|V]");
  CHECK(a["parallel_blocks"] == false);
  CHECK(a["tied_unembedding"] == false);
}

TEST_CASE("architecture: headscope-cli info reports a rotary model's options", "[architecture][cli][llama]") {
  const test::CliRun r = test::run_cli("info --model " + test::quote(test::fixture_model("llama_gqa").string()));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["model_type"] == "llama");
  CHECK(j["n_key_value_heads"] == 2);
  const auto& a = j["architecture"];
  CHECK(a["family"] == "Llama");
  CHECK(a["norm"] == "RMSNorm");
  CHECK(a["positions"] == "rotary");
  CHECK(a["mlp"] == "gated");
  CHECK(a["qkv"] == "separate");
  CHECK(a["rotary"]["dim"] == 8);
  CHECK(a["rotary"]["scaling"] == "llama3");
  CHECK(a["rotary"]["factor"] == 8.0);
  CHECK(a["rotary"]["original_max_position_embeddings"] == 16.0);
  const test::CliRun neox = test::run_cli("info --model " + test::quote(test::fixture_model("neox_parallel").string()));
  REQUIRE(neox.code == 0);
  const auto n = nlohmann::json::parse(neox.out)["architecture"];
  CHECK(n["family"] == "GPT-NeoX");
  CHECK(n["parallel_blocks"] == true);
  CHECK(n["qkv"] == "fused per head");
  CHECK(n["rotary"]["dim"] == 4);
  CHECK(n["rotary"]["scaling"] == "none");
}
