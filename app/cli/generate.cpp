// headscope-cli generate: continue a text, greedy or sampled.
#include <cmath>
#include <iostream>
#include <random>

#include "app/cli/commands.h"
#include "app/cli/common.h"

namespace hs::cli {
namespace {

int generate(const Args& a) {
  const std::string text = a.text("--text");
  const int n = static_cast<int>(a.integer("-n"));
  const double temperature = a.number("--temperature");
  const auto m = load_model(a);
  std::vector<int32_t> ids = m->encode(text, !a.flag("--no-bos"));
  const size_t first_new = ids.size();
  std::mt19937_64 rng(static_cast<uint64_t>(a.integer("--seed")));
  hs::RunOptions o;
  o.logits_only = true;
  o.threads = threads(a);
  for (int i = 0; i < n; ++i) {
    // Keep the most recent n_ctx tokens: the model cannot see further back.
    const size_t n_ctx = static_cast<size_t>(m->config().n_ctx);
    const size_t start = ids.size() > n_ctx ? ids.size() - n_ctx : 0;
    const auto cache = m->run(std::span<const int32_t>(ids).subspan(start), o);
    const auto row = cache->logits.row(cache->n_pos() - 1);
    int32_t next = 0;
    if (temperature <= 0.0) {
      row.maxCoeff(&next);
    } else {
      std::vector<double> w(static_cast<size_t>(row.size()));
      const double mx = row.maxCoeff();
      for (Eigen::Index t = 0; t < row.size(); ++t) w[static_cast<size_t>(t)] = std::exp((row(t) - mx) / temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int>(w.begin(), w.end())(rng));
    }
    ids.push_back(next);
  }
  std::vector<int32_t> added(ids.begin() + static_cast<long>(first_new), ids.end());
  std::cout << text << m->tokenizer().decode(added) << "\n";
  return 0;
}

}  // namespace

const CommandSpec& generate_command() {
  static const CommandSpec c{
      .name = "generate",
      .summary = "continue a text by N tokens, greedy or sampled",
      .synopsis = {"[--model DIR] --text TEXT -n N [--temperature T] [--seed S]"},
      .help = R"(Usage: headscope-cli generate [--model DIR] --text TEXT -n N [--temperature T] [--seed S]

Continues TEXT by N tokens: greedy by default, sampled at temperature T > 0 with a fixed seed.
Prints the continuation on stdout.
)",
      .options = {model_option(), required(text_option("the text to continue"), "generate needs --text TEXT."),
                  {.name = "-n",
                   .metavar = "N",
                   .kind = ValueKind::Integer,
                   .help = "the number of tokens to add",
                   .required = true,
                   .missing = "generate needs -n N (the number of tokens to add).",
                   .min = 0,
                   .max = 1 << 20},
                  {.name = "--temperature",
                   .metavar = "T",
                   .kind = ValueKind::Number,
                   .help = "sample at this temperature; 0 (the default) is greedy",
                   .default_value = "0",
                   .min = 0},
                  seed_option("the sampler's seed (default 0)"), no_bos_option(),
                  threads_option("threads (default: all cores)")},
      .run = generate,
  };
  return c;
}

}  // namespace hs::cli
