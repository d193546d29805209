// Internal: an in-place heapsort (no allocation, no recursion, O(n log n) worst case) for the
// freestanding core, where <algorithm> is not assumed. `less(a, b)` is a strict weak order.
#ifndef EDGEFL_SRC_CORE_HEAPSORT_H_
#define EDGEFL_SRC_CORE_HEAPSORT_H_

#include <stddef.h>

namespace edgefl {

template <typename T, typename Less>
void heapsort(T* a, size_t n, Less less) {
  if (n < 2) return;
  auto sift_down = [&](size_t root, size_t end) {
    for (;;) {
      size_t child = 2 * root + 1;
      if (child >= end) return;
      if (child + 1 < end && less(a[child], a[child + 1])) ++child;
      if (!less(a[root], a[child])) return;
      T t = a[root];
      a[root] = a[child];
      a[child] = t;
      root = child;
    }
  };
  for (size_t i = n / 2; i-- > 0;) sift_down(i, n);
  for (size_t end = n - 1; end > 0; --end) {
    T t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift_down(0, end);
  }
}

}  // namespace edgefl

#endif  // EDGEFL_SRC_CORE_HEAPSORT_H_
