// llama2.c checkpoints (core/model/llama2c.h): the checks of the file, and greedy generation on
// ../shared/models/stories260K against llama2.c's own run.c, built here from
// ../shared/peers/llama2.c (MIT). The comparison skips, with a note, when ../shared is absent.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/model/forward.h"
#include "core/model/llama2c.h"
#include "core/model/model.h"
#include "core/model/position_rows.h"
#include "forward_reference.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

fs::path stories_dir() { return test::shared_dir() / "models/stories260K"; }

// Runs a shell command, returning its stdout (stderr discarded) and exit status.
std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>/dev/null").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// run.c's decode() and safe_printf() over a token sequence, from tok512.bin read here (so the
// comparison needs no HeadScope tokenizer): after BOS a piece loses its leading space, "<0xXX>"
// is that byte, and an unprintable single byte is not printed.
std::string run_c_text(const fs::path& tokenizer_bin, int32_t vocab_size, const std::vector<int32_t>& ids) {
  std::ifstream in(tokenizer_bin, std::ios::binary);
  int32_t max_len = 0;
  in.read(reinterpret_cast<char*>(&max_len), 4);
  std::vector<std::string> vocab;
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score;
    int32_t len;
    in.read(reinterpret_cast<char*>(&score), 4);
    in.read(reinterpret_cast<char*>(&len), 4);
    std::string s(static_cast<size_t>(len), '\0');
    in.read(s.data(), len);
    vocab.push_back(s);
  }
  REQUIRE(in.good());
  std::string text;
  for (size_t i = 1; i < ids.size(); ++i) {
    std::string piece = vocab[static_cast<size_t>(ids[i])];
    if (ids[i - 1] == 1 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    unsigned byte = 0;
    if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X>", &byte) == 1) piece = std::string(1, static_cast<char>(byte));
    if (piece.empty()) continue;
    if (piece.size() == 1 && !(std::isprint(static_cast<unsigned char>(piece[0])) || std::isspace(static_cast<unsigned char>(piece[0]))))
      continue;
    text += piece;
  }
  return text;
}

}  // namespace

TEST_CASE("llama2.c: stories260K's greedy generation equals run.c's at temperature 0", "[llama2c][shared]") {
  const fs::path dir = stories_dir(), run_c = test::shared_dir() / "peers/llama2.c/run.c";
  if (!fs::exists(dir / "stories260K.bin") || !fs::exists(run_c)) {
    WARN("skipped: " << dir << " or " << run_c << " is absent (optional real-world data)");
    return;
  }
  // Built in this process's own folder: the two tests that run it may run side by side, and one
  // rewriting the program while the other starts it fails with "text file busy".
  const fs::path program = test::scratch_dir() / "llama2c_run";
  REQUIRE(shell("cc -O2 -o " + test::quote(program.string()) + " " + test::quote(run_c.string()) + " -lm").first == 0);
  // run.c's -n: forward steps, each printing the token it predicts. Each step runs the whole prefix
  // again, so the sanitized build stops after three position blocks, still past the block edges.
  constexpr int kSteps = test::kSanitized ? 3 * kPositionBlock : 256;
  const auto [status, expected] =
      shell(test::quote(program.string()) + " " + test::quote((dir / "stories260K.bin").string()) + " -z " +
            test::quote((dir / "tok512.bin").string()) + " -t 0 -n " + std::to_string(kSteps) + " -i ''");
  REQUIRE(status == 0);
  REQUIRE(expected.size() > 100);

  const Llama2cCheckpoint m = load_llama2c_checkpoint(dir / "stories260K.bin");
  const ModelConfig& c = m.config;
  CHECK(c.d_model == 64);
  CHECK(c.n_key_value_heads == 4);
  CHECK(c.n_ctx == 512);
  CHECK(c.architecture.unembedding == UnembeddingTie::Tied);
  // Greedy, as run.c: from BOS, the most likely next token, kSteps times or until BOS again.
  std::vector<int32_t> ids = {1};
  RunOptions o;
  o.logits_only = true;
  while (static_cast<int>(ids.size()) <= kSteps) {
    const auto cache = forward(m.weights, ids, o);
    int32_t next = 0;
    cache->logits.row(cache->n_pos() - 1).maxCoeff(&next);
    if (next == 1) break;
    ids.push_back(next);
  }
  // run.c ends its output with a newline.
  CHECK(run_c_text(dir / "tok512.bin", c.d_vocab, ids) + "\n" == expected);
}

TEST_CASE("llama2.c: headscope-cli generate on stories260K prints what run.c prints", "[llama2c][shared][cli]") {
  const fs::path dir = stories_dir(), run_c = test::shared_dir() / "peers/llama2.c/run.c";
  if (!fs::exists(dir / "stories260K.bin") || !fs::exists(run_c)) {
    WARN("skipped: " << dir << " or " << run_c << " is absent (optional real-world data)");
    return;
  }
  // Its own build of run.c, as in the test above.
  const fs::path program = test::scratch_dir() / "llama2c_run";
  REQUIRE(shell("cc -O2 -o " + test::quote(program.string()) + " " + test::quote(run_c.string()) + " -lm").first == 0);
  // The folder and the checkpoint file open the same model, with llama2.c's tokenizer and BOS.
  const auto by_folder = Model::load(dir);
  const auto by_file = Model::load(dir / "stories260K.bin");
  CHECK(by_folder->name() == "stories260K");
  CHECK(by_file->config().n_layers == by_folder->config().n_layers);
  CHECK(by_folder->bos_id() == 1);
  const std::string prompt = "Once upon a time";
  const std::vector<int32_t> ids = by_folder->encode(prompt, true);
  CHECK(ids == by_file->encode(prompt, true));
  // run.c -n S runs S positions, the prompt's included, and prints every token after BOS; so
  // HeadScope adds S + 1 - (prompt tokens with BOS). The sanitized build stops after three
  // position blocks, as above.
  constexpr int kSteps = test::kSanitized ? 3 * kPositionBlock : 200;
  const auto [status, expected] =
      shell(test::quote(program.string()) + " " + test::quote((dir / "stories260K.bin").string()) + " -z " +
            test::quote((dir / "tok512.bin").string()) + " -t 0 -n " + std::to_string(kSteps) + " -i " +
            test::quote(prompt));
  REQUIRE(status == 0);
  const int n = kSteps + 1 - static_cast<int>(ids.size());
  const test::CliRun r = test::run_cli("generate --model " + test::quote(dir.string()) + " --text " + test::quote(prompt) +
                                       " -n " + std::to_string(n));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out == expected);
}

TEST_CASE("llama2.c: the rotate-half conversion of wq and wk keeps run.c's attention", "[llama2c]") {
  // A tiny checkpoint with random weights; its first layer's scores, computed here the way run.c
  // computes them (interleaved pairs on the file's rows), equal the converted model's.
  const int32_t D = 16, M = 24, L = 1, H = 2, KV = 1, V = 20, C = 8;
  const int64_t hs = D / H, kv = KV * hs;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  const int32_t header[7] = {D, M, L, H, KV, V, C};
  std::vector<float> w(static_cast<size_t>(test::llama2c_floats(header)));
  for (float& x : w) x = noise(rng);
  for (int64_t i = V * D; i < V * D + L * D; ++i) w[static_cast<size_t>(i)] = 1.0f;  // rms_att: ones
  const std::string bytes = test::llama2c_bytes(header, w);
  const auto span = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const Llama2cCheckpoint m = llama2c_checkpoint_from_bytes(span, "tiny.bin");
  const std::vector<int32_t> tokens = {1, 7, 3, 19, 4};
  const auto cache = forward(m.weights, tokens);
  // The slow reference loops agree with the fast pass on the converted model.
  const auto slow = test::forward_reference(m.weights, tokens);
  CHECK(test::compare(slow->get("logits").data, cache->get("logits").data).relative <= 1e-5);
  // run.c's layer-0 scores from the file's own rows.
  const float* embed = w.data();
  const float* wq = w.data() + V * D + L * D;
  const float* wk = wq + L * D * D;
  const int S = static_cast<int>(tokens.size());
  std::vector<std::vector<double>> q(static_cast<size_t>(S), std::vector<double>(D)), k(static_cast<size_t>(S), std::vector<double>(kv));
  for (int p = 0; p < S; ++p) {
    const float* x = embed + tokens[static_cast<size_t>(p)] * D;
    double ss = 0;
    for (int j = 0; j < D; ++j) ss += double{x[j]} * x[j];
    const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
    for (int64_t o = 0; o < D; ++o)
      for (int j = 0; j < D; ++j) q[static_cast<size_t>(p)][static_cast<size_t>(o)] += wq[o * D + j] * x[j] * inv;
    for (int64_t o = 0; o < kv; ++o)
      for (int j = 0; j < D; ++j) k[static_cast<size_t>(p)][static_cast<size_t>(o)] += wk[o * D + j] * x[j] * inv;
    for (int64_t i = 0; i < D; i += 2) {  // run.c's RoPE: pairs (i, i+1)
      const double freq = 1.0 / std::pow(10000.0, static_cast<double>(i % hs) / hs), a = p * freq;
      for (auto* vec : {&q[static_cast<size_t>(p)], &k[static_cast<size_t>(p)]}) {
        if (vec == &k[static_cast<size_t>(p)] && i >= kv) continue;
        const double v0 = (*vec)[static_cast<size_t>(i)], v1 = (*vec)[static_cast<size_t>(i + 1)];
        (*vec)[static_cast<size_t>(i)] = v0 * std::cos(a) - v1 * std::sin(a);
        (*vec)[static_cast<size_t>(i + 1)] = v0 * std::sin(a) + v1 * std::cos(a);
      }
    }
  }
  for (int h = 0; h < H; ++h) {
    const RowMatrixXf ours = cache->head_scores(0, h);
    for (int i = 0; i < S; ++i)
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < hs; ++e) dot += q[static_cast<size_t>(i)][static_cast<size_t>(h * hs + e)] * k[static_cast<size_t>(j)][static_cast<size_t>(e)];
        CHECK(ours(i, j) == Approx(dot / std::sqrt(double(hs))).margin(1e-4));
      }
  }
  // A file cut short, or longer than its header says, is refused with the sizes.
  CHECK_THROWS_WITH(llama2c_checkpoint_from_bytes(span.first(span.size() - 4), "tiny.bin"),
                    Catch::Contains("tiny.bin: is " + std::to_string(span.size() - 4) + " bytes but its header"));
  CHECK_THROWS_WITH(llama2c_checkpoint_from_bytes(span.first(20), "tiny.bin"), Catch::Contains("too short"));
}

TEST_CASE("llama2.c: a checkpoint cut at any length, or with hostile header values, is refused", "[llama2c][refused]") {
  // dim 8, hidden 16, 1 layer, 2 heads, 1 key/value head, vocab 10 (shared), context 4: 696 floats.
  const int32_t header[7] = {8, 16, 1, 2, 1, 10, 4};
  std::string whole(reinterpret_cast<const char*>(header), sizeof header);
  for (int i = 0; i < 696; ++i) {
    const float v = 0.01f * static_cast<float>(i % 17);
    whole.append(reinterpret_cast<const char*>(&v), 4);
  }
  auto load = [](const std::string& bytes) {
    return llama2c_checkpoint_from_bytes(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "c.bin");
  };
  CHECK_NOTHROW(load(whole));
  for (size_t n = 0; n < whole.size(); ++n) {
    INFO("cut to " << n << " bytes");
    CHECK_THROWS_AS(load(whole.substr(0, n)), Error);
  }
  CHECK_THROWS_AS(load(whole + "1234"), Error);  // longer than the header says
  // Each header field zero, negative (but vocab_size, where negative means unshared), huge, or
  // not fitting the others: a message, never an allocation of what the header claims.
  const std::vector<std::pair<int, int32_t>> edits = {{0, 0}, {0, -8}, {0, 1 << 30}, {1, 0}, {2, 0}, {2, 5000},
                                                      {3, 3}, {3, 0}, {4, 3}, {4, 0}, {5, 0}, {6, 0}, {6, 1 << 30},
                                                      {0, 6}, {3, 8}};
  for (const auto& [field, value] : edits) {
    INFO("header field " << field << " = " << value);
    std::string bad = whole;
    std::memcpy(bad.data() + 4 * field, &value, 4);
    CHECK_THROWS_AS(load(bad), Error);
  }
  // A negative vocab_size asks for its own classifier after the weights.
  std::string unshared = whole;
  const int32_t minus_ten = -10;
  std::memcpy(unshared.data() + 20, &minus_ten, 4);
  CHECK_THROWS_WITH(load(unshared), Catch::Contains("implies " + std::to_string(whole.size() + 10 * 8 * 4)));
  for (int i = 0; i < 80; ++i) unshared.append(4, '\0');
  const Llama2cCheckpoint u = load(unshared);
  CHECK_FALSE(u.weights->tied_unembedding());
}
