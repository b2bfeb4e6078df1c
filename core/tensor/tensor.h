// A plain float32 tensor: a shape and a contiguous row-major buffer. This is what the cache hands
// out by name and what the exporters write; hot paths use the typed Eigen views instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hs {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, size == numel()

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape_) : shape(std::move(shape_)), data(static_cast<size_t>(count(shape)), 0.0f) {}
  Tensor(std::vector<int64_t> shape_, std::vector<float> data_) : shape(std::move(shape_)), data(std::move(data_)) {}

  int64_t numel() const { return count(shape); }
  static int64_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
};

// "[3, 4, 5]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace hs
