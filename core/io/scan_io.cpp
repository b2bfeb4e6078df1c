#include "core/io/scan_io.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/io/export.h"

namespace hs {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> head_labels(int n_layers, int n_heads) {
  std::vector<std::string> labels;
  for (int l = 0; l < n_layers; ++l)
    for (int h = 0; h < n_heads; ++h) labels.push_back("L" + std::to_string(l) + "H" + std::to_string(h));
  return labels;
}

}  // namespace

fs::path scan_json_path(const fs::path& out) {
  return out.extension() == ".npz" ? fs::path(out.string() + ".json") : out;
}

void write_scan_output(const ScanState& s, const fs::path& out) {
  const json j = scan_to_json(s, head_labels(s.n_layers, s.n_heads));
  if (out.extension() == ".npz") {
    std::vector<std::vector<float>> data;  // each [rows * cols], row-major
    std::vector<NpzArrayView> arrays;
    data.reserve(s.grids.size() * 3 + 4);  // the views point into it: it must not reallocate
    for (const auto& [name, g] : s.grids) {
      std::vector<int64_t> shape = {g.rows()};
      if (g.cols() != 1) shape.push_back(g.cols());
      for (const std::string part : {"mean", "std", "count"}) {
        std::vector<float> v;
        v.reserve(static_cast<size_t>(g.rows()) * static_cast<size_t>(g.cols()));
        for (int r = 0; r < g.rows(); ++r)
          for (int c = 0; c < g.cols(); ++c)
            v.push_back(static_cast<float>(part == "mean"  ? g.mean(r, c)
                                           : part == "std" ? std::sqrt(g.variance(r, c))
                                                           : static_cast<double>(g.count(r, c))));
        data.push_back(std::move(v));
        arrays.push_back({name + "." + part, shape, data.back().data()});
      }
    }
    if (!s.heads.empty()) {
      // The per-head arrays of docs/scan.md "Heads over a data set" (the examples and token lists
      // stay in the JSON).
      const HeadDatasetStats& hd = s.heads;
      const int L = s.n_layers, H = s.n_heads, bins = HeadDatasetStats::kEntropyBins;
      std::vector<float> profile, entropy, distance, norm;
      for (int l = 0; l < L; ++l)
        for (int h = 0; h < H; ++h) {
          for (double x : hd.distance_profile(l, h)) profile.push_back(static_cast<float>(x));
          const int64_t* e = hd.entropy_histogram(l, h);
          for (int b = 0; b < bins; ++b) entropy.push_back(static_cast<float>(e[b]));
          distance.push_back(static_cast<float>(hd.mean_distance(l, h)));
          norm.push_back(static_cast<float>(hd.mean_output_norm(l, h)));
        }
      data.push_back(std::move(profile));
      arrays.push_back({"heads.distance_profile", {L, H, s.n_ctx}, data.back().data()});
      data.push_back(std::move(entropy));
      arrays.push_back({"heads.entropy_histogram", {L, H, bins}, data.back().data()});
      data.push_back(std::move(distance));
      arrays.push_back({"heads.mean_distance", {L, H}, data.back().data()});
      data.push_back(std::move(norm));
      arrays.push_back({"heads.output_norm_mean", {L, H}, data.back().data()});
    }
    write_atomically(out, [&](std::ostream& o) { write_npz(o, arrays); });
  }
  write_file_atomically(scan_json_path(out), j.dump(1) + "\n");
}

ScanState read_scan_output(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string() + ": it does not exist or is not readable.");
  std::ostringstream text;
  text << in.rdbuf();
  return scan_output_from_text(text.str(), path.string());
}

ScanState scan_output_from_text(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + " is not JSON (" + json_error_reason(e) + "); give a file written by `headscope-cli scan`.");
  }
  return scan_from_json(j, source);
}

}  // namespace hs
