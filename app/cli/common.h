// What several commands share: their common options, loading the model, turning --text or
// --tokens into a run, checking an output's extension, writing a float to JSON.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "app/cli/options.h"
#include "core/model/metric.h"
#include "core/session/session.h"

namespace hs::cli {

// The options that mean the same in every command that takes them.
OptionSpec model_option();                             // --model DIR
OptionSpec text_option(const std::string& help);       // --text TEXT
OptionSpec tokens_option();                            // --tokens 1,2,3
OptionSpec no_bos_option();                            // --no-bos
OptionSpec threads_option(const std::string& help);    // --threads N, default 0: the engine's choice
OptionSpec seed_option(const std::string& help);       // --seed S, default 0
// `o` marked required, with the message when it is missing.
OptionSpec required(OptionSpec o, const std::string& missing);
// -o OUT (or --output OUT), required; `kinds` says what it may end in, `missing` is the message
// when it is not given.
OptionSpec output_option(const std::string& kinds, const std::string& missing);

// The metric options of the commands that differentiate one (grad, attribute): --metric KIND,
// --answer TEXT | --answer-id N, --wrong TEXT | --wrong-id N, --pos P and, with `dot`, the dot
// product's --hook KEY, --vector V.npy and --unit U. `command` names the command in the message
// when --metric is missing.
std::vector<OptionSpec> metric_options(const std::string& command, bool dot);
// The metric those options give (answers as text must be one token each: the patch command's
// rule and message). --metric dot only for a command that declares --hook. A UsageError says what
// is missing or does not belong to the metric chosen.
hs::Metric metric_from(const Args& a, const hs::Model& m);

// Several lists of options as one, in order.
std::vector<OptionSpec> concat(std::initializer_list<std::vector<OptionSpec>> lists);

// Loads --model (the built-in model without it) and says on stderr what is wrong with it
// (non-finite weights, a vocabulary larger than the model's): every command that shows numbers
// must not show them silently.
std::shared_ptr<const hs::Model> load_model(const Args& a);

// --threads, or 0 (the engine chooses) for a command that does not take it.
int threads(const Args& a);

// "290,51,257" -> ids; a UsageError naming the item that is not a non-negative integer.
std::vector<int32_t> parse_tokens(const std::string& s);

// Runs --text (BOS unless --no-bos) or --tokens (exactly as given) with `interventions`, and
// prints the run's warnings that the model's load did not already print.
// `for_gradient`: the run keeps the MLP's pre-activations (RunOptions::store_mlp_pre), which the
// backward pass reads, instead of deriving them again there.
hs::TextRun run_input(const Args& a, const std::shared_ptr<const hs::Model>& m,
                      const hs::Interventions& interventions = {}, bool for_gradient = false);
void print_run_warnings(const hs::TextRun& r, const hs::Model& m);

// The extension of -o, refused unless it is one of `allowed` (".json", ".npz").
std::string output_extension(const std::string& out, const std::vector<std::string>& allowed);

// A matrix as JSON: an array of its rows, each an array of numbers; with `inner` > 0,
// [rows / inner][inner][cols] (z_pos: rows are layer * n_heads + head).
nlohmann::json matrix_json(const hs::RowMatrixXf& x, Eigen::Index inner = 0);

// A float for JSON: the shortest text that reads back as the same float; null when not finite.
void write_json_float(std::ostream& out, float v);

}  // namespace hs::cli
