// Attribution graphs as Neuronpedia's graph JSON (schema_version 1), written as circuit-tracer's
// create_graph_files writes a pruned graph (circuit_tracer/utils/create_graph_files.py:
// create_nodes, create_used_nodes_and_edges, build_model; frontend/graph_models.py: Node, Metadata,
// QParams), and read back (the app opens graphs made here or by circuit-tracer).
//
// Nodes: the kept nodes, in node order, of which features and errors only when a kept edge touches
// them (tokens and logits always). Node ids as AttributionGraph::node_id; a feature's "feature" is
// the Cantor pairing of (layer, latent) as circuit-tracer's later releases write it; "influence" is
// the node's cumulative influence share (PrunedGraph::cumulative_scores). Links: every kept edge
// between written nodes, {source, target, weight}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/attribution_graph.h"
#include "core/analysis/graph_prune.h"

namespace hs {

// What the graph file says about where it came from.
struct GraphLabels {
  std::string slug;                          // metadata.slug: a short name
  std::string scan;                          // metadata.scan: the model / transcoder set's name
  std::vector<std::string> transcoder_list;  // metadata.transcoder_list
  std::string prompt;                        // the prompt's text
  std::vector<std::string> prompt_tokens;    // one string per position
  std::vector<std::string> logit_tokens;     // one string per logit node
  GraphOptions options;                      // generation_settings
  std::string creator = "HeadScope";         // metadata.info.creator_name
  int64_t create_time_ms = 0;
};

std::string graph_to_json(const AttributionGraph& graph, const PrunedGraph& pruned, const GraphLabels& labels);

// A graph file as read back: what the Graph view draws.
struct GraphFile {
  struct Node {
    std::string node_id;
    int64_t feature = 0;
    std::string layer;        // "0".."n", "E" for embeddings
    int ctx_idx = 0;
    std::string feature_type; // "cross layer transcoder", "mlp neuron", "mlp reconstruction error", "embedding", "logit", ...
    double token_prob = 0.0;
    bool is_target_logit = false;
    std::string clerp;
    std::optional<double> influence, activation;
  };
  struct Link {
    int source = 0, target = 0;  // indices into nodes
    double weight = 0.0;
  };
  std::string slug, scan, prompt;
  std::vector<std::string> prompt_tokens;
  std::optional<double> node_threshold;
  int schema_version = 0;
  std::vector<Node> nodes;
  std::vector<Link> links;
  std::vector<std::string> pinned_ids;
  std::vector<std::vector<std::string>> supernodes;  // qParams.supernodes: [name, node ids...]
};

// Parses a graph JSON (ours or circuit-tracer's). Throws hs::Error naming `source`, the field and
// what is wrong (not JSON, a missing or mistyped field, a link to a node that is not there, a
// ctx_idx outside the prompt).
GraphFile read_graph_json(std::string_view text, const std::string& source);

}  // namespace hs
