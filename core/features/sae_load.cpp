// Reading SAE and transcoder folders (sae.h lists the formats). Every tensor is checked by name,
// shape and value before it is used, and every tensor of the file must be one the architecture
// has (SAELens and circuit-tracer load with load_state_dict, which refuses unexpected keys too).
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/features/sae.h"
#include "core/features/sae_config.h"
#include "core/io/npz_reader.h"
#include "core/tensor/safetensors.h"

namespace hs {
namespace {

namespace fs = std::filesystem;

std::string read_config_text(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec))
    throw Error(p.string() + ": is not a regular file (a device, pipe or socket); expected a config file.");
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open (" + std::strerror(errno) + "); check that it is readable.");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (in.bad()) throw Error(p.string() + ": cannot read (" + std::strerror(errno) + ").");
  if (text.empty()) throw Error(p.string() + ": is empty.");
  if (text.size() > 16 * 1024 * 1024) throw Error(p.string() + ": is larger than 16 MB; not a config file.");
  return text;
}

std::string number_text(float v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

std::string shape_text(const std::vector<int64_t>& s) { return shape_string(s); }

// The tensors of one weights file, converted to float32, taken one by one as the SAE is built.
class TensorBag {
 public:
  TensorBag(std::map<std::string, Tensor> tensors, std::string file) : t_(std::move(tensors)), file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  bool has(const std::string& name) const { return t_.count(name) != 0; }
  const Tensor* peek(const std::string& name) const {
    const auto it = t_.find(name);
    return it == t_.end() ? nullptr : &it->second;
  }

  // The tensor `name` of shape `shape` (`dims` spells the shape in words for the message).
  Tensor take(const std::string& name, const std::vector<int64_t>& shape, const std::string& dims,
              const std::string& needs) {
    const auto it = t_.find(name);
    if (it == t_.end()) throw Error(file_ + ": has no tensor \"" + name + "\"; " + needs + ".");
    Tensor t = std::move(it->second);
    t_.erase(it);
    if (t.shape != shape)
      throw Error(file_ + ": tensor \"" + name + "\" has shape " + shape_text(t.shape) + ", expected " + dims + " = " +
                  shape_text(shape) + ".");
    for (size_t i = 0; i < t.data.size(); ++i)
      if (!std::isfinite(t.data[i]))
        throw Error(file_ + ": tensor \"" + name + "\" holds " + (std::isnan(t.data[i]) ? "NaN" : "infinity") +
                    " at element " + std::to_string(i) + "; the SAE cannot be run. Use an intact copy of the file.");
    return t;
  }

  void drop(const std::string& name) { t_.erase(name); }
  void rename(const std::string& from, const std::string& to) {
    if (t_.count(to)) return;
    auto node = t_.extract(from);
    if (node.empty()) return;
    node.key() = to;
    t_.insert(std::move(node));
  }

  // Refuses what is left.
  void expect_empty(const std::string& what) const {
    if (t_.empty()) return;
    throw Error(file_ + ": has a tensor \"" + t_.begin()->first + "\" that " + what +
                " does not have; HeadScope will not guess what it is for.");
  }

 private:
  std::map<std::string, Tensor> t_;
  std::string file_;
};

TensorBag read_safetensors(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec))
    throw Error(p.string() + ": is missing. An SAE folder holds its weights beside its config; download the whole folder.");
  const auto f = SafetensorsFile::open(p);
  std::map<std::string, Tensor> out;
  for (const TensorInfo& t : f->tensors()) {
    Tensor x(t.shape);
    if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || t.dtype == DType::F64) {
      f->to_f32(t, x.data.data());
    } else if ((t.dtype == DType::I64 || t.dtype == DType::I32) && t.name == "k" && t.numel() == 1) {
      // circuit-tracer's SingleLayerTranscoder.to_safetensors stores a TopK's k as an integer.
      const auto raw = f->raw_bytes(t);
      int64_t v = 0;
      if (t.dtype == DType::I64) std::memcpy(&v, raw.data(), 8);
      else { int32_t v32; std::memcpy(&v32, raw.data(), 4); v = v32; }
      x.data[0] = static_cast<float>(v);
    } else {
      throw Error(p.string() + ": tensor \"" + t.name + "\" is " + t.dtype_text +
                  "; SAE weights are read as F32, F16, BF16 or F64.");
    }
    out.emplace(t.name, std::move(x));
  }
  return TensorBag(std::move(out), p.string());
}

// Gemma Scope's params.npz ("W_enc" or "w_enc", ...: SAELens's gemma_2 loader renames w_ to W_).
TensorBag read_params_npz(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) throw Error(p.string() + ": is missing; download the whole folder.");
  std::map<std::string, Tensor> out;
  for (NpzArray& a : read_npz_file(p)) {
    std::string name = a.name;
    if (name.rfind("w_", 0) == 0) name = "W_" + name.substr(2);
    out.emplace(name, std::move(a.tensor));
  }
  return TensorBag(std::move(out), p.string());
}

RowMatrixXf matrix(const Tensor& t) {
  return ConstMatrixRef(t.data.data(), t.shape[0], t.shape[1]);
}
RowMatrixXf matrix_transposed(const Tensor& t) {
  return ConstMatrixRef(t.data.data(), t.shape[0], t.shape[1]).transpose();
}
RowVectorXf vec(const Tensor& t) { return ConstRowVectorRef(t.data.data(), static_cast<Eigen::Index>(t.data.size())); }

void finish(Sae& s) {
  s.W_dec_norm = s.W_dec.rowwise().norm().transpose();
  if (s.activation == SaeActivation::TopK && s.k > s.d_sae)
    throw Error(s.name + ": k is " + std::to_string(s.k) + ", more than its " + std::to_string(s.d_sae) + " latents.");
}

// ---------------------------------------------------------------- SAELens

// One SAELens SAE from its config and weights (SAE.load_from_disk with sae_lens_disk_loader;
// the state dict names are the SAE classes' parameters).
Sae saelens_sae(const SaeLensConfig& c, TensorBag& w, const std::string& name, const std::string& cfg_file) {
  Sae s;
  s.name = name;
  s.architecture = c.architecture;
  s.source_format = c.source_format;
  s.hook_in = c.hook_in;
  s.hook_out = c.hook_out;
  s.layer = c.layer;
  s.d_in = c.d_in;
  s.d_sae = c.d_sae;
  s.d_out = c.transcoder() ? c.d_out : c.d_in;
  if (s.d_out == 0) {
    const Tensor* b = w.peek("b_dec");
    if (!b || b->shape.size() != 1 || b->shape[0] < 1)
      throw Error(cfg_file + ": gives no d_out, and " + w.file() + " has no b_dec [d_out] to take it from; add d_out.");
    s.d_out = static_cast<int>(b->shape[0]);
  }
  s.norm = c.norm;
  s.norm_out = !c.transcoder();  // Transcoder.decode skips run_time_activation_norm_fn_out
  s.apply_b_dec_to_input = c.apply_b_dec_to_input;
  s.hook_z = c.hook_z;
  s.relu_after = true;
  const int64_t din = s.d_in, dsae = s.d_sae, dout = s.d_out;
  const std::string needs = "a SAELens " + c.architecture + " has W_enc, W_dec, b_dec and " +
                            (c.architecture == "gated" ? "b_gate, r_mag, b_mag" : "b_enc") +
                            (c.architecture.find("jumprelu") != std::string::npos ? " and threshold" : "") +
                            (c.architecture == "skip_transcoder" ? " and W_skip" : "");
  s.W_enc = matrix(w.take("W_enc", {din, dsae}, "[d_in, d_sae]", needs));
  s.W_dec = matrix(w.take("W_dec", {dsae, dout}, c.transcoder() ? "[d_sae, d_out]" : "[d_sae, d_in]", needs));
  s.b_dec = vec(w.take("b_dec", {dout}, c.transcoder() ? "[d_out]" : "[d_in]", needs));
  if (c.architecture == "gated") {
    s.activation = SaeActivation::Gated;
    s.b_gate = vec(w.take("b_gate", {dsae}, "[d_sae]", needs));
    s.r_mag = vec(w.take("r_mag", {dsae}, "[d_sae]", needs));
    s.b_mag = vec(w.take("b_mag", {dsae}, "[d_sae]", needs));
  } else {
    s.b_enc = vec(w.take("b_enc", {dsae}, "[d_sae]", needs));
  }
  if (c.architecture == "jumprelu" || c.architecture == "jumprelu_transcoder") {
    s.activation = SaeActivation::JumpRelu;
    if (!w.has("threshold") && w.has("log_threshold")) {
      // A JumpReLU training checkpoint keeps log_threshold (JumpReLUTrainingSAE); threshold = exp.
      Tensor t = w.take("log_threshold", {dsae}, "[d_sae]", needs);
      s.threshold = vec(t).array().exp();
    } else {
      s.threshold = vec(w.take("threshold", {dsae}, "[d_sae]", needs));
    }
  } else if (c.architecture == "topk") {
    s.activation = SaeActivation::TopK;
    s.k = c.k;
    s.rescale_acts_by_decoder_norm = c.rescale_acts_by_decoder_norm;
  }
  if (c.architecture == "skip_transcoder") s.W_skip = matrix(w.take("W_skip", {dout, din}, "[d_out, d_in]", needs));
  // read_sae_components_from_disk: a scaling_factor of ones is dropped; any other is the
  // pre-6.0 finetuning scaling factor, which SAELens 6 no longer applies.
  if (w.has("scaling_factor")) {
    const Tensor t = w.take("scaling_factor", {dsae}, "[d_sae]", needs);
    for (size_t i = 0; i < t.data.size(); ++i)
      if (t.data[i] != 1.0f)
        throw Error(w.file() + ": scaling_factor[" + std::to_string(i) + "] is " + number_text(t.data[i]) +
                    ", not 1: a pre-6.0 finetuning scaling factor, which SAELens 6 does not apply. Fold it into the "
                    "decoder (W_dec[i] *= scaling_factor[i]) or load the SAE with SAELens 6 and save it again.");
  }
  w.expect_empty("a SAELens " + c.architecture);
  finish(s);
  return s;
}

SaeSet load_saelens(const fs::path& dir) {
  const fs::path cfg_file = dir / "cfg.json";
  const SaeLensConfig c = parse_saelens_config(read_config_text(cfg_file), cfg_file.string());
  std::error_code ec;
  const fs::path st = dir / "sae_weights.safetensors", npz = dir / "params.npz";
  TensorBag w = !fs::exists(st, ec) && fs::exists(npz, ec) ? read_params_npz(npz) : read_safetensors(st);
  SaeSet set;
  set.folder = dir;
  set.saes.push_back(saelens_sae(c, w, dir.filename().string(), cfg_file.string()));
  return set;
}

// ---------------------------------------------------------------- Gemma Scope params.npz

// The hook a Gemma Scope folder was trained on, from its path, as SAELens's gemma_2 loaders read
// it from the repository and folder names: ".../gemma-scope-2b-pt-res/layer_12/width_16k/
// average_l0_82" is blocks.12.hook_resid_post (-mlp: hook_mlp_out, -att: attn.hook_z, -transcoders:
// a transcoder from ln2.hook_normalized to hook_mlp_out).
SaeSet load_gemma_scope(const fs::path& dir) {
  const fs::path file = dir / "params.npz";
  int layer = -1;
  std::string kind;
  static const std::regex layer_re("layer_([0-9]{1,4})");
  int depth = 0;
  for (fs::path p = fs::absolute(dir); depth < 8 && p.has_filename(); p = p.parent_path(), ++depth) {
    const std::string n = p.filename().string();
    std::smatch m;
    if (layer < 0 && std::regex_match(n, m, layer_re)) layer = std::stoi(m[1]);
    if (kind.empty() && n.find("gemma-scope") != std::string::npos) {
      if (n.find("transcoders") != std::string::npos) kind = "transcoders";
      else if (n.find("-res") != std::string::npos) kind = "res";
      else if (n.find("-mlp") != std::string::npos) kind = "mlp";
      else if (n.find("-att") != std::string::npos) kind = "att";
    }
    if (n.find("embedding") != std::string::npos)
      throw Error(dir.string() + ": a Gemma Scope embedding SAE, which HeadScope does not read.");
  }
  if (layer < 0 || kind.empty())
    throw Error(file.string() + ": a Gemma Scope params.npz names no hook; HeadScope reads it from the folder names "
                "(gemma-scope-2b-pt-res/layer_12/...), as SAELens does, and finds none here. Keep Gemma Scope's folder "
                "names, or put a SAELens cfg.json beside params.npz.");
  SaeLensConfig c;
  c.source_format = "gemma-scope npz";
  c.layer = layer;
  c.apply_b_dec_to_input = false;
  c.normalize_activations = "none";
  const std::string b = "blocks." + std::to_string(layer) + ".";
  if (kind == "transcoders") {
    c.architecture = "jumprelu_transcoder";
    c.hook_in = b + "ln2.hook_normalized";
    c.hook_out = b + "hook_mlp_out";
  } else {
    c.architecture = "jumprelu";
    c.hook_in = c.hook_out = b + (kind == "res" ? "hook_resid_post" : kind == "mlp" ? "hook_mlp_out" : "attn.hook_z");
    c.hook_z = kind == "att";
  }
  TensorBag w = read_params_npz(file);
  const Tensor* W = w.peek("W_enc");
  if (!W || W->shape.size() != 2)
    throw Error(file.string() + ": has no two-dimensional W_enc [d_in, d_sae]; not a Gemma Scope params.npz.");
  c.d_in = static_cast<int>(W->shape[0]);
  c.d_sae = static_cast<int>(W->shape[1]);
  const Tensor* bd = w.peek("b_dec");
  c.d_out = bd && bd->shape.size() == 1 ? static_cast<int>(bd->shape[0]) : c.d_in;
  SaeSet set;
  set.folder = dir;
  set.saes.push_back(saelens_sae(c, w, dir.filename().string(), file.string()));
  return set;
}

// ---------------------------------------------------------------- circuit-tracer

// One layer of a circuit-tracer transcoder set (circuit_tracer/transcoder/single_layer_transcoder.py:
// load_transcoder for .safetensors, W_enc [d_transcoder, d_model]; load_gemma_scope_transcoder for
// Gemma Scope's params.npz, W_enc [d_model, d_transcoder]).
Sae circuit_tracer_layer(const TranscoderSetConfig& c, const fs::path& file, int layer, const std::string& cfg_file) {
  const bool npz = file.extension() == ".npz";
  TensorBag w = npz ? read_params_npz(file) : read_safetensors(file);
  // load_gemma_scope_transcoder: "threshold" is the JumpReLU's activation_function.threshold.
  if (npz) w.rename("threshold", "activation_function.threshold");
  const Tensor* be = w.peek("b_enc");
  const Tensor* bd = w.peek("b_dec");
  if (!be || !bd || be->shape.size() != 1 || bd->shape.size() != 1 || be->shape[0] < 1 || bd->shape[0] < 1)
    throw Error(w.file() + ": needs b_enc [d_transcoder] and b_dec [d_model] (circuit-tracer reads the sizes from them).");
  Sae s;
  s.name = "layer_" + std::to_string(layer);
  s.source_format = "circuit-tracer";
  s.hook_in = transcoder_set_hook(c.feature_input_hook, layer, cfg_file, "feature_input_hook", nullptr);
  s.hook_out = transcoder_set_hook(c.feature_output_hook, layer, cfg_file, "feature_output_hook",
                                   &s.hook_out_before_post_norm);
  s.layer = layer;
  s.d_sae = static_cast<int>(be->shape[0]);
  s.d_in = s.d_out = static_cast<int>(bd->shape[0]);
  s.relu_after = false;
  s.norm_out = false;
  const int64_t dm = s.d_in, dt = s.d_sae;
  const std::string needs = "a circuit-tracer transcoder has W_enc, W_dec, b_enc and b_dec";
  s.W_enc = npz ? matrix(w.take("W_enc", {dm, dt}, "[d_model, d_transcoder]", needs))
                : matrix_transposed(w.take("W_enc", {dt, dm}, "[d_transcoder, d_model]", needs));
  s.W_dec = matrix(w.take("W_dec", {dt, dm}, "[d_transcoder, d_model]", needs));
  s.b_enc = vec(w.take("b_enc", {dt}, "[d_transcoder]", needs));
  s.b_dec = vec(w.take("b_dec", {dm}, "[d_model]", needs));
  if (w.has("W_skip")) s.W_skip = matrix(w.take("W_skip", {dm, dm}, "[d_model, d_model]", needs));
  const bool has_threshold = w.has("activation_function.threshold");
  // load_transcoder_set: activation topk -> TopK(k), relu -> F.relu, otherwise JumpReLU with the
  // file's threshold, or F.relu when it has none.
  if (c.activation == "topk") {
    s.activation = SaeActivation::TopK;
    s.architecture = "topk";
    s.k = c.k;
    w.drop("k");
  } else if (c.activation == "relu" || (c.activation.empty() && !has_threshold)) {
    s.activation = SaeActivation::Relu;
    s.architecture = "relu";
  } else {
    if (!has_threshold)
      throw Error(w.file() + ": has no tensor \"activation_function.threshold\", which " + cfg_file +
                  "'s activation jumprelu needs.");
    s.activation = SaeActivation::JumpRelu;
    s.architecture = "jumprelu";
    s.threshold = vec(w.take("activation_function.threshold", {dt}, "[d_transcoder]", needs));
  }
  w.expect_empty("a circuit-tracer " + s.architecture + " transcoder");
  finish(s);
  return s;
}

SaeSet load_transcoder_set(const fs::path& dir) {
  const fs::path cfg_file = dir / "config.yaml";
  const TranscoderSetConfig c = parse_transcoder_set_config(read_config_text(cfg_file), cfg_file.string());
  std::vector<fs::path> files;
  std::error_code ec;
  if (!c.transcoders.empty()) {
    for (const std::string& t : c.transcoders) {
      if (t.rfind("hf://", 0) == 0)
        throw Error(cfg_file.string() + ": names \"" + t +
                    "\" on the Hugging Face Hub; HeadScope reads local files only. Download the set and list the "
                    "files by their names in this folder.");
      const fs::path p(t);
      bool outside = p.is_absolute() || t.empty();
      for (const auto& part : p) outside = outside || part == "..";
      if (outside)
        throw Error(cfg_file.string() + ": names the transcoder \"" + t +
                    "\"; transcoders must be files inside the folder of config.yaml.");
      if (!fs::is_regular_file(dir / p, ec))
        throw Error(cfg_file.string() + ": names the transcoder \"" + t + "\", which is not a file in " +
                    dir.string() + ". Download every layer of the set.");
      files.push_back(dir / p);
    }
  } else {
    // resolve_transcoder_paths without a list: the folder's layer_{i}.safetensors.
    std::map<int, fs::path> found;
    static const std::regex layer_file("layer_([0-9]{1,4})\\.safetensors");
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::smatch m;
      const std::string n = e.path().filename().string();
      if (std::regex_match(n, m, layer_file)) found[std::stoi(m[1])] = e.path();
    }
    if (found.empty())
      throw Error(dir.string() + ": config.yaml lists no transcoders and the folder has no layer_0.safetensors; "
                  "download the set's layer files.");
    int expect = 0;
    for (const auto& [layer, path] : found) {
      if (layer != expect)
        throw Error(dir.string() + ": has no layer_" + std::to_string(expect) +
                    ".safetensors; a transcoder set covers layers 0 to " + std::to_string(found.rbegin()->first) +
                    " (circuit-tracer's rule). Download the missing layer.");
      files.push_back(path);
      ++expect;
    }
  }
  SaeSet set;
  set.folder = dir;
  for (size_t i = 0; i < files.size(); ++i)
    set.saes.push_back(circuit_tracer_layer(c, files[i], static_cast<int>(i), cfg_file.string()));
  return set;
}

}  // namespace

SaeSet load_sae_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw Error(dir.string() + ": no such folder. Choose an SAE folder (SAELens: cfg.json and sae_weights.safetensors; "
                "circuit-tracer: config.yaml and layer_{i}.safetensors).");
  if (!fs::is_directory(dir, ec))
    throw Error(dir.string() + ": is a file, not a folder. Choose the folder that holds cfg.json (SAELens) or "
                "config.yaml (circuit-tracer).");
  if (fs::exists(dir / "cfg.json", ec)) return load_saelens(dir);
  if (fs::exists(dir / "config.yaml", ec)) return load_transcoder_set(dir);
  if (fs::exists(dir / "params.npz", ec)) return load_gemma_scope(dir);
  throw Error(dir.string() + ": holds no cfg.json (SAELens), config.yaml (circuit-tracer transcoder set) or params.npz "
              "(Gemma Scope); choose the folder of one SAE or of one transcoder set.");
}

}  // namespace hs
