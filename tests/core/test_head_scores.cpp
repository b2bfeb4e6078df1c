// Head scores on hand-made weights whose answers are known, and the scoring arithmetic itself.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "core/analysis/head_scores.h"
#include "core/io/export.h"
#include "core/model/model.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

// A one-layer, one-head GPT-2 with D = 16 and 8 positions, built by hand. Token embeddings carry
// the token as +-1 on dims (t mod 8) * 2 .. +1; position embeddings are zero-mean pairs
// e_{2i} - e_{2i+1}. Which of them the head reads is chosen per test.
struct HandModel {
  static constexpr int D = 16, C = 8, V = 291;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;

  HandModel() {
    auto zeros = [](std::vector<int64_t> shape) {
      return std::make_pair(shape, std::vector<float>(static_cast<size_t>(Tensor::count(shape)), 0.0f));
    };
    tensors["wte.weight"] = zeros({V, D});
    tensors["wpe.weight"] = zeros({C, D});
    for (int i = 0; i < C; ++i) {
      tensors["wpe.weight"].second[static_cast<size_t>(i * D + 2 * i)] = 1.0f;
      tensors["wpe.weight"].second[static_cast<size_t>(i * D + 2 * i + 1)] = -1.0f;
    }
    for (const char* ln : {"h.0.ln_1", "h.0.ln_2", "ln_f"}) {
      tensors[std::string(ln) + ".weight"] = std::make_pair(std::vector<int64_t>{D}, std::vector<float>(D, 1.0f));
      tensors[std::string(ln) + ".bias"] = zeros({D});
    }
    tensors["h.0.attn.c_attn.weight"] = zeros({D, 3 * D});
    tensors["h.0.attn.c_attn.bias"] = zeros({3 * D});
    tensors["h.0.attn.c_proj.weight"] = zeros({D, D});
    tensors["h.0.attn.c_proj.bias"] = zeros({D});
    tensors["h.0.mlp.c_fc.weight"] = zeros({D, 4 * D});
    tensors["h.0.mlp.c_fc.bias"] = zeros({4 * D});
    tensors["h.0.mlp.c_proj.weight"] = zeros({4 * D, D});
    tensors["h.0.mlp.c_proj.bias"] = zeros({D});
  }
  float& attn(int row, int col) { return tensors["h.0.attn.c_attn.weight"].second[static_cast<size_t>(row * 3 * D + col)]; }

  // Writes a model folder (config, safetensors, the fixtures' tokenizer) and loads it.
  std::shared_ptr<const Model> load(const std::string& name) {
    const fs::path dir = test::scratch_dir() / ("hand_" + name);
    fs::create_directories(dir);
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto& [tname, t] : tensors) {
      header[tname] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {data.size(), data.size() + t.second.size() * 4}}};
      data.append(reinterpret_cast<const char*>(t.second.data()), t.second.size() * 4);
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    write_file_atomically(dir / "model.safetensors", file + h + data);
    write_file_atomically(dir / "config.json", nlohmann::json({{"model_type", "gpt2"}, {"n_embd", D}, {"n_head", 1},
                                                               {"n_layer", 1}, {"n_positions", C}, {"vocab_size", V},
                                                               {"bos_token_id", 290}})
                                                    .dump());
    for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(test::fixture_model("f32_prefixed") / f, dir / f,
                                                                     fs::copy_options::overwrite_existing);
    return Model::load(dir);
  }
};

}  // namespace

TEST_CASE("mean_offset_attention averages the chosen diagonal", "[head_scores]") {
  RowMatrixXf p = RowMatrixXf::Zero(5, 5);
  p(0, 0) = 1;
  p(1, 0) = 1;
  p(2, 1) = 0.5f, p(2, 2) = 0.5f;
  p(3, 2) = 1;
  p(4, 3) = 0.25f, p(4, 0) = 0.75f;
  CHECK(mean_offset_attention(p, 1, 2, 4) == Approx((0.5 + 1 + 0.25) / 3));
  CHECK(mean_offset_attention(p, 1, 1, 4) == Approx((1 + 0.5 + 1 + 0.25) / 4));
  CHECK(mean_offset_attention(p, 4, 4, 4) == Approx(0.75));
  CHECK(mean_offset_attention(p, 3, 0, 2) == 0.0f);  // no query has a key 3 back in 0..2
}

TEST_CASE("a hand-made previous-token head scores 1", "[head_scores]") {
  HandModel m;
  // K reads the position pair as is; Q maps position i's pair onto position i-1's, scaled up so
  // the softmax is all but one-hot: score(i, i-1) = 10 * 8 * 0.25 = 20, every other score 0.
  for (int i = 1; i < HandModel::C; ++i) {
    m.attn(2 * i, 2 * (i - 1)) = 10.0f;
    m.attn(2 * i + 1, 2 * (i - 1) + 1) = 10.0f;
  }
  for (int d = 0; d < HandModel::D; ++d) m.attn(d, HandModel::D + d) = 1.0f;
  const auto model = m.load("prev");
  const std::vector<int32_t> prose = {290, 5, 6, 7, 8, 9, 10, 11};
  const HeadScores s = compute_head_scores(model->weights(), prose, {{290, 1, 2, 3, 1, 2, 3}}, 3);
  CHECK(s.previous_token(0, 0) == Approx(1.0).margin(1e-6));
  // On BOS + R + R the head still looks one back: at i = n+1..2n that is never i-n or i-n+1
  // (n = 3), except that i-1 == i-n+1 would need n = 2.
  CHECK(s.duplicate_token(0, 0) == Approx(0.0).margin(1e-6));
  CHECK(s.induction(0, 0) == Approx(0.0).margin(1e-6));
  const HeadScores s2 = compute_head_scores(model->weights(), prose, {{290, 1, 2, 1, 2}}, 2);
  CHECK(s2.induction(0, 0) == Approx(1.0).margin(1e-6));  // with n = 2, i-n+1 is the previous token
}

TEST_CASE("a hand-made duplicate-token head splits between the copy and itself", "[head_scores]") {
  HandModel m;
  // Tokens 1..3 are embedded on the token dims only (zero mean); Q and K read them, so each
  // query attends equally to every position holding its own token and nowhere else.
  auto& wte = m.tensors["wte.weight"].second;
  for (int t = 1; t <= 3; ++t) {
    wte[static_cast<size_t>(t * HandModel::D + 2 * t)] = 4.0f;
    wte[static_cast<size_t>(t * HandModel::D + 2 * t + 1)] = -4.0f;
  }
  // Position embeddings off for this head: make them tiny.
  for (float& x : m.tensors["wpe.weight"].second) x *= 1e-4f;
  for (int d = 0; d < HandModel::D; ++d) {
    m.attn(d, d) = 10.0f;
    m.attn(d, HandModel::D + d) = 1.0f;
  }
  const auto model = m.load("dup");
  const std::vector<int32_t> prose = {290, 1, 2, 3};
  const HeadScores s = compute_head_scores(model->weights(), prose, {{290, 1, 2, 3, 1, 2, 3}}, 3);
  CHECK(s.duplicate_token(0, 0) == Approx(0.5).margin(1e-3));
  CHECK(s.induction(0, 0) == Approx(0.0).margin(1e-3));
}
