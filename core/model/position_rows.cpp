#include "core/model/position_rows.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <new>
#include <tuple>

#include "core/model/position_block_stats.h"

namespace hs {
namespace {

using Index = Eigen::Index;

// Large blocks (a block of logits is megabytes) are kept for the next run when freed. malloc
// serves them by mmap and returns them to the kernel on free, so every run, a typed key or a
// data set's next prompt, faulted its logits in afresh, zeroed page by page. A large block is
// allocated at the size of a full block of its index whatever rows it holds, so the next run's
// block there fits it: typing at the end of a long prompt grows the last block by a row every few
// keys, and blocks sized by their rows were never asked for again (issue 21: the pool filled up
// with such sizes while every key's new blocks were faulted in afresh; docs/benchmarks.md). The
// untouched rest of a fresh mmap'd block is never made resident.
// At most kPoolBytes are kept, the most recently freed: those are what the next run asks for.
constexpr size_t kPoolFrom = size_t{1} << 20;   // bytes: smaller blocks come from the heap anyway
constexpr size_t kPoolBytes = size_t{64} << 20;

// Blocks alive, counted as they are made and freed (position_block_stats).
std::atomic<size_t> g_live_blocks{0}, g_live_bytes{0}, g_fresh_large{0};
void note_made(size_t bytes) {
  g_live_blocks.fetch_add(1, std::memory_order_relaxed);
  g_live_bytes.fetch_add(bytes, std::memory_order_relaxed);
}
void note_freed(size_t bytes) {
  g_live_blocks.fetch_sub(1, std::memory_order_relaxed);
  g_live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

// std::allocator, counted: a small block stays one allocation with its shared pointer's
// control block (allocate_shared_for_overwrite) and is still counted when freed.
template <class T>
struct CountingAllocator {
  using value_type = T;
  CountingAllocator() = default;
  template <class U>
  CountingAllocator(const CountingAllocator<U>&) {}  // NOLINT: rebinding, as allocate_shared does
  T* allocate(size_t n) {
    T* p = std::allocator<T>().allocate(n);
    note_made(n * sizeof(T));
    return p;
  }
  void deallocate(T* p, size_t n) {
    note_freed(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const CountingAllocator<U>&) const { return true; }
};

class BlockPool {
 public:
  float* take(size_t floats) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.rbegin(); it != free_.rend(); ++it)  // the most recently freed first
      if (it->floats == floats) {
        float* p = it->p;
        free_.erase(std::next(it).base());
        held_ -= floats * sizeof(float);
        return p;
      }
    return nullptr;
  }
  void give(float* p, size_t floats) {
    std::vector<float*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back({p, floats});
      held_ += floats * sizeof(float);
      while (held_ > kPoolBytes) {  // the oldest go first: the newest are the next run's sizes
        held_ -= free_.front().floats * sizeof(float);
        evicted.push_back(free_.front().p);
        free_.pop_front();
      }
    }
    for (float* q : evicted) std::free(q);
  }
  std::pair<size_t, size_t> held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {free_.size(), held_};
  }

 private:
  struct Kept {
    float* p;
    size_t floats;
  };
  std::mutex mutex_;
  std::deque<Kept> free_;  // oldest first; a few dozen at most
  size_t held_ = 0;
};

BlockPool& pool() {
  static BlockPool* p = new BlockPool;  // never destroyed: blocks may outlive static destruction
  return *p;
}

// Uninitialized: a block is written before it is read (the rows a run keeps are copied in, the
// rest computed). `count` floats of a block whose full size is `full`: a large block gets its full
// size (see kPoolFrom).
std::shared_ptr<float[]> new_block(Index count, Index full) {
  size_t floats = static_cast<size_t>(std::max<Index>(count, 1));
  if (static_cast<size_t>(full) * sizeof(float) < kPoolFrom)
    return std::allocate_shared_for_overwrite<float[]>(CountingAllocator<float>(), floats);
  floats = std::max(floats, static_cast<size_t>(full));
  float* p = pool().take(floats);
  if (!p) {
    p = static_cast<float*>(std::malloc(floats * sizeof(float)));
    if (!p) throw std::bad_alloc();
    g_fresh_large.fetch_add(1, std::memory_order_relaxed);
  }
  note_made(floats * sizeof(float));
  return std::shared_ptr<float[]>(p, [floats](float* q) {
    note_freed(floats * sizeof(float));
    pool().give(q, floats);
  });
}

Index blocks_for(Index rows) { return (rows + kPositionBlock - 1) / kPositionBlock; }

// The blocks of a run that keeps `keep` rows of `from` and has `rows` in all: those wholly inside
// the kept rows are shared; `copy_partial(block, from_block)` fills the one they end in. Each new
// block is laid out for just the rows it has (block_floats(b, rows in it)): a block is never
// appended to in place (the next run copies a partial one). Only large ones are allocated at a
// full block's size (block_floats(b, kPositionBlock)), for the pool's sake.
template <class BlockFloats, class CopyPartial>
void extend_blocks(std::vector<std::shared_ptr<float[]>>& blocks, const std::vector<std::shared_ptr<float[]>>* from,
                   Index keep, Index rows, BlockFloats block_floats, CopyPartial copy_partial) {
  blocks.clear();
  blocks.reserve(static_cast<size_t>(blocks_for(rows)));
  const Index shared = keep / kPositionBlock;
  for (Index b = 0; b < shared; ++b) blocks.push_back((*from)[static_cast<size_t>(b)]);
  for (Index b = shared; b < blocks_for(rows); ++b)
    blocks.push_back(
        new_block(block_floats(b, std::min(kPositionBlock, rows - b * kPositionBlock)), block_floats(b, kPositionBlock)));
  if (keep % kPositionBlock != 0)
    copy_partial(blocks[static_cast<size_t>(shared)].get(), (*from)[static_cast<size_t>(shared)].get(),
                 keep - shared * kPositionBlock);
}

}  // namespace

PositionBlockStats position_block_stats() {
  PositionBlockStats s;
  s.live_blocks = g_live_blocks.load(std::memory_order_relaxed);
  s.live_bytes = g_live_bytes.load(std::memory_order_relaxed);
  std::tie(s.pooled_blocks, s.pooled_bytes) = pool().held();
  s.fresh_large_blocks = g_fresh_large.load(std::memory_order_relaxed);
  return s;
}

PositionRows& PositionRows::operator=(const RowMatrixXf& m) {
  extend(nullptr, 0, m.rows(), m.cols());
  set_rows(0, m);
  return *this;
}

void PositionRows::extend(const PositionRows* from, Index keep, Index rows, Index cols) {
  extend_blocks(blocks_, from ? &from->blocks_ : nullptr, keep, rows, [cols](Index, Index n) { return n * cols; },
                [cols](float* to, const float* src, Index n) { std::memcpy(to, src, sizeof(float) * n * cols); });
  rows_ = rows;
  cols_ = cols;
}

void PositionRows::set_rows(Index first, const ConstStridedRowsRef& src) {
  for (Index r = 0; r < src.rows(); ++r)
    std::memcpy(mutable_row(first + r), src.row(r).data(), sizeof(float) * static_cast<size_t>(cols_));
}

std::vector<std::pair<float*, Index>> PositionRows::row_segments(Index first, Index last) {
  std::vector<std::pair<float*, Index>> out;
  for (Index i = first; i < last;) {
    const Index end = std::min(last, (i / kPositionBlock + 1) * kPositionBlock);
    out.emplace_back(mutable_row(i), end - i);
    i = end;
  }
  return out;
}

RowMatrixXf PositionRows::middle_rows(Index first, Index n) const {
  RowMatrixXf out(n, cols_);
  for_each_block(first, first + n, [&](Index i, const ConstStridedMatrixRef& rows) { out.middleRows(i - first, rows.rows()) = rows; });
  return out;
}

RowMatrixXf PositionRows::middle_cols(Index c0, Index n) const {
  RowMatrixXf out(rows_, n);
  for_each_block(0, rows_, [&](Index i, const ConstStridedMatrixRef& rows) { out.middleRows(i, rows.rows()) = rows.middleCols(c0, n); });
  return out;
}

bool PositionRows::all_finite() const {
  bool finite = true;
  for_each_block(0, rows_, [&](Index, const ConstStridedMatrixRef& rows) { finite = finite && rows.allFinite(); });
  return finite;
}

size_t PositionRows::bytes() const { return static_cast<size_t>(rows_ * cols_) * sizeof(float); }

bool PositionRows::shares_block(const PositionRows& other, Index b) const {
  const auto i = static_cast<size_t>(b);
  return i < blocks_.size() && i < other.blocks_.size() && blocks_[i] == other.blocks_[i];
}

bool operator==(const PositionRows& a, const PositionRows& b) {
  if (a.rows_ != b.rows_ || a.cols_ != b.cols_) return false;
  for (Index i = 0; i < a.rows_; ++i)
    if (a.row(i) != b.row(i)) return false;
  return true;
}

Index PatternRows::head_floats(Index b, Index rows) {
  // Rows s .. e-1 of one head hold s + 1 .. e floats.
  const Index s = b * kPositionBlock, e = std::min(s + kPositionBlock, rows);
  return (e - s) * (e + s + 1) / 2;
}

void PatternRows::extend(const PatternRows* from, Index keep, Index rows, int heads) {
  extend_blocks(blocks_, from ? &from->blocks_ : nullptr, keep, rows,
                [heads](Index b, Index n) { return heads * head_floats(b, b * kPositionBlock + n); },
                [&](float* to, const float* src, Index n) {
                  // Each head's first n rows of the block, from a block laid out for from's length.
                  const Index b = keep / kPositionBlock, s = b * kPositionBlock;
                  const Index to_stride = head_floats(b, rows), from_stride = head_floats(b, from->rows_);
                  const Index floats = n * (2 * s + n + 1) / 2;
                  for (int h = 0; h < heads; ++h)
                    std::memcpy(to + h * to_stride, src + h * from_stride, sizeof(float) * floats);
                });
  rows_ = rows;
  heads_ = heads;
}

size_t PatternRows::bytes() const { return static_cast<size_t>(heads_) * static_cast<size_t>(rows_ * (rows_ + 1) / 2) * sizeof(float); }

bool PatternRows::shares_block(const PatternRows& other, Index b) const {
  const auto i = static_cast<size_t>(b);
  return i < blocks_.size() && i < other.blocks_.size() && blocks_[i] == other.blocks_[i];
}

bool operator==(const PatternRows& a, const PatternRows& b) {
  if (a.rows_ != b.rows_ || a.heads_ != b.heads_) return false;
  for (int h = 0; h < a.heads_; ++h)
    for (Index q = 0; q < a.rows_; ++q)
      if (a.row(h, q) != b.row(h, q)) return false;
  return true;
}

}  // namespace hs
