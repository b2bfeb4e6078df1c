// Byte-pair merging over token ids. Private to core/tokenizer (tests include it).
//
// A word is a sequence of symbol ids (at first one per byte). GPT-2's bpe() repeatedly takes the
// adjacent pair with the lowest merge rank and merges every occurrence of it, left to right,
// until no adjacent pair has a rank. Working on ids instead of strings is the same computation
// because every merge result is checked to be in the vocabulary when the files are read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/io/splitmix64.h"

namespace hs::tokenizer_detail {

struct Merge {
  int32_t rank;    // position in merges.txt; lower merges first
  int32_t merged;  // id of the concatenation
};

// (left id, right id) -> Merge. Open addressing over a power-of-two table; keys are hashed with a
// 64-bit mixer, so ids chosen in any pattern spread evenly.
class MergeTable {
 public:
  // Adds or replaces (a later line of merges.txt replaces an earlier one, as a Python dict does).
  void insert_or_assign(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }
  // Makes room for `n` merges at once (a tokenizer.json lists hundreds of thousands).
  void reserve(size_t n);

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative, so never a real key
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  static uint64_t hash(uint64_t key) { return splitmix64_mix(key); }
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// GPT-2's bpe() loop, literally: O(n^2) in the word length. The reference the fast version is
// tested against, and the fastest choice for the short words that make up ordinary text.
void bpe_merge_reference(std::vector<int32_t>& word, const MergeTable& merges);

// The same result in O(n log n) with a heap of candidate pairs, for long words (a hostile text can
// be one huge "word"). Equal to the reference even for merge lists that were not produced by
// BPE training: all occurrences of the current lowest pair are merged before any pair they create.
void bpe_merge_heap(std::vector<int32_t>& word, const MergeTable& merges);

// Hugging Face tokenizers' Word::merge_all, the merge of every tokenizer.json BPE model: one merge
// at a time, the pair of lowest rank first and the leftmost of equal ranks. The same as GPT-2's
// loop for merge lists made by BPE training; it differs only for lists where a merge creates a
// pair that ranks below itself.
void bpe_merge_hf(std::vector<int32_t>& word, const MergeTable& merges);

// Picks one of the two by word length.
void bpe_merge(std::vector<int32_t>& word, const MergeTable& merges);

}  // namespace hs::tokenizer_detail
