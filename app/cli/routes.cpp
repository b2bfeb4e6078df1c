// headscope-cli routes: the information-flow routes of a prompt as the LM Transparency Tool
// computes them (core/analysis/info_routes.h), written as JSON (docs/graph.md, "Routes JSON").
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/info_routes.h"
#include "core/io/export.h"

namespace hs::cli {
namespace {

using nlohmann::json;

// LM-TT's NodeType values (routes/graph_node.py) and the cache key each node is.
const char* kind_name(hs::RouteNodeKind k) {
  switch (k) {
    case hs::RouteNodeKind::Embedding: return "original";
    case hs::RouteNodeKind::AfterAttn: return "after_attn";
    case hs::RouteNodeKind::Mlp: return "ffn";
    case hs::RouteNodeKind::AfterMlp: return "after_ffn";
  }
  return "";
}

std::string hook_name(const hs::RouteNode& n) {
  const std::string block = "blocks." + std::to_string(n.layer) + ".";
  switch (n.kind) {
    case hs::RouteNodeKind::Embedding: return "blocks.0.hook_resid_pre";
    case hs::RouteNodeKind::AfterAttn: return block + "hook_resid_mid";
    case hs::RouteNodeKind::Mlp: return block + "hook_mlp_out";
    case hs::RouteNodeKind::AfterMlp: return block + "hook_resid_post";
  }
  return "";
}

const char* edge_kind_name(hs::RouteEdgeKind k) {
  switch (k) {
    case hs::RouteEdgeKind::Attention: return "attention";
    case hs::RouteEdgeKind::Residual: return "residual";
    case hs::RouteEdgeKind::Mlp: return "mlp";
  }
  return "";
}

int routes(const Args& a) {
  if (a.has("--text") == a.has("--tokens")) throw UsageError("routes needs exactly one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  output_extension(out, {".json"});
  hs::RouteOptions options;
  options.threshold = a.number("--threshold");
  options.position = static_cast<int>(a.integer("--position"));
  options.threads = threads(a);
  if (!(options.threshold > 0.0 && options.threshold < 1.0))
    throw UsageError("--threshold is a share of a residual stream, between 0 and 1 (exclusive), such as 0.04.");
  const auto m = load_model(a);
  const hs::TextRun r = run_input(a, m);
  const auto start = std::chrono::steady_clock::now();
  const hs::InfoRoutes g = hs::info_routes(*r.cache, options);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  json tokens = json::array();
  for (int32_t t : r.tokens) tokens.push_back(m->tokenizer().decode(std::span<const int32_t>(&t, 1)));
  const json metadata = {
      {"schema", "headscope-routes"},
      {"schema_version", 1},
      {"model", m->name()},
      {"prompt", r.text.empty() ? m->tokenizer().decode(r.tokens) : r.text},
      {"prompt_tokens", tokens},
      {"token_ids", r.tokens},
      {"n_layers", g.n_layers},
      {"n_heads", g.n_heads},
      {"threshold", g.threshold},
      {"position", g.position},
      {"algorithm", "LM Transparency Tool (facebookresearch/llm-transparency-tool): build_full_graph with the "
                    "renormalizing threshold, build_paths_to_predictions from the final residual"},
  };
  hs::write_atomically(out, [&](std::ostream& s) {
    // A token alone may be part of a character: its bytes become U+FFFD, as in graph's JSON.
    s << "{\"metadata\":" << metadata.dump(-1, ' ', false, json::error_handler_t::replace) << ",\n\"nodes\":[";
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const hs::RouteNode& n = g.nodes[i];
      s << (i ? ",\n" : "\n") << "{\"id\":" << json(g.node_name(static_cast<int>(i))).dump() << ",\"layer\":" << n.layer
        << ",\"pos\":" << n.pos << ",\"kind\":\"" << kind_name(n.kind) << "\",\"hook\":\"" << hook_name(n) << "\"}";
    }
    s << "],\n\"edges\":[";
    for (size_t i = 0; i < g.edges.size(); ++i) {
      const hs::RouteEdge& e = g.edges[i];
      s << (i ? ",\n" : "\n") << "{\"source\":" << json(g.node_name(e.from)).dump()
        << ",\"target\":" << json(g.node_name(e.to)).dump() << ",\"weight\":";
      write_json_float(s, e.weight);
      s << ",\"kind\":\"" << edge_kind_name(e.kind) << "\",\"layer\":" << e.layer;
      if (e.kind == hs::RouteEdgeKind::Attention) s << ",\"head\":" << e.head;
      s << '}';
    }
    s << "],\n\"routes\":{\"start\":" << json(g.node_name(g.start_node())).dump()
      << ",\"edges\":" << json(g.route_edges).dump() << "}}\n";
  });
  std::fprintf(stderr, "routes: %d tokens, %zu edges over %.3f, %zu on the routes from %s; computed in %.0f ms\n",
               g.n_pos, g.edges.size(), g.threshold, g.route_edges.size(), g.node_name(g.start_node()).c_str(), ms);
  return 0;
}

}  // namespace

const CommandSpec& routes_command() {
  static const CommandSpec c{
      .name = "routes",
      .summary = "information-flow routes to the prediction, as the LM Transparency Tool computes them",
      .synopsis = {"[--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--threshold 0.04] [--position P]",
                   "-o ROUTES.json"},
      .help = R"(Usage: headscope-cli routes [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--threshold 0.04]
                            [--position P] -o ROUTES.json

Computes the information-flow routes of the prompt as Meta's LM Transparency Tool does: the share
of each attention edge (head, key position) and of each MLP in each residual stream (a
distance-based share, L1), the shares at or under --threshold dropped and the rest renormalised,
and the routes: every edge that leads back from the final residual stream at --position (the last
by default) through kept edges. Works for every model family HeadScope loads; docs/graph.md says
what is computed, what the file holds, and how parallel blocks and post-norms are treated.
The file is written atomically: on any error, none is left.
)",
      .options = {model_option(), text_option("the prompt to trace"), tokens_option(), no_bos_option(),
                  {.name = "--threshold", .metavar = "F", .kind = ValueKind::Number,
                   .help = "drop the shares at or under this (0 < F < 1)", .default_value = "0.04"},
                  {.name = "--position", .metavar = "P", .kind = ValueKind::Integer,
                   .help = "the routes start at this position's final residual (-1: the last)", .default_value = "-1",
                   .min = -1, .max = 1 << 30},
                  threads_option("threads (default: all cores)"),
                  output_option(".json", "routes needs -o ROUTES.json.")},
      .run = routes,
  };
  return c;
}

}  // namespace hs::cli
