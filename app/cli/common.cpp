#include "app/cli/common.h"

#include "app/cli/commands.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>

namespace hs::cli {

OptionSpec model_option() {
  return {.name = "--model", .metavar = "DIR", .help = "the model's folder; without it, the built-in model"};
}

OptionSpec text_option(const std::string& help) { return {.name = "--text", .metavar = "TEXT", .help = help}; }

OptionSpec tokens_option() {
  return {.name = "--tokens", .metavar = "1,2,3", .help = "token ids, separated by commas, used exactly as given"};
}

OptionSpec no_bos_option() {
  return {.name = "--no-bos", .kind = ValueKind::Flag, .help = "do not prepend BOS to --text"};
}

OptionSpec threads_option(const std::string& help) {
  return {.name = "--threads", .metavar = "N", .kind = ValueKind::Integer, .help = help, .default_value = "0",
          .min = 1, .max = 1024};
}

OptionSpec seed_option(const std::string& help) {
  return {.name = "--seed", .metavar = "S", .kind = ValueKind::Integer, .help = help, .default_value = "0",
          .min = 0, .max = 1 << 30};
}

OptionSpec required(OptionSpec o, const std::string& missing) {
  o.required = true;
  o.missing = missing;
  return o;
}

OptionSpec output_option(const std::string& kinds, const std::string& missing) {
  return {.name = "-o", .metavar = "OUT", .help = "the file to write, ending in " + kinds, .required = true, .missing = missing,
          .alias = "--output"};
}

std::shared_ptr<const hs::Model> load_model(const Args& a) {
  const auto dir = a.optional_text("--model");
  auto m = hs::Model::load(dir ? std::filesystem::path(*dir) : hs::builtin_model_dir());
  for (const auto& w : m->warnings()) std::cerr << "headscope-cli: warning: " << w << "\n";
  return m;
}

int threads(const Args& a) {
  for (const OptionSpec& o : a.command().options)
    if (o.name == "--threads") return static_cast<int>(a.integer("--threads"));
  return 0;
}

std::vector<int32_t> parse_tokens(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    long long v = 0;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0 || v > INT32_MAX)
      throw UsageError("--tokens expects comma-separated non-negative integer ids like 50256,464,3797; \"" + item +
                       "\" is not one.");
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return ids;
}

void print_run_warnings(const hs::TextRun& r, const hs::Model& m) {
  // The model's own warnings were printed when it loaded; these are the run's.
  for (const auto& w : r.warnings)
    if (std::find(m.warnings().begin(), m.warnings().end(), w) == m.warnings().end())
      std::cerr << "headscope-cli: warning: " << w << "\n";
}

hs::TextRun run_input(const Args& a, const std::shared_ptr<const hs::Model>& m, const hs::Interventions& interventions) {
  hs::TextRun r;
  if (a.has("--text")) {
    hs::TextRunOptions o;
    o.prepend_bos = !a.flag("--no-bos");
    o.run.threads = threads(a);
    o.run.interventions = interventions;
    r = hs::run_text(m, a.text("--text"), o);
  } else {
    hs::RunOptions o;
    o.threads = threads(a);
    o.interventions = interventions;
    r = hs::run_tokens(m, parse_tokens(a.text("--tokens")), o);
  }
  print_run_warnings(r, *m);
  return r;
}

std::string output_extension(const std::string& out, const std::vector<std::string>& allowed) {
  const std::string ext = std::filesystem::path(out).extension().string();
  if (std::find(allowed.begin(), allowed.end(), ext) == allowed.end())
    throw UsageError("-o " + out + ": the output must end in " +
                     (allowed.size() == 1 ? allowed[0] : allowed[0] + " or " + allowed[1]) + ".");
  return ext;
}

void write_json_float(std::ostream& out, float v) {
  if (!std::isfinite(v)) {
    out << "null";
    return;
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.write(buf, end - buf);
}

}  // namespace hs::cli
