// Shared helpers for the core tests: where the fixtures are, and the comparison the fixture
// README defines (max |reference - ours| / max |reference| per key).
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/tensor/tensor.h"

namespace hs::test {

inline std::filesystem::path source_dir() { return HEADSCOPE_SOURCE_DIR; }
inline std::filesystem::path fixture_model(const std::string& name) { return source_dir() / "tests/fixtures/models" / name; }
inline std::filesystem::path shared_dir() { return HEADSCOPE_SHARED_DIR; }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Comparison {
  double max_abs = 0.0;
  double max_ref = 0.0;
  double relative = 0.0;        // max_abs / max_ref
  bool masks_agree = true;      // -inf exactly where the reference has -inf, NaN nowhere
};

inline Comparison compare(const std::vector<float>& reference, const std::vector<float>& ours) {
  Comparison c;
  if (reference.size() != ours.size()) {
    c.masks_agree = false;
    return c;
  }
  for (size_t i = 0; i < reference.size(); ++i) {
    const float r = reference[i], o = ours[i];
    if (!std::isfinite(r) || !std::isfinite(o)) {
      if (!(std::isinf(r) && std::isinf(o) && (r < 0) == (o < 0))) c.masks_agree = false;
      continue;
    }
    c.max_abs = std::max(c.max_abs, static_cast<double>(std::abs(r - o)));
    c.max_ref = std::max(c.max_ref, static_cast<double>(std::abs(r)));
  }
  c.relative = c.max_ref > 0 ? c.max_abs / c.max_ref : c.max_abs;
  return c;
}

}  // namespace hs::test
