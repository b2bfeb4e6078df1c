// Shared helpers for the core tests: where the fixtures are, and the comparison the fixture
// README defines (max |reference - ours| / max |reference| per key).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "tests/test_common.h"

namespace hs::test {

inline std::filesystem::path source_dir() { return HEADSCOPE_SOURCE_DIR; }
inline std::filesystem::path fixture_model(const std::string& name) { return source_dir() / "tests/fixtures/models" / name; }
inline std::filesystem::path shared_dir() { return HEADSCOPE_SHARED_DIR; }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A shell word: `s` in single quotes.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// One run of headscope-cli: its exit code (128 + the signal when killed) and what it wrote.
struct CliRun {
  int code = -1;
  std::string out, err;
};

// Runs headscope-cli with `args` (shell text after the program name). `prefix` runs before it in
// the same shell (environment variables, ulimit); `wrapper` runs the program (timeout).
inline CliRun run_cli(const std::string& args, const std::string& prefix = "", const std::string& wrapper = "") {
  static int counter = 0;
  const std::filesystem::path err_file = scratch_dir() / ("cli_err_" + std::to_string(++counter));
  const std::string cmd =
      prefix + " exec " + wrapper + " " + quote(HEADSCOPE_CLI_PATH) + " " + args + " 2>" + quote(err_file.string());
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = read_text(err_file);
  std::filesystem::remove(err_file);
  return r;
}

// One tensor of a safetensors file to write: its dtype as the header spells it, and its raw bytes.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A well-formed safetensors file: tensors laid out one after another, header padded to 8 bytes.
inline std::string build_safetensors(const std::vector<Entry>& entries) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const Entry& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((uint64_t{h.size()} >> (8 * i)) & 0xff);
  return out + h + data;
}

// A float32 vector as numpy.save writes it (NPY format 1.0, little-endian, C order).
inline void write_npy(const std::filesystem::path& path, const std::vector<float>& v) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// A llama2.c checkpoint as its file holds it. `header`: dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size (shared classifier), seq_len; the floats follow, llama2c_floats(header)
// of them in run.c's order (token embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
// rms_final, the rotary tables' seq_len x head_size / 2 x 2).
inline int64_t llama2c_floats(const int32_t (&h)[7]) {
  const int64_t D = h[0], M = h[1], L = h[2], H = h[3], KV = h[4], V = h[5], C = h[6];
  const int64_t hs = D / H, kv = KV * hs;
  return V * D + 2 * L * D + L * D * D + 2 * L * kv * D + L * D * D + 3 * L * M * D + D + C * hs;
}
inline std::string llama2c_bytes(const int32_t (&h)[7], const std::vector<float>& w) {
  std::string bytes(sizeof h, '\0');
  std::memcpy(bytes.data(), h, sizeof h);
  bytes.append(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  return bytes;
}

struct Comparison {
  double max_abs = 0.0;
  double max_ref = 0.0;
  double relative = 0.0;        // max_abs / max_ref
  bool masks_agree = true;      // -inf exactly where the reference has -inf, NaN nowhere
};

inline Comparison compare(const std::vector<float>& reference, const std::vector<float>& ours) {
  Comparison c;
  if (reference.size() != ours.size()) {
    c.masks_agree = false;
    return c;
  }
  for (size_t i = 0; i < reference.size(); ++i) {
    const float r = reference[i], o = ours[i];
    if (!std::isfinite(r) || !std::isfinite(o)) {
      if (!(std::isinf(r) && std::isinf(o) && (r < 0) == (o < 0))) c.masks_agree = false;
      continue;
    }
    c.max_abs = std::max(c.max_abs, static_cast<double>(std::abs(r - o)));
    c.max_ref = std::max(c.max_ref, static_cast<double>(std::abs(r)));
  }
  c.relative = c.max_ref > 0 ? c.max_abs / c.max_ref : c.max_abs;
  return c;
}

// The numbers of a nested JSON array (or one number) in order, as floats.
inline std::vector<float> flatten(const nlohmann::json& a) {
  std::vector<float> out;
  if (a.is_number()) return {a.get<float>()};
  for (const auto& x : a) {
    const std::vector<float> part = flatten(x);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace hs::test
