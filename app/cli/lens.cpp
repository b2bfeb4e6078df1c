// headscope-cli lens: the logit lens of one run, written to NPZ or JSON.
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/logit_lens.h"
#include "core/io/export.h"

namespace hs::cli {
namespace {

using nlohmann::json;

int lens(const Args& a) {
  if (a.has("--text") == a.has("--tokens")) throw UsageError("lens needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out_path = a.text("-o");
  const std::string ext = output_extension(out_path, {".npz", ".json"});
  const auto m = load_model(a);
  const hs::TextRun r = run_input(a, m);
  const hs::LogitLens lens = hs::logit_lens(*r.cache);
  const std::vector<float> tokens(r.tokens.begin(), r.tokens.end());
  hs::write_atomically(out_path, [&](std::ostream& out) {
    if (ext == ".npz") {
      hs::write_npz(out, {{"lens.logprobs", {lens.n_streams, lens.n_pos, lens.d_vocab}, lens.logprobs.data()},
                          {"tokens", {static_cast<int64_t>(tokens.size())}, tokens.data()}});
      return;
    }
    json streams = json::array();
    for (int i = 0; i < lens.n_streams; ++i) streams.push_back(hs::lens_stream_name(m->config(), i));
    out << "{\"tokens\":" << json(r.tokens).dump() << ",\n\"streams\":" << streams.dump() << ",\n\"lens.logprobs\":[";
    for (int i = 0; i < lens.n_streams; ++i) {
      out << (i ? ",\n[" : "[");
      const hs::ConstMatrixRef block = lens.stream(i);
      for (int p = 0; p < lens.n_pos; ++p) {
        out << (p ? ",[" : "[");
        for (int v = 0; v < lens.d_vocab; ++v) {
          if (v) out << ',';
          write_json_float(out, block(p, v));
        }
        out << ']';
      }
      out << ']';
    }
    out << "]}\n";
  });
  return 0;
}

}  // namespace

const CommandSpec& lens_command() {
  static const CommandSpec c{
      .name = "lens",
      .summary = "the logit lens: every layer's residual stream read as log-probabilities, to NPZ or JSON",
      .synopsis = {"[--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] -o OUT.npz|OUT.json"},
      .help = R"(Usage: headscope-cli lens [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] -o OUT

The logit lens: each layer's resid_pre and the final resid_post through the final norm (its own
statistics per vector, its weight and bias), the unembedding and a log-softmax. Writes
"lens.logprobs", float32 [n_layers + 1, pos, d_vocab]: index i < n_layers is layer i's
resid_pre, index n_layers the final resid_post (the run's log-softmaxed logits), and "tokens".
OUT ending in .npz: arrays for numpy.load; .json: one object of nested arrays, with "streams"
naming each index. --text prepends BOS unless --no-bos. Written atomically.
)",
      .options = {model_option(), text_option("the prompt to run"), tokens_option(), no_bos_option(),
                  threads_option("threads (default: all cores)"),
                  output_option(".npz or .json", "lens needs -o OUT.npz or -o OUT.json.")},
      .run = lens,
  };
  return c;
}

}  // namespace hs::cli
