#include "core/model/memory_guard.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/tensor/safetensors.h"

namespace hs {
namespace {

std::mutex g_override_mutex;
std::optional<uint64_t> g_override;

// "1234", "512M", "3.5G" -> bytes; nullopt when it is not such a figure.
std::optional<uint64_t> parse_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0) return std::nullopt;
  double scale = 1;
  const std::string suffix(end);
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "KB") scale = 1e3;
  else if (suffix == "M" || suffix == "MB") scale = 1e6;
  else if (suffix == "G" || suffix == "GB") scale = 1e9;
  else if (suffix == "T" || suffix == "TB") scale = 1e12;
  else return std::nullopt;
  const double bytes = v * scale;
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::optional<uint64_t> read_number_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  if (!(in >> s) || s == "max") return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

std::optional<uint64_t> mem_available_from_meminfo() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;  // the kernel reports kB
  }
  return std::nullopt;
}

// The room left under the tightest memory limit of this process's cgroup and its ancestors.
std::optional<uint64_t> cgroup_room() {
  namespace fs = std::filesystem;
  std::ifstream in("/proc/self/cgroup");
  std::optional<uint64_t> room;
  auto consider = [&](std::optional<uint64_t> limit, std::optional<uint64_t> used) {
    if (!limit) return;
    const uint64_t r = used && *used < *limit ? *limit - *used : (used ? 0 : *limit);
    room = room ? std::min(*room, r) : r;
  };
  for (std::string line; std::getline(in, line);) {
    // v2: "0::/user.slice/..."; v1: "7:memory:/docker/..."
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    fs::path rel = line.substr(b + 1);
    const bool v2 = controllers.empty();
    const bool v1_memory = controllers.find("memory") != std::string::npos;
    if (!v2 && !v1_memory) continue;
    const fs::path root = v2 ? fs::path("/sys/fs/cgroup") : fs::path("/sys/fs/cgroup/memory");
    for (fs::path p = rel;; p = p.parent_path()) {
      const fs::path dir = root / p.relative_path();
      if (v2) consider(read_number_file(dir / "memory.max"), read_number_file(dir / "memory.current"));
      else {
        // v1 reports "no limit" as a huge number (near 2^63).
        auto limit = read_number_file(dir / "memory.limit_in_bytes");
        if (limit && *limit >= (uint64_t{1} << 60)) limit.reset();
        consider(limit, read_number_file(dir / "memory.usage_in_bytes"));
      }
      if (p.empty() || p == p.root_path()) break;
    }
  }
  return room;
}

// "<doing> needs about <needed> <for_what> but only <available> is available; <advice>"
void refuse_if_short(uint64_t needed, const std::string& doing, const std::string& for_what, const std::string& advice) {
  const std::optional<uint64_t> available = available_memory();
  if (!available || needed <= *available) return;
  throw Error(doing + " needs about " + format_bytes(needed) + " " + for_what + " but only " + format_bytes(*available) +
              " is available; " + advice);
}

struct LoadBytes {
  uint64_t converted = 0;  // F64 (or unaligned F32) tensors, and 16-bit vectors, copied into float32
  uint64_t packed = 0;     // the forward pass's packed copies (Weights::packed)
  uint64_t packed_converted = 0;    // of which packed from a conversion (freed once packed)
  uint64_t largest_converted_packed = 0;
  uint64_t packed_as_f32 = 0;  // the packed copies, were they float32 panels
  // Weights::load converts every such tensor first, then packs the matrices one by one, freeing
  // each conversion once its packed copy exists: the peak is every conversion, the packed copies
  // of tensors read in place (16-bit matrices are packed from the file in 16 bits), and one packed
  // matrix whose conversion is not freed yet.
  uint64_t peak() const { return converted + (packed - packed_converted) + largest_converted_packed; }
  // What a float32 file of the same model would need: only the packed copies.
  uint64_t peak_as_f32() const { return packed_as_f32; }
};

LoadBytes load_bytes(const std::vector<const SafetensorsFile*>& files, const ModelConfig& config) {
  const ArchitectureFamily* family = config.architecture.family;
  auto find = [&](const std::string& name) -> const TensorInfo* {
    for (const SafetensorsFile* f : files)
      if (const TensorInfo* t = f->find(name)) return t;
    return nullptr;
  };
  // Each file tensor the description names, with whether the forward pass packs it.
  std::unordered_map<std::string, bool> packed_by_name;
  const TensorInfo* unembedding = nullptr;
  const TensorInfo* token_embedding = nullptr;
  if (family) {
    for (const TensorSpec& spec : tensor_specs(config)) {
      const TensorInfo* t = find(spec.name);
      if (!t && spec.prefixable) t = find(std::string(family->base_prefix()) + spec.name);
      if (!t) continue;
      packed_by_name[t->name] = is_packed_matrix(spec.role);
      if (spec.role == TensorRole::Unembedding) unembedding = t;
      if (spec.role == TensorRole::TokenEmbedding) token_embedding = t;
    }
  }
  // A tied unembedding is packed from the token embedding.
  if (token_embedding && !unembedding) packed_by_name[token_embedding->name] = true;
  LoadBytes bytes;
  for (const SafetensorsFile* file : files)
    for (const TensorInfo& t : file->tensors()) {
      if (family && family->is_ignorable(t.name)) continue;  // ignored by the loader
      const uint64_t n = static_cast<uint64_t>(t.numel()) * sizeof(float);
      const auto it = packed_by_name.find(t.name);
      const bool packed = it != packed_by_name.end() && it->second;
      const bool half = t.dtype == DType::F16 || t.dtype == DType::BF16;
      if (packed && half) {  // packed from the file in its own 16 bits
        bytes.packed += n / 2;
        bytes.packed_as_f32 += n;
        continue;
      }
      const bool converted = half || t.dtype == DType::F64 || (t.dtype == DType::F32 && file->f32_in_place(t) == nullptr);
      if (converted) bytes.converted += n;
      if (packed) {
        bytes.packed += n;
        bytes.packed_as_f32 += n;
        if (converted) {
          bytes.packed_converted += n;
          bytes.largest_converted_packed = std::max(bytes.largest_converted_packed, n);
        }
      }
    }
  return bytes;
}

}  // namespace

uint64_t estimate_load_bytes(const SafetensorsFile& file, const ModelConfig& config) {
  return load_bytes({&file}, config).peak();
}

uint64_t estimate_cache_bytes(const ModelConfig& c, int64_t n_tokens, const RunOptions& options) {
  // In double: a config at parse_config's limits (sizes up to 2^20, 1024 layers) would overflow
  // 64-bit products; the figure saturates instead of wrapping to something small.
  const double S = static_cast<double>(std::max<int64_t>(n_tokens, 0));
  const double D = c.d_model, M = c.d_mlp, H = c.n_heads, V = c.d_vocab, L = c.n_layers;
  const double Q = H * c.d_head, KV = static_cast<double>(c.n_key_value_heads) * c.d_head;
  const bool learned_positions = c.architecture.positions == PositionKind::LearnedAbsolute;
  // Per layer (cache.h): resid_pre, attn_out, mlp_out [pos, d_model]; q, z [pos, n_heads*d_head];
  // k, v [pos, n_kv*d_head]; the causal pattern's lower triangle [head, tri(pos)]; scores
  // [head, pos, pos] and results [pos, head, d_model] only when stored. The MLP's
  // pre-activations, and q and k before rotation, are derived on request.
  const bool gated = c.architecture.mlp == MlpKind::Gated;
  double per_layer = 3 * S * D + 2 * S * Q + 2 * S * KV + H * S * (S + 1) / 2;
  if (options.store_scores) per_layer += H * S * S;
  if (options.store_results) per_layer += S * H * D;
  const double layers_kept = options.logits_only ? 1 : L;  // logits_only reuses one scratch layer
  // embed, ln_final [pos, d_model], pos_embed too with learned positions; ln_final scale [pos];
  // logits [pos, d_vocab].
  const double global = (learned_positions ? 3 : 2) * S * D + S + S * V;
  // Transient, at different times: the forward pass's working matrices (the fused QKV
  // [pos, (n_heads + 2*n_kv)*d_head], the residual, the norm's output, two [pos, d_model] sums, the
  // MLP activation [pos, d_mlp] (and a gate's), the new logits [pos, d_vocab]), or afterwards the
  // largest key an export or a view derives on request (hook_attn_scores [head, pos, pos],
  // hook_result [pos, head, d_model], or hook_post with the pre-activations it is derived from).
  const double transient = std::max({S * ((Q + 2 * KV) + 4 * D + (gated ? 2 : 1) * M + V), H * S * S, S * H * D,
                                     (gated ? 3 : 2) * S * M + S * D});
  const double bytes = (layers_kept * per_layer + global + transient) * sizeof(float);
  return bytes >= 1.8e19 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(bytes);
}

std::optional<uint64_t> available_memory() {
  {
    std::lock_guard<std::mutex> lock(g_override_mutex);
    if (g_override) return g_override;
  }
  if (const char* env = std::getenv("HEADSCOPE_AVAILABLE_MEMORY"); env && *env)
    if (auto v = parse_size(env)) return v;
  std::optional<uint64_t> avail = mem_available_from_meminfo();
  if (const auto room = cgroup_room()) avail = avail ? std::min(*avail, *room) : *room;
  return avail;
}

void set_available_memory_override(std::optional<uint64_t> bytes) {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  g_override = bytes;
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= 1'000'000'000ull) std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  else if (bytes >= 1'000'000ull) std::snprintf(buf, sizeof buf, "%.0f MB", static_cast<double>(bytes) / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f KB", std::ceil(static_cast<double>(bytes) / 1e3));
  return buf;
}

void check_load_memory(const SafetensorsFile& file, const ModelConfig& config, const std::string& model_name) {
  check_load_memory(std::vector<const SafetensorsFile*>{&file}, config, model_name);
}

void check_load_memory(const std::vector<const SafetensorsFile*>& shards, const ModelConfig& config,
                       const std::string& model_name) {
  const LoadBytes b = load_bytes(shards, config);
  if (b.peak() == 0) return;
  // A float32 copy helps only when the conversions are what costs (F64, unaligned F32): 16-bit
  // matrices are packed in 16 bits, half what float32 panels need.
  if (b.converted == 0 || b.peak_as_f32() >= b.peak()) {
    refuse_if_short(b.peak(), "loading " + model_name, "for its weights laid out for the forward pass",
                    "close other programs, or choose a smaller model.");
    return;
  }
  refuse_if_short(b.peak(), "loading " + model_name,
                  "for its weights converted to float32 and laid out for the forward pass",
                  "close other programs, or use a float32 (F32) copy of the model, which is read in place from the "
                  "file and needs " + format_bytes(b.peak() - std::min(b.peak(), b.peak_as_f32())) + " less.");
}

void check_run_memory(const ModelConfig& config, int64_t n_tokens, const RunOptions& options,
                      const std::string& model_name) {
  refuse_if_short(estimate_cache_bytes(config, n_tokens, options),
                  "running " + std::to_string(n_tokens) + (n_tokens == 1 ? " token" : " tokens") + " through " +
                      model_name,
                  "for the activation cache", "use fewer tokens or close other programs.");
}

}  // namespace hs
