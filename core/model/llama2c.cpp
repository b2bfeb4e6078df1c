#include "core/model/llama2c.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/tensor/safetensors.h"

namespace hs {
namespace fs = std::filesystem;
namespace {

constexpr int kHeaderInts = 7;

// Pickle checkpoints (pytorch_model.bin, a trainer's model.bin) share the extension: a zip archive
// or a pickle stream's protocol byte. Those are refused elsewhere, never read as weights.
bool looks_like_pickle(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  return (in.gcount() >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) ||
         (in.gcount() >= 1 && static_cast<unsigned char>(head[0]) == 0x80);
}

bool is_tokenizer_name(const std::string& name) {
  return name == "tokenizer.bin" || (name.rfind("tok", 0) == 0 && name.ends_with(".bin"));
}

// The tokenizer .bin in `dir` (other than `checkpoint`): tokenizer.bin, else the one tok*.bin.
std::optional<fs::path> tokenizer_in(const fs::path& dir, const fs::path& checkpoint) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer.bin", ec) && dir / "tokenizer.bin" != checkpoint) return dir / "tokenizer.bin";
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path() != checkpoint && is_tokenizer_name(name) && e.is_regular_file(ec)) found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  if (found.size() > 1)
    throw Error(dir.string() + ": holds several llama2.c tokenizers (" + found[0].filename().string() + ", " +
                found[1].filename().string() + "); keep the one that belongs to the checkpoint, or name it tokenizer.bin.");
  if (found.empty()) return std::nullopt;
  return found[0];
}

void append_f32(std::string& out, const float* p, int64_t n) {
  out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

std::optional<Llama2cFiles> find_llama2c_files(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (path.extension() != ".bin" || is_tokenizer_name(path.filename().string()) || looks_like_pickle(path))
      return std::nullopt;
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    const std::optional<fs::path> tok = tokenizer_in(dir, path);
    if (!tok)
      throw Error(path.string() + ": a llama2.c checkpoint needs its tokenizer beside it (tokenizer.bin or tok*.bin, "
                  "such as llama2.c's tokenizer.bin or tok512.bin); there is none in " + dir.string() + ".");
    return Llama2cFiles{path, *tok};
  }
  if (!fs::is_directory(path, ec) || fs::exists(path / "config.json", ec)) return std::nullopt;
  std::vector<fs::path> checkpoints;
  bool any_tokenizer = false;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".bin") || !e.is_regular_file(ec)) continue;
    if (is_tokenizer_name(name)) any_tokenizer = true;
    else if (!looks_like_pickle(e.path())) checkpoints.push_back(e.path());
  }
  if (!any_tokenizer || checkpoints.empty()) return std::nullopt;
  std::sort(checkpoints.begin(), checkpoints.end());
  if (checkpoints.size() > 1)
    throw Error(path.string() + ": holds several llama2.c checkpoints (" + checkpoints[0].filename().string() + ", " +
                checkpoints[1].filename().string() + "); open one of them by its file, as --model " +
                checkpoints[0].string() + ".");
  return Llama2cFiles{checkpoints[0], *tokenizer_in(path, checkpoints[0])};
}

Llama2cCheckpoint load_llama2c_checkpoint(const fs::path& bin) {
  std::error_code ec;
  if (!fs::is_regular_file(bin, ec)) throw Error(bin.string() + ": not found or not a regular file.");
  std::ifstream in(bin, std::ios::binary);
  if (!in) throw Error(bin.string() + ": cannot open (" + std::strerror(errno) + "); check that it is readable.");
  const uint64_t size = fs::file_size(bin, ec);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) throw Error(bin.string() + ": cannot read the whole file.");
  return llama2c_checkpoint_from_bytes(bytes, bin.string());
}

Llama2cCheckpoint llama2c_checkpoint_from_bytes(std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.size() < kHeaderInts * sizeof(int32_t))
    throw Error(name + ": " + std::to_string(bytes.size()) +
                " bytes, too short for a llama2.c checkpoint (its header is 7 int32). The file is truncated or not a "
                "llama2.c checkpoint.");
  int32_t h[kHeaderInts];
  std::memcpy(h, bytes.data(), sizeof h);
  const char* fields[kHeaderInts] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < kHeaderInts; ++i) {
    const int64_t v = i == 5 ? std::abs(int64_t{h[i]}) : h[i];
    if (v <= 0 || v > kMaxConfigDim)
      throw Error(name + ": header field " + fields[i] + " is " + std::to_string(h[i]) + "; expected a positive size up to " +
                  std::to_string(kMaxConfigDim) + ". The file is not a llama2.c checkpoint.");
  }
  const int64_t D = h[0], M = h[1], L = h[2], H = h[3], KV = h[4], V = std::abs(int64_t{h[5]}), C = h[6];
  const bool shared = h[5] > 0;
  if (L > kMaxLayers)
    throw Error(name + ": header says " + std::to_string(L) + " layers; at most " + std::to_string(kMaxLayers) +
                " are accepted.");
  if (D % H != 0 || (D / H) % 2 != 0 || H % KV != 0)
    throw Error(name + ": header sizes do not fit together (dim " + std::to_string(D) + ", n_heads " + std::to_string(H) +
                ", n_kv_heads " + std::to_string(KV) +
                "): dim must split into heads of an even size, and n_heads must be a multiple of n_kv_heads.");
  const int64_t hs = D / H, kv_dim = KV * hs;
  // Floats of each tensor, in the file's order (see llama2c.h).
  const int64_t n_embed = V * D, n_norm = L * D, n_q = L * D * D, n_kv = L * kv_dim * D, n_o = L * D * D,
                n_mlp = L * M * D, n_rope = C * hs / 2;
  const uint64_t floats = static_cast<uint64_t>(n_embed + 2 * n_norm + n_q + 2 * n_kv + n_o + 3 * n_mlp + D + 2 * n_rope +
                                                (shared ? 0 : n_embed));
  const uint64_t expected = kHeaderInts * sizeof(int32_t) + floats * sizeof(float);
  if (bytes.size() != expected)
    throw Error(name + ": is " + std::to_string(bytes.size()) + " bytes but its header (dim " + std::to_string(D) +
                ", hidden_dim " + std::to_string(M) + ", n_layers " + std::to_string(L) + ", n_heads " +
                std::to_string(H) + ", n_kv_heads " + std::to_string(KV) + ", vocab_size " + std::to_string(h[5]) +
                ", seq_len " + std::to_string(C) + ") implies " + std::to_string(expected) +
                ". The file is truncated or not a llama2.c checkpoint.");

  // The weights as float32 (copied: the file's floats need not be aligned).
  std::vector<float> w(floats);
  std::memcpy(w.data(), bytes.data() + kHeaderInts * sizeof(int32_t), floats * sizeof(float));
  const float* p = w.data();
  auto take = [&](int64_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  const float* embed = take(n_embed);
  const float* rms_att = take(n_norm);
  const float* wq = take(n_q);
  const float* wk = take(n_kv);
  const float* wv = take(n_kv);
  const float* wo = take(n_o);
  const float* rms_ffn = take(n_norm);
  const float* w1 = take(n_mlp);
  const float* w2 = take(n_mlp);
  const float* w3 = take(n_mlp);
  const float* rms_final = take(D);
  take(2 * n_rope);  // the RoPE tables older exports wrote; the forward pass computes its own
  const float* wcls = shared ? nullptr : take(n_embed);

  // The description: a Llama config.json of these sizes, read by the Llama entry.
  const nlohmann::json config = {
      {"model_type", "llama"},       {"architectures", {"LlamaForCausalLM"}},
      {"hidden_size", D},            {"intermediate_size", M},
      {"num_hidden_layers", L},      {"num_attention_heads", H},
      {"num_key_value_heads", KV},   {"vocab_size", V},
      {"max_position_embeddings", C}, {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},       {"hidden_act", "silu"},
      {"tie_word_embeddings", shared}, {"bos_token_id", 1},
      {"eos_token_id", 2}};
  ModelConfig c = parse_config(config.dump(), name);

  // Its tensors under Llama's names, as an in-memory safetensors file.
  std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, std::string>>> tensors;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, const float* data, int64_t count) {
    std::string blob;
    append_f32(blob, data, count);
    tensors.push_back({n, {std::move(shape), std::move(blob)}});
  };
  // run.c's pair (2i, 2i+1) of each head becomes (i, i + hs/2): the rows of each head reordered.
  auto rotate_half_rows = [&](const float* m, int64_t heads) {
    std::vector<float> out(static_cast<size_t>(heads * hs * D));
    for (int64_t head = 0; head < heads; ++head)
      for (int64_t r = 0; r < hs; ++r) {
        const int64_t src = r < hs / 2 ? 2 * r : 2 * (r - hs / 2) + 1;
        std::copy_n(m + (head * hs + src) * D, D, out.data() + (head * hs + r) * D);
      }
    return out;
  };
  add("model.embed_tokens.weight", {V, D}, embed, n_embed);
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    add(pre + "input_layernorm.weight", {D}, rms_att + l * D, D);
    const std::vector<float> q = rotate_half_rows(wq + l * D * D, H), k = rotate_half_rows(wk + l * kv_dim * D, KV);
    add(pre + "self_attn.q_proj.weight", {D, D}, q.data(), D * D);
    add(pre + "self_attn.k_proj.weight", {kv_dim, D}, k.data(), kv_dim * D);
    add(pre + "self_attn.v_proj.weight", {kv_dim, D}, wv + l * kv_dim * D, kv_dim * D);
    add(pre + "self_attn.o_proj.weight", {D, D}, wo + l * D * D, D * D);
    add(pre + "post_attention_layernorm.weight", {D}, rms_ffn + l * D, D);
    add(pre + "mlp.gate_proj.weight", {M, D}, w1 + l * M * D, M * D);
    add(pre + "mlp.down_proj.weight", {D, M}, w2 + l * M * D, M * D);
    add(pre + "mlp.up_proj.weight", {M, D}, w3 + l * M * D, M * D);
  }
  add("model.norm.weight", {D}, rms_final, D);
  if (wcls) add("lm_head.weight", {V, D}, wcls, n_embed);
  w = std::vector<float>();  // copied into the blobs

  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (auto& [n, t] : tensors) {
    header[n] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {data.size(), data.size() + t.second.size()}}};
    data += t.second;
    std::string().swap(t.second);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  file += text;
  file += data;
  std::string().swap(data);
  const auto st = SafetensorsFile::from_bytes(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(file.data()), file.size()), name);
  return Llama2cCheckpoint{c, Weights::load(st, c)};
}

}  // namespace hs
