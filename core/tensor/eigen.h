// Eigen aliases used across the core. Everything is float32 and row-major, so a [rows, cols]
// buffer from a safetensors file or from the cache maps without copies.
#pragma once

#include <Eigen/Core>

namespace hs {

using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using VectorXf = Eigen::VectorXf;
using RowVectorXf = Eigen::RowVectorXf;
using MatrixRef = Eigen::Map<RowMatrixXf>;
using ConstMatrixRef = Eigen::Map<const RowMatrixXf>;
using VectorRef = Eigen::Map<VectorXf>;
using ConstVectorRef = Eigen::Map<const VectorXf>;
using RowVectorRef = Eigen::Map<RowVectorXf>;
using ConstRowVectorRef = Eigen::Map<const RowVectorXf>;
// A column block of a wider row-major matrix (e.g. one head's columns of the fused QKV weight).
using ConstStridedMatrixRef = Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>>;
using StridedMatrixRef = Eigen::Map<RowMatrixXf, 0, Eigen::OuterStride<>>;
// Any row-major matrix, map or block of one whose rows are contiguous, without a copy.
using ConstStridedRowsRef = Eigen::Ref<const RowMatrixXf, 0, Eigen::OuterStride<>>;

}  // namespace hs
