// edgefl/span.h: a non-owning view of contiguous memory (C++17 has no std::span).
#ifndef EDGEFL_SPAN_H_
#define EDGEFL_SPAN_H_

#include <stddef.h>

#include <type_traits>

namespace edgefl {

// Span<T> never owns its memory; the caller keeps it alive for as long as the span is used.
template <typename T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(T* data, size_t size) : data_(data), size_(size) {}
  template <size_t N>
  constexpr Span(T (&array)[N]) : data_(array), size_(N) {}  // NOLINT: implicit by design
  // A Span<T> converts to Span<const T> (and nothing else: no float -> double reinterpretation).
  template <typename U, typename = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  constexpr Span(const Span<U>& other) : data_(other.data()), size_(other.size()) {}  // NOLINT

  constexpr T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T& operator[](size_t i) const { return data_[i]; }
  constexpr T* begin() const { return data_; }
  constexpr T* end() const { return data_ + size_; }
  constexpr Span subspan(size_t offset, size_t count) const { return Span(data_ + offset, count); }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace edgefl

#endif  // EDGEFL_SPAN_H_
