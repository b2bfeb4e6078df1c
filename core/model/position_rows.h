// Activations indexed by position, stored in blocks of kPositionBlock positions that runs share.
//
// Typing at the end of a long prompt recomputes only the new positions (causal attention: a
// position's activations do not depend on what follows). If each activation were one matrix, the
// new run would still have to copy the whole prefix out of the previous run's matrices, which the
// views are still showing: at a thousand tokens that copy, and faulting in the memory it goes to,
// cost far more than the new token's arithmetic. With blocks, a block that lies wholly before the
// first recomputed position is shared (reference counted) by the previous cache and the new one;
// only the block the new positions start in is copied (fewer than kPositionBlock rows), and the
// rest is new memory. Typing inside a word replaces the last token, which is why an append-only
// shared buffer would not do.
//
// A block is written only by the run that allocated it, before that run's cache is handed out; from
// then on it is read-only, so caches on different threads share blocks freely. Reads see one
// contiguous row at a time (row(i)), or a dense copy (to_matrix, middle_rows) for the few callers
// that need a whole matrix.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor/eigen.h"

namespace hs {

// Positions per block: small enough that the copied block costs little next to a token's
// arithmetic, large enough that a full run's products over blocks stay efficient.
inline constexpr Eigen::Index kPositionBlock = 32;

// [pos, cols] floats.
class PositionRows {
 public:
  PositionRows() = default;
  explicit PositionRows(const RowMatrixXf& m) { *this = m; }
  PositionRows& operator=(const RowMatrixXf& m);

  Eigen::Index rows() const { return rows_; }
  Eigen::Index cols() const { return cols_; }
  Eigen::Index size() const { return rows_ * cols_; }
  bool empty() const { return size() == 0; }

  const float* row_data(Eigen::Index i) const {
    return blocks_[static_cast<size_t>(i / kPositionBlock)].get() + (i % kPositionBlock) * cols_;
  }
  ConstRowVectorRef row(Eigen::Index i) const { return ConstRowVectorRef(row_data(i), cols_); }
  float operator()(Eigen::Index i, Eigen::Index j) const { return row_data(i)[j]; }

  // Dense copies: every row, rows [first, first + n), or columns [c0, c0 + n) of every row.
  RowMatrixXf to_matrix() const { return middle_rows(0, rows_); }
  RowMatrixXf middle_rows(Eigen::Index first, Eigen::Index n) const;
  RowMatrixXf middle_cols(Eigen::Index c0, Eigen::Index n) const;
  // Whether every value is a finite number.
  bool all_finite() const;

  // The stored rows [first, last), one block's part at a time: f(first row, rows as a matrix).
  template <class F>
  void for_each_block(Eigen::Index first, Eigen::Index last, F&& f) const {
    for (Eigen::Index i = first; i < last;) {
      const Eigen::Index end = std::min(last, (i / kPositionBlock + 1) * kPositionBlock);
      f(i, ConstStridedMatrixRef(row_data(i), end - i, cols_, Eigen::OuterStride<>(cols_)));
      i = end;
    }
  }

  // For the forward pass. Becomes rows x cols, its first `keep` rows those of `from` (the blocks
  // wholly inside them shared, the one they end in copied); rows from `keep` on are new memory for
  // this run to write (set_rows, mutable_row), and only those may be written.
  void extend(const PositionRows* from, Eigen::Index keep, Eigen::Index rows, Eigen::Index cols);
  void set_rows(Eigen::Index first, const ConstStridedRowsRef& src);
  float* mutable_row(Eigen::Index i) {
    return blocks_[static_cast<size_t>(i / kPositionBlock)].get() + (i % kPositionBlock) * cols_;
  }
  // Output blocks of rows [first, last) for a product writing them in place: (pointer, rows) each.
  std::vector<std::pair<float*, Eigen::Index>> row_segments(Eigen::Index first, Eigen::Index last);

  // Bytes of the rows this holds (a block shared with another cache counts in both).
  size_t bytes() const;
  // Whether block b is the same memory here and in `other` (tests of the sharing).
  bool shares_block(const PositionRows& other, Eigen::Index b) const;
  // The same shape and the same values.
  friend bool operator==(const PositionRows& a, const PositionRows& b);

 private:
  std::vector<std::shared_ptr<float[]>> blocks_;  // kPositionBlock rows of cols_ floats (the last: the rest)
  Eigen::Index rows_ = 0, cols_ = 0;
};

// One layer's attention patterns, lower triangles only: row q of head h holds keys 0..q. Stored in
// the same position blocks (of query positions), heads one after another within a block, so a
// longer prompt's blocks extend a shorter one's.
class PatternRows {
 public:
  Eigen::Index rows() const { return rows_; }
  int heads() const { return heads_; }
  bool empty() const { return rows_ == 0; }

  ConstRowVectorRef row(int h, Eigen::Index q) const { return ConstRowVectorRef(locate(h, q), q + 1); }
  float* mutable_row(int h, Eigen::Index q) { return const_cast<float*>(locate(h, q)); }

  // As PositionRows::extend, for `heads` heads.
  void extend(const PatternRows* from, Eigen::Index keep, Eigen::Index rows, int heads);
  size_t bytes() const;
  bool shares_block(const PatternRows& other, Eigen::Index b) const;
  friend bool operator==(const PatternRows& a, const PatternRows& b);

 private:
  // Floats of one head's rows in block b of a pattern of `rows` rows (a block holds only the rows
  // it has, so the last one's heads are closer together).
  static Eigen::Index head_floats(Eigen::Index b, Eigen::Index rows);
  const float* locate(int h, Eigen::Index q) const {
    const Eigen::Index b = q / kPositionBlock, s = b * kPositionBlock;
    return blocks_[static_cast<size_t>(b)].get() + h * head_floats(b, rows_) + (q - s) * (q + s + 1) / 2;
  }
  std::vector<std::shared_ptr<float[]>> blocks_;
  Eigen::Index rows_ = 0;
  int heads_ = 0;
};

}  // namespace hs
