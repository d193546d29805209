#include "sketch/quantile_sketch.h"

#include <string.h>

#include "core/heapsort.h"

namespace edgefl {
namespace sketch {

QuantileSketch::QuantileSketch(unsigned k, uint64_t max_n, float* memory, uint64_t seed)
    : k_(k),
      max_levels_(quantile_levels(k, max_n)),
      base_(memory),
      levels_(memory + 2 * size_t(k)),
      merge_(memory + 2 * size_t(k) + size_t(k) * quantile_levels(k, max_n)),
      rng_(seed) {}

void QuantileSketch::update(float v) {
  if (n_ == 0) {
    min_ = max_ = v;
  } else {
    min_ = v < min_ ? v : min_;
    max_ = v > max_ ? v : max_;
  }
  ++n_;
  base_[base_count_++] = v;
  if (base_count_ == 2 * k_) flush_base();
}

// Sorts the full base buffer, keeps every other item (seeded offset) as a carry of k items of
// weight 2, and propagates it up the levels: an empty level takes the carry; a full one merges
// with it (2k sorted items) and halves again into the next carry.
void QuantileSketch::flush_base() {
  heapsort(base_, base_count_, [](float a, float b) { return a < b; });
  unsigned offset = unsigned(rng_.next() >> 63);
  for (unsigned i = 0; i < k_; ++i) merge_[i] = base_[2 * i + offset];
  base_count_ = 0;
  // merge_[0..k) holds the carry.
  for (unsigned level = 0; level < max_levels_; ++level) {
    float* slot = levels_ + size_t(level) * k_;
    if (!(level_bits_ & (1u << level))) {
      memcpy(slot, merge_, k_ * sizeof(float));
      level_bits_ |= 1u << level;
      return;
    }
    // Merge slot and carry into merge_[k..3k)? merge_ has 2k: merge backwards into merge_ using
    // the carry copy in base_ (free now) as the second input.
    memcpy(base_, merge_, k_ * sizeof(float));
    unsigned a = 0, b = 0, out = 0;
    while (a < k_ || b < k_) {
      if (b == k_ || (a < k_ && slot[a] <= base_[b])) {
        merge_[out++] = slot[a++];
      } else {
        merge_[out++] = base_[b++];
      }
    }
    offset = unsigned(rng_.next() >> 63);
    for (unsigned i = 0; i < k_; ++i) merge_[i] = merge_[2 * i + offset];
    level_bits_ &= ~(1u << level);
  }
  // Unreachable when at most max_n updates arrive (quantile_levels() sized the levels); keep
  // the carry in the top level rather than lose it.
  memcpy(levels_ + size_t(max_levels_ - 1) * k_, merge_, k_ * sizeof(float));
  level_bits_ |= 1u << (max_levels_ - 1);
}

void QuantileSketch::quantiles(unsigned parts, float* out, uint64_t* scratch) {
  // Items as (value bits in sortable order << 32 | weight exponent).
  struct Item {
    float value;
    uint32_t weight;
  };
  static_assert(sizeof(Item) == 8, "8-byte items");
  Item* items = reinterpret_cast<Item*>(scratch);
  size_t count = 0;
  for (unsigned i = 0; i < base_count_; ++i) items[count++] = Item{base_[i], 1};
  for (unsigned level = 0; level < max_levels_; ++level) {
    if (!(level_bits_ & (1u << level))) continue;
    const float* slot = levels_ + size_t(level) * k_;
    for (unsigned i = 0; i < k_; ++i) items[count++] = Item{slot[i], 2u << level};
  }
  heapsort(items, count, [](const Item& a, const Item& b) { return a.value < b.value; });
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += items[i].weight;
  // The value at normalized rank q: the first item whose cumulative weight exceeds q * total.
  size_t j = 0;
  uint64_t cumulative = 0;
  for (unsigned p = 1; p < parts; ++p) {
    const double target = double(p) * double(total) / double(parts);
    while (j < count && double(cumulative + items[j].weight) <= target) cumulative += items[j++].weight;
    out[p - 1] = j < count ? items[j].value : max_;
  }
}

}  // namespace sketch
}  // namespace edgefl
