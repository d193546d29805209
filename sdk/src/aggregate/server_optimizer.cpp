// Server optimizers (FedAvg, FedAvgM, FedAdam) over float32 state in caller memory, and their
// spec parser. Freestanding: no strtod (newlib's allocates), no heap, no exceptions.
#include <stdint.h>
#include <string.h>

#include "aggregate/bytes.h"
#include "core/text.h"
#include "edgefl/aggregate.h"
#include "edgefl/config.h"

namespace edgefl {

namespace {

bool in_range(float v, float lo_exclusive, float hi_inclusive) {
  return v > lo_exclusive && v <= hi_inclusive;  // false for NaN
}
bool is_decay(float v) {
  return v >= 0.0f && v < 1.0f;  // false for NaN
}

float load_f32(const uint8_t* p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}
void store_f32(uint8_t* p, float v) {
  memcpy(p, &v, 4);
}

}  // namespace

const char* server_optimizer_name(ServerOptimizerKind kind) {
  switch (kind) {
    case ServerOptimizerKind::kFedAvg: return "fedavg";
    case ServerOptimizerKind::kFedAvgM: return "fedavgm";
    case ServerOptimizerKind::kFedAdam: return "fedadam";
  }
  return "unknown";
}

Status validate_server_optimizer_spec(const ServerOptimizerSpec& spec) {
  if (!in_range(spec.lr, 0.0f, 1e6f)) return Status::kInvalidSpec;
  switch (spec.kind) {
    case ServerOptimizerKind::kFedAvg: return Status::kOk;
    case ServerOptimizerKind::kFedAvgM: return is_decay(spec.momentum) ? Status::kOk : Status::kInvalidSpec;
    case ServerOptimizerKind::kFedAdam:
      return is_decay(spec.b1) && is_decay(spec.b2) && in_range(spec.tau, 0.0f, 1e6f) ? Status::kOk
                                                                                      : Status::kInvalidSpec;
  }
  return Status::kInvalidSpec;
}

Status parse_server_optimizer_spec(const char* text, ServerOptimizerSpec* spec) {
  if (text == nullptr || spec == nullptr) return Status::kInvalidArgument;
  const char* end = text + strlen(text);
  const char* colon = text;
  while (colon < end && *colon != ':') ++colon;

  ServerOptimizerSpec s;
  if (text::equals(text, colon, "fedavg")) {
    s.kind = ServerOptimizerKind::kFedAvg;
  } else if (text::equals(text, colon, "fedavgm")) {
    s.kind = ServerOptimizerKind::kFedAvgM;
  } else if (text::equals(text, colon, "fedadam")) {
    s.kind = ServerOptimizerKind::kFedAdam;
    s.lr = 0.01f;
  } else {
    return Status::kInvalidSpec;
  }
  if (colon < end) {
    const char* p = colon + 1;
    if (p == end) return Status::kInvalidSpec;  // "fedavg:" with nothing after the colon
    unsigned seen = 0;
    for (;;) {
      const char* item_end = p;
      while (item_end < end && *item_end != ',') ++item_end;
      const char* eq = p;
      while (eq < item_end && *eq != '=') ++eq;
      if (eq == item_end) return Status::kInvalidSpec;
      double value = 0.0;
      if (!text::parse_decimal(eq + 1, item_end, &value)) return Status::kInvalidSpec;
      if (value > 3.0e38) return Status::kInvalidSpec;
      // Keys each optimizer accepts; `seen` has one bit per key, so that a repeat is an error.
      struct Key {
        const char* name;
        bool allowed;
        float* field;
      };
      const Key keys[] = {
          {"lr", true, &s.lr},
          {"momentum", s.kind == ServerOptimizerKind::kFedAvgM, &s.momentum},
          {"b1", s.kind == ServerOptimizerKind::kFedAdam, &s.b1},
          {"b2", s.kind == ServerOptimizerKind::kFedAdam, &s.b2},
          {"tau", s.kind == ServerOptimizerKind::kFedAdam, &s.tau},
      };
      unsigned key = 0;
      float* field = nullptr;
      for (unsigned k = 0; k < sizeof(keys) / sizeof(keys[0]); ++k) {
        if (keys[k].allowed && text::equals(p, eq, keys[k].name)) {
          key = 1u << k;
          field = keys[k].field;
        }
      }
      if (field == nullptr) return Status::kInvalidSpec;
      if (seen & key) return Status::kInvalidSpec;
      seen |= key;
      *field = float(value);
      if (item_end == end) break;
      p = item_end + 1;
      if (p == end) return Status::kInvalidSpec;  // trailing comma
    }
  }
  EDGEFL_RETURN_IF_ERROR(validate_server_optimizer_spec(s));
  *spec = s;
  return Status::kOk;
}

size_t ServerOptimizer::state_bytes(ServerOptimizerKind kind, size_t n) {
  if (n > size_t(EDGEFL_MAX_DIMENSION)) return 0;
  switch (kind) {
    case ServerOptimizerKind::kFedAvg: return 0;
    case ServerOptimizerKind::kFedAvgM: return 4 * n;
    case ServerOptimizerKind::kFedAdam: return 8 * n;
  }
  return 0;
}

Status ServerOptimizer::init(const ServerOptimizerSpec& spec, Span<uint8_t> state, size_t n) {
  ready_ = false;
  state_ = nullptr;
  n_ = 0;
  steps_ = 0;
  EDGEFL_RETURN_IF_ERROR(validate_server_optimizer_spec(spec));
  if (n > size_t(EDGEFL_MAX_DIMENSION)) return Status::kDimensionTooLarge;
  const size_t need = state_bytes(spec.kind, n);
  if (state.size() < need || (need > 0 && state.data() == nullptr)) return Status::kInvalidArgument;
  spec_ = spec;
  state_ = need > 0 ? state.data() : nullptr;
  n_ = n;
  ready_ = true;
  reset();
  return Status::kOk;
}

void ServerOptimizer::reset() {
  steps_ = 0;
  if (!ready_ || state_ == nullptr) return;
  if (spec_.kind == ServerOptimizerKind::kFedAvgM) {
    memset(state_, 0, 4 * n_);
  } else if (spec_.kind == ServerOptimizerKind::kFedAdam) {
    // Layout: m[0..n) then v[0..n). Reddi et al. start v at >= tau^2; we use exactly tau^2.
    memset(state_, 0, 4 * n_);
    const float v0 = spec_.tau * spec_.tau;
    for (size_t i = 0; i < n_; ++i) store_f32(state_ + 4 * (n_ + i), v0);
  }
}

float ServerOptimizer::momentum(size_t i) const {
  if (!ready_ || state_ == nullptr || i >= n_) return 0.0f;
  return load_f32(state_ + 4 * i);
}

float ServerOptimizer::second_moment(size_t i) const {
  if (!ready_ || spec_.kind != ServerOptimizerKind::kFedAdam || i >= n_) return 0.0f;
  return load_f32(state_ + 4 * (n_ + i));
}

namespace {

// One coordinate's step: new global, new first state (FedAvgM v, FedAdam m) and new second state
// (FedAdam v). Float32 throughout, in this order (the build disables FP contraction).
struct Step {
  float g, a, b;
};

template <ServerOptimizerKind Kind>
inline Step step(const ServerOptimizerSpec& s, float g, float d, float a, float b) {
  if constexpr (Kind == ServerOptimizerKind::kFedAvg) {
    return {g + s.lr * d, a, b};
  } else if constexpr (Kind == ServerOptimizerKind::kFedAvgM) {
    const float v1 = s.momentum * a + d;
    return {g + s.lr * v1, v1, b};
  } else {
    const float m1 = s.b1 * a + (1.0f - s.b1) * d;
    const float v1 = s.b2 * b + (1.0f - s.b2) * (d * d);
    return {g + s.lr * m1 / (__builtin_sqrtf(v1) + s.tau), m1, v1};
  }
}

// The kind is a template constant: dispatch happens once per apply(), never per coordinate.
// Two passes over the same arithmetic: the first checks (writes nothing), the second writes, so
// that a failure leaves the model and the state untouched.
template <ServerOptimizerKind Kind>
Status apply_kind(const ServerOptimizerSpec& s, float* g, const float* d, uint8_t* st, size_t n) {
  using aggregate_internal::is_nonfinite;
  constexpr int kStates = Kind == ServerOptimizerKind::kFedAvg    ? 0
                          : Kind == ServerOptimizerKind::kFedAvgM ? 1
                                                                  : 2;
  for (size_t i = 0; i < n; ++i) {
    if (is_nonfinite(d[i])) return Status::kNonFiniteInput;
    const float a = kStates >= 1 ? load_f32(st + 4 * i) : 0.0f;
    const float b = kStates >= 2 ? load_f32(st + 4 * (n + i)) : 0.0f;
    const Step r = step<Kind>(s, g[i], d[i], a, b);
    if (is_nonfinite(r.g) || is_nonfinite(r.a) || is_nonfinite(r.b)) return Status::kValueOutOfRange;
  }
  for (size_t i = 0; i < n; ++i) {
    const float a = kStates >= 1 ? load_f32(st + 4 * i) : 0.0f;
    const float b = kStates >= 2 ? load_f32(st + 4 * (n + i)) : 0.0f;
    const Step r = step<Kind>(s, g[i], d[i], a, b);
    g[i] = r.g;
    if (kStates >= 1) store_f32(st + 4 * i, r.a);
    if (kStates >= 2) store_f32(st + 4 * (n + i), r.b);
  }
  return Status::kOk;
}

}  // namespace

Status ServerOptimizer::apply(Span<float> global, Span<const float> mean_delta) {
  if (!ready_) return Status::kInvalidArgument;
  if (global.size() != n_ || mean_delta.size() != n_) return Status::kDimensionMismatch;
  if (n_ > 0 && (global.data() == nullptr || mean_delta.data() == nullptr)) return Status::kInvalidArgument;
  Status s = Status::kInvalidArgument;
  switch (spec_.kind) {
    case ServerOptimizerKind::kFedAvg:
      s = apply_kind<ServerOptimizerKind::kFedAvg>(spec_, global.data(), mean_delta.data(), state_, n_);
      break;
    case ServerOptimizerKind::kFedAvgM:
      s = apply_kind<ServerOptimizerKind::kFedAvgM>(spec_, global.data(), mean_delta.data(), state_, n_);
      break;
    case ServerOptimizerKind::kFedAdam:
      s = apply_kind<ServerOptimizerKind::kFedAdam>(spec_, global.data(), mean_delta.data(), state_, n_);
      break;
  }
  if (s == Status::kOk) ++steps_;
  return s;
}

}  // namespace edgefl
