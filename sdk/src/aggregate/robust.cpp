// Coordinate-wise median and trimmed mean (edgefl/aggregate.h, RobustRule).
#include <stdint.h>
#include <string.h>

#include "core/heapsort.h"
#include "core/text.h"
#include "edgefl/aggregate.h"

namespace edgefl {
namespace {

bool finite(float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  return (bits & 0x7f800000u) != 0x7f800000u;
}

size_t trimmed_per_side(const RobustSpec& spec, size_t count) {
  return size_t(spec.trim_fraction * double(count));
}

}  // namespace

Status parse_robust_spec(const char* text, RobustSpec* spec) {
  if (text == nullptr || spec == nullptr) return Status::kInvalidArgument;
  const char* end = text + strlen(text);
  const char* colon = text;
  while (colon < end && *colon != ':') ++colon;
  RobustSpec s;
  if (text::equals(text, colon, "mean")) {
    s.rule = RobustRule::kMean;
  } else if (text::equals(text, colon, "median")) {
    s.rule = RobustRule::kMedian;
  } else if (text::equals(text, colon, "trimmed-mean")) {
    s.rule = RobustRule::kTrimmedMean;
  } else {
    return Status::kInvalidSpec;
  }
  if (colon < end) {
    const char* value = colon + 1 + 5;  // "beta="
    if (s.rule != RobustRule::kTrimmedMean || end - (colon + 1) < 6 || memcmp(colon + 1, "beta=", 5) != 0) {
      return Status::kInvalidSpec;
    }
    double beta = 0;
    if (!text::parse_decimal(value, end, &beta) || !(beta >= 0 && beta < 0.5)) return Status::kInvalidSpec;
    s.trim_fraction = beta;
  }
  *spec = s;
  return Status::kOk;
}

const char* robust_rule_name(RobustRule rule) {
  switch (rule) {
    case RobustRule::kMean: return "mean";
    case RobustRule::kMedian: return "median";
    case RobustRule::kTrimmedMean: return "trimmed-mean";
  }
  return "unknown";
}

size_t robust_workspace_bytes(size_t count) {
  return count > SIZE_MAX / 4 ? 0 : 4 * count;
}

Status robust_combine(const RobustSpec& spec, Span<const float> rows, size_t count, Span<float> out,
                      Span<uint8_t> workspace) {
  const size_t n = out.size();
  if (count == 0 || (n != 0 && count > SIZE_MAX / n)) return Status::kInvalidArgument;
  if (rows.size() != count * n)
    return rows.size() % count == 0 ? Status::kDimensionMismatch : Status::kInvalidArgument;
  if (workspace.size() < robust_workspace_bytes(count) ||
      reinterpret_cast<uintptr_t>(workspace.data()) % 4 != 0) {
    return Status::kInvalidArgument;
  }
  if (spec.rule != RobustRule::kMean && spec.rule != RobustRule::kMedian &&
      spec.rule != RobustRule::kTrimmedMean) {
    return Status::kInvalidArgument;
  }
  if (spec.rule == RobustRule::kTrimmedMean && (!(spec.trim_fraction >= 0 && spec.trim_fraction < 0.5) ||
                                                2 * trimmed_per_side(spec, count) >= count)) {
    return Status::kInvalidArgument;
  }
  for (size_t j = 0; j < rows.size(); ++j) {
    if (!finite(rows[j])) return Status::kNonFiniteInput;
  }
  float* column = reinterpret_cast<float*>(workspace.data());
  const size_t cut = spec.rule == RobustRule::kTrimmedMean ? trimmed_per_side(spec, count) : 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < count; ++k) column[k] = rows[k * n + i];
    if (spec.rule == RobustRule::kMean) {
      double sum = 0;
      for (size_t k = 0; k < count; ++k) sum += column[k];
      out[i] = float(sum / double(count));
      continue;
    }
    heapsort(column, count, [](float a, float b) { return a < b; });
    if (spec.rule == RobustRule::kMedian) {
      out[i] = count % 2 == 1 ? column[count / 2]
                              : float((double(column[count / 2 - 1]) + double(column[count / 2])) / 2);
    } else {
      double sum = 0;
      for (size_t k = cut; k < count - cut; ++k) sum += column[k];
      out[i] = float(sum / double(count - 2 * cut));
    }
  }
  return Status::kOk;
}

}  // namespace edgefl
