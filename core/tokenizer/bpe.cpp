#include "core/tokenizer/bpe.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace hs::tokenizer_detail {

void MergeTable::insert_or_assign(int32_t left, int32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) grow();  // keep the load factor at or below 1/2
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == key) {
      slot.merge = merge;
      return;
    }
    if (slot.key == kEmpty) {
      slot = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

void MergeTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  const size_t capacity = std::max<size_t>(16, old.size() * 2);
  slots_.assign(capacity, Slot{kEmpty, Merge{0, 0}});
  mask_ = capacity - 1;
  for (const Slot& slot : old) {
    if (slot.key == kEmpty) continue;
    for (size_t i = hash(slot.key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = slot;
        break;
      }
    }
  }
}

void bpe_merge_reference(std::vector<int32_t>& word, const MergeTable& merges) {
  while (word.size() > 1) {
    // The adjacent pair with the lowest rank (ranks are unique per pair, so there are no ties).
    const Merge* best = nullptr;
    int32_t first = 0, second = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const Merge* m = merges.find(word[i], word[i + 1]);
      if (m != nullptr && (best == nullptr || m->rank < best->rank)) {
        best = m;
        first = word[i];
        second = word[i + 1];
      }
    }
    if (best == nullptr) return;
    // Merge every occurrence, scanning left to right; "a a a" with merge (a, a) gives "aa a".
    size_t out = 0;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        word[out++] = best->merged;
        i += 2;
      } else {
        word[out++] = word[i++];
      }
    }
    word.resize(out);
  }
}

namespace {

struct Candidate {
  int32_t rank;
  int32_t pos;    // index of the left symbol's node
  int32_t left;   // the symbol ids the pair had when it was queued; a stale candidate no longer
  int32_t right;  // matches them and is skipped
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void bpe_merge_heap(std::vector<int32_t>& word, const MergeTable& merges) {
  const auto n = static_cast<int32_t>(word.size());
  if (n < 2) return;
  // The word as a doubly linked list over node indices, which keep their left-to-right order.
  // A merge keeps the left node (with the merged id) and unlinks the right one.
  std::vector<int32_t> prev(n), next(n);  // [n]; -1 / n mark the ends
  std::vector<int32_t>& symbol = word;    // [n]; -1 once unlinked
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto candidate_at = [&](int32_t pos, auto&& push) {
    if (pos < 0 || next[pos] >= n) return;
    if (const Merge* m = merges.find(symbol[pos], symbol[next[pos]])) push(Candidate{m->rank, pos, symbol[pos], symbol[next[pos]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) candidate_at(i, [&](const Candidate& c) { queue.push(c); });

  std::vector<Candidate> created;  // pairs made during one rank's pass, queued after it
  while (!queue.empty()) {
    const int32_t rank = queue.top().rank;
    created.clear();
    while (!queue.empty() && queue.top().rank == rank) {
      const Candidate c = queue.top();
      queue.pop();
      if (symbol[c.pos] != c.left || next[c.pos] >= n || symbol[next[c.pos]] != c.right) continue;
      const int32_t right = next[c.pos];
      symbol[c.pos] = merges.find(c.left, c.right)->merged;
      symbol[right] = -1;
      next[c.pos] = next[right];
      if (next[right] < n) prev[next[right]] = c.pos;
      // A pair made here may rank below `rank`; GPT-2 only considers it after this pass.
      auto keep = [&](const Candidate& made) { created.push_back(made); };
      candidate_at(prev[c.pos], keep);
      candidate_at(c.pos, keep);
    }
    for (const Candidate& c : created) queue.push(c);
  }
  word.erase(std::remove(word.begin(), word.end(), -1), word.end());
}

void bpe_merge_hf(std::vector<int32_t>& word, const MergeTable& merges) {
  const auto n = static_cast<int32_t>(word.size());
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);  // [n]; -1 / n mark the ends
  std::vector<int32_t>& symbol = word;    // [n]; -1 once merged into its left neighbour
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  struct Queued {
    int32_t rank, pos, merged;
    bool operator>(const Queued& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Queued, std::vector<Queued>, std::greater<>> queue;
  auto queue_at = [&](int32_t pos) {
    if (pos < 0 || next[pos] >= n) return;
    if (const Merge* m = merges.find(symbol[pos], symbol[next[pos]])) queue.push(Queued{m->rank, pos, m->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) queue_at(i);
  while (!queue.empty()) {
    const Queued top = queue.top();
    queue.pop();
    // An entry is stale when its pair has changed since it was queued (Hugging Face checks the
    // merge's result, as here).
    if (symbol[top.pos] < 0 || next[top.pos] >= n) continue;
    const int32_t right = next[top.pos];
    const Merge* m = merges.find(symbol[top.pos], symbol[right]);
    if (m == nullptr || m->merged != top.merged) continue;
    symbol[top.pos] = top.merged;
    symbol[right] = -1;
    next[top.pos] = next[right];
    if (next[right] < n) prev[next[right]] = top.pos;
    queue_at(prev[top.pos]);
    queue_at(top.pos);
  }
  word.erase(std::remove(word.begin(), word.end(), -1), word.end());
}

void bpe_merge(std::vector<int32_t>& word, const MergeTable& merges) {
  // The linear scan wins on short words and the heap on long ones; they meet near 16 bytes, and
  // most pre-tokens are shorter (docs/benchmarks.md, "Measurements behind the code").
  constexpr size_t kHeapFromLength = 16;
  if (word.size() < kHeapFromLength) {
    bpe_merge_reference(word, merges);
  } else {
    bpe_merge_heap(word, merges);
  }
}

}  // namespace hs::tokenizer_detail
