// headscope-cli scan: a data set through the model, aggregated per head, layer and position.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/scan.h"
#include "core/io/scan_io.h"

namespace hs::cli {
namespace {

// Set by SIGINT / SIGTERM: the scan stops after the current prompt and writes a resumable output.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  return buf;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// Progress on stderr: a bar redrawn in place on a terminal, a plain line every few seconds
// otherwise (a batch job's log should not fill with carriage returns).
class ScanProgressPrinter {
 public:
  ScanProgressPrinter() : tty_(isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

  void operator()(const hs::ScanProgress& p) {
    if (first_done_ < 0) first_done_ = p.done - 1;
    const auto now = Clock::now();
    const double since_last = std::chrono::duration<double>(now - last_).count();
    const bool last_one = p.total >= 0 && p.done >= p.total;
    if (since_last < (tty_ ? 0.1 : 5.0) && !last_one) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(p.done - first_done_) / elapsed : 0.0;
    const double left = p.total >= 0 && rate > 0 ? static_cast<double>(p.total - p.done) / rate : -1.0;
    char line[160];
    if (tty_) {
      const int width = 30;
      const int filled = p.total > 0 ? static_cast<int>(width * p.done / p.total) : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::snprintf(line, sizeof line, "\r[%s] %lld/%lld  %.1f/s  %s left ", bar.c_str(), static_cast<long long>(p.done),
                    static_cast<long long>(p.total), rate, duration_text(left).c_str());
      std::cerr << line << std::flush;
      drawn_ = true;
    } else {
      std::snprintf(line, sizeof line, "headscope-cli scan: %lld/%lld lines, %.1f/s, %s left\n",
                    static_cast<long long>(p.done), static_cast<long long>(p.total), rate, duration_text(left).c_str());
      std::cerr << line << std::flush;
    }
  }
  void finish() {
    if (drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  Clock::time_point start_, last_;
  int64_t first_done_ = -1;
  bool drawn_ = false;
};

std::string bad_line_summary(const hs::ScanState& s) {
  std::string out;
  for (const auto& [reason, b] : s.bad) {
    out += (out.empty() ? "" : ", ") + std::to_string(b.count) + " " + reason + " (line";
    out += b.first_lines.size() > 1 ? "s " : " ";
    for (size_t i = 0; i < b.first_lines.size(); ++i) out += (i ? "," : "") + std::to_string(b.first_lines[i]);
    out += b.count > static_cast<int64_t>(b.first_lines.size()) ? ",...)" : ")";
  }
  return out;
}

int scan(const Args& a) {
  const bool repeat_random = a.has("--repeat-random");
  if (a.has("--input") == repeat_random) throw UsageError("scan needs exactly one of --input FILE or --repeat-random N.");
  const std::string out = a.text("-o");
  output_extension(out, {".json", ".npz"});
  if (repeat_random && a.flag("--no-bos"))
    throw UsageError("--repeat-random prompts are BOS + R + R by definition; --no-bos does not apply.");
  if (a.has("--input") && a.has("--seed"))
    throw UsageError("--seed chooses the --repeat-random ids; it does not apply with --input.");
  if (repeat_random && a.has("--max-tokens"))
    throw UsageError("--max-tokens would cut the second copy of R; choose a smaller --repeat-random instead.");
  hs::ScanOptions o;
  if (a.has("--input")) o.input = a.text("--input");
  o.repeat_random = static_cast<int>(a.integer("--repeat-random"));
  o.limit = a.has("--limit") ? a.integer("--limit") : (repeat_random ? 10 : -1);
  o.max_tokens = static_cast<int>(a.integer("--max-tokens"));
  o.prepend_bos = !a.flag("--no-bos");
  o.seed = static_cast<uint64_t>(a.integer("--seed"));
  o.threads = threads(a);
  o.heads = a.flag("--heads");
  if (a.has("--units")) o.units = a.text("--units");
  if (a.has("--aggregates")) {
    const std::string list = a.text("--aggregates");
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      const std::string name = list.substr(start, comma - start);
      if (std::find(hs::scan_text_aggregate_names().begin(), hs::scan_text_aggregate_names().end(), name) ==
          hs::scan_text_aggregate_names().end()) {
        std::string all;
        for (const std::string& n : hs::scan_text_aggregate_names()) all += (all.empty() ? "" : ",") + n;
        throw UsageError("--aggregates: \"" + name + "\" is not an aggregate of text rows; choose from " + all + ".");
      }
      o.aggregates.push_back(name);
      start = comma + 1;
    }
  }
  o.batch_tokens = a.integer("--batch-tokens");
  if (a.has("--shard")) {
    const std::string v = a.text("--shard");
    const size_t slash = v.find('/');
    const std::string usage = "--shard expects I/N with 0 <= I < N, like 0/4, got \"" + v + "\".";
    if (slash == std::string::npos) throw UsageError(usage);
    try {
      o.shard_index = static_cast<int>(parse_integer("--shard", v.substr(0, slash), 0, 1 << 20));
      o.shard_count = static_cast<int>(parse_integer("--shard", v.substr(slash + 1), 1, 1 << 20));
    } catch (const UsageError&) {
      throw UsageError(usage);
    }
    if (o.shard_index >= o.shard_count) throw UsageError(usage);
  }
  const bool resume = a.flag("--resume");
  const std::optional<std::string> per_prompt_path = a.optional_text("--per-prompt");
  const std::filesystem::path state_path = hs::scan_json_path(out);
  const auto m = load_model(a);
  nlohmann::json settings = hs::scan_settings(*m, o);
  hs::ScanState state;
  if (resume) {
    if (!std::filesystem::exists(state_path))
      throw UsageError("--resume: " + state_path.string() + " does not exist, so there is nothing to continue; run without --resume.");
    state = hs::read_scan_output(state_path);
    hs::require_same_settings(settings, state.settings, state_path.string());
    if (state.shard_index != o.shard_index || state.shard_count != o.shard_count)
      throw UsageError("--resume: " + state_path.string() + " is shard " + std::to_string(state.shard_index) + "/" +
                       std::to_string(state.shard_count) + ", not " + std::to_string(o.shard_index) + "/" +
                       std::to_string(o.shard_count) + "; give the same --shard.");
    if (state.complete) {
      std::cerr << "headscope-cli: " << state_path.string() << " is already complete; nothing to resume.\n";
      return 0;
    }
    state.settings = settings;  // the paths of this machine
  } else {
    if (std::filesystem::exists(state_path)) {
      bool incomplete = false;
      try {
        incomplete = !hs::read_scan_output(state_path).complete;
      } catch (const hs::Error&) {
      }
      if (incomplete)
        throw UsageError(state_path.string() + " holds an incomplete scan: continue it with --resume, or delete it to start again.");
    }
    state = hs::new_scan_state(*m, o, settings);
  }

  std::ofstream per_prompt;
  if (per_prompt_path) {
    if (resume) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(*per_prompt_path, ec);
      if (ec || static_cast<int64_t>(size) < state.per_prompt_bytes)
        throw UsageError("--resume: " + *per_prompt_path + " holds less than the " + std::to_string(state.per_prompt_bytes) +
                         " bytes the partial scan wrote to it; give the same --per-prompt file, untouched.");
      std::filesystem::resize_file(*per_prompt_path, static_cast<uintmax_t>(state.per_prompt_bytes));
      per_prompt.open(*per_prompt_path, std::ios::binary | std::ios::app);
    } else {
      state.per_prompt_bytes = 0;
      per_prompt.open(*per_prompt_path, std::ios::binary | std::ios::trunc);
    }
    if (!per_prompt) throw hs::Error("cannot write " + *per_prompt_path + "; check the folder exists and is writable.");
  }

  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  ScanProgressPrinter printer;
  hs::ScanControl control;
  control.progress = [&](const hs::ScanProgress& p) { printer(p); };
  control.stop = [] { return g_stop_signal != 0; };
  control.stop_after = a.integer("--stop-after");
  if (per_prompt_path)
    control.per_prompt = [&](const std::string& row) {
      per_prompt << row;
      if (!per_prompt) throw hs::Error("writing " + *per_prompt_path + " failed (is the disk full?).");
    };
  const auto scan_start = std::chrono::steady_clock::now();
  hs::run_scan(*m, o, state, control);
  const double scan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - scan_start).count();
  printer.finish();
  if (per_prompt_path) {
    per_prompt.flush();
    if (!per_prompt) throw hs::Error("writing " + *per_prompt_path + " failed (is the disk full?).");
  }
  hs::write_scan_output(state, out);
  if (!state.units.empty() && state.complete) {
    const std::filesystem::path folder = hs::unit_dashboards_folder(out);
    const auto start = std::chrono::steady_clock::now();
    hs::write_unit_dashboards(*m, hs::resolve_unit_source(*m, o.units), state.units, state.settings, folder);
    std::cerr << "headscope-cli scan: dashboards of " << state.units.n_units() << " units in " << folder.string()
              << " (written in " << seconds_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())
              << ")\n";
  }
  const std::string bad = bad_line_summary(state);
  // The time of this call's prompts alone (not the model's load, nor writing the output), which
  // tools/bench/suite.py reads.
  std::cerr << "headscope-cli scan: " << state.prompts << " prompts" << (state.patch_rows ? ", " + std::to_string(state.patch_rows) + " patch rows" : "")
            << (state.truncated ? ", " + std::to_string(state.truncated) + " truncated" : "")
            << (bad.empty() ? ", no bad lines" : "; bad lines: " + bad) << "; scanned in " << seconds_text(scan_seconds) << "\n";
  if (!state.complete) {
    std::cerr << "headscope-cli scan: stopped before the end; " << state_path.string()
              << " is marked incomplete. Run the same command with --resume to continue.\n";
    if (g_stop_signal) return 128 + g_stop_signal;
  }
  return 0;
}

OptionSpec integer_option(const std::string& name, const std::string& metavar, int64_t min, int64_t max,
                          const std::string& default_value, const std::string& help) {
  return {.name = name, .metavar = metavar, .kind = ValueKind::Integer, .help = help,
          .default_value = default_value, .min = min, .max = max};
}

}  // namespace

const CommandSpec& scan_command() {
  static const CommandSpec c{
      .name = "scan",
      .summary = "a data set through the model, aggregated: head scores, entropy, DLA, loss, patching",
      .synopsis = {"[--model DIR] (--input FILE | --repeat-random N) [--limit N] [--max-tokens N]",
                   "[--no-bos] [--heads] [--units mlp|mlp:L|sae:DIR] [--aggregates LIST] [--seed S] [--shard I/N] [--per-prompt OUT.jsonl]",
                   "[--resume] [--batch-tokens N]",
                   "-o OUT.json|OUT.npz"},
      .help = R"(Usage: headscope-cli scan [--model DIR] (--input FILE | --repeat-random N) [--limit N] [--max-tokens N]
                          [--no-bos] [--heads] [--units mlp|mlp:L|sae:DIR] [--aggregates LIST] [--seed S] [--shard I/N]
                          [--per-prompt OUT.jsonl] [--resume] [--batch-tokens N] [--threads N]
                          -o OUT.json|OUT.npz

Runs every prompt of a data set through the model, several to a pass, and aggregates (docs/scan.md):
per head the mean and standard deviation over prompts of the previous-token, duplicate-token and
induction scores (docs/head-scores.md, "On any prompt"), of the attention entropy and of the
direct logit attribution to the next token; the mean loss per position; and, for JSON Lines rows
with "clean", "corrupt", "answer" and "wrong", the mean normalized patching effect per layer x
position (resid_pre) and per layer x head (z). With --heads, each head is also described over the
data set (attention by distance, top tokens, entropy distribution, examples by output norm).
Memory does not grow with the number of prompts.
)",
      .options =
          {model_option(),
           {.name = "--input",
            .metavar = "FILE",
            .help = "one prompt a line, or JSON Lines (.jsonl, or a first line starting with '{') with a \"text\" "
                    "field (or \"clean\", \"corrupt\", \"answer\", \"wrong\")"},
           integer_option("--repeat-random", "N", 2, 1 << 20, "0",
                          "no file: BOS + R + R prompts, R = N random ids (docs/head-scores.md); --limit says how "
                          "many (default 10), --seed chooses the ids (default 0)"),
           integer_option("--limit", "N", 0, INT32_MAX, "-1", "only the first N lines (or prompts)"),
           integer_option("--max-tokens", "N", 1, 1 << 24, "0",
                          "cut longer prompts to N tokens (BOS included) and count them; without it a prompt longer "
                          "than the context is a bad line"),
           {.name = "--no-bos", .kind = ValueKind::Flag, .help = "do not prepend BOS to each prompt"},
           {.name = "--heads",
            .kind = ValueKind::Flag,
            .help = "also describe each head over the data set: attention by distance, top key and query tokens, "
                    "the distribution of its attention entropy, example contexts from each decile of its output "
                    "norm (docs/scan.md, \"Heads over a data set\")"},
           {.name = "--units",
            .metavar = "SOURCE",
            .help = "also describe every unit over the data set and write its dashboard to OUT.units/ (docs/scan.md, "
                    "\"Unit dashboards\"): mlp (every layer's neurons), mlp:L (layer L's) or sae:DIR (an SAE's or "
                    "transcoder set's latents)"},
           seed_option("the --repeat-random ids (default 0)"),
           {.name = "--shard",
            .metavar = "I/N",
            .help = "only lines whose index (from 0, counting every line) % N == I; run N of these side by side "
                    "and combine them with `headscope-cli merge`"},
           {.name = "--per-prompt", .metavar = "FILE", .help = "also write one JSON line per prompt, as it is scanned"},
           {.name = "--resume",
            .kind = ValueKind::Flag,
            .help = "continue the incomplete scan in OUT (same model, input and options)"},
           {.name = "--aggregates",
            .metavar = "LIST",
            .help = "only these aggregates of text rows, comma-separated (default: all): previous_token, "
                    "duplicate_token, induction, attention_entropy, dla_next_token, loss_per_position; the pass "
                    "then stops where they stop reading (head scores need no unembedding)"},
           integer_option("--batch-tokens", "N", 1, 1 << 20, "2048",
                          "run prompts together in passes of about N tokens (1: one prompt at a time); the "
                          "results are the same bits"),
           integer_option("--stop-after", "K", 0, INT32_MAX, "-1",
                          "stop after K more lines, as Ctrl-C would (a time-boxed job; resume later)"),
           threads_option("threads for the forward pass (default: the engine's choice)"),
           output_option(".json or .npz (its JSON then goes to OUT.npz.json)", "scan needs -o OUT.json or -o OUT.npz.")},
      .notes = R"(Lines that cannot be used (invalid UTF-8, empty, too long, bad JSON, patch rows whose prompts
differ in length or whose answers are not one token) are counted by reason in "bad_lines", with
their first line numbers. Progress goes to stderr. Ctrl-C or SIGTERM stops after the current
prompt and writes OUT marked "complete": false; run the same command with --resume to go on.
OUT.npz holds the mean, std and count arrays; its JSON (settings, counts, state) goes to
OUT.npz.json. Every file is written atomically.
)",
      .run = scan,
  };
  return c;
}

}  // namespace hs::cli
