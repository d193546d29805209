// SgdTrainer (contracts in edgefl/trainer.h).
//
// Workspace layout, every region starting on a 64-byte boundary from the first aligned byte
// (workspace_bytes() adds 63 bytes of slack, so any alignment of the caller's buffer works):
//
//   TrainerState  the model plan and the pointers below
//   local         P floats: the weights being trained
//   velocity      P floats: the momentum buffer
//   grad          P floats: the gradient of the current batch
//   acts[0]       B x input_dim floats: the gathered rows
//   acts[l+1]     B x out_size(l) floats: output of layer l (after pooling and ReLU)
//   argmax[l]     B x out_size(l) bytes: conv layers only, the max-pool routing
//   dbuf[0..1]    activation gradients, ping-pong: B x the largest out_size of the layers whose
//                 output gradient each holds
//   labels        B bytes
//   col, dcol     one sample's im2col (forward) / im2row (backward) of the largest conv layer,
//                 and the gradient of the im2row
//   conv          one sample's conv output before pooling
//
// (P = parameter_count, B = rows held at once: min(micro_batch, batch_size), or batch_size when
// micro_batch is 0.) Nothing is allocated after init(); a batch runs in parts of B rows, and the
// conv layers one sample at a time through the im2col scratch, so only the pooled activations of
// B rows are kept.
#include <string.h>

#include <new>  // placement new only: inline, links no allocator

#include "core/rng.h"
#include "edgefl/trainer.h"
#include "train/layers.h"
#include "train/permutation.h"
#include "train/plan.h"

namespace edgefl {
namespace train {

struct TrainerState {
  ModelPlan plan;
  uint32_t capacity = 0;    // rows the buffers hold (B)
  uint32_t batch_rows = 0;  // init()'s batch_size: evaluate() and gradient() go in batches of it
  float* local = nullptr;
  float* velocity = nullptr;
  float* grad = nullptr;
  float* acts[kMaxPlanLayers + 1] = {};
  uint8_t* argmax[kMaxPlanLayers] = {};
  float* dbuf[2] = {};
  uint8_t* labels = nullptr;
  float* col = nullptr;
  float* dcol = nullptr;
  float* conv = nullptr;
};

namespace {

constexpr uint64_t kAlign = 64;
constexpr uint32_t kMaxBatch = 65536;
constexpr uint32_t kPurposeShuffle = 0x73687566u;  // "shuf"

// Byte offsets of the regions from the aligned base (see the layout above).
struct Layout {
  uint64_t local = 0, velocity = 0, grad = 0;
  uint64_t acts[kMaxPlanLayers + 1] = {};
  uint64_t argmax[kMaxPlanLayers] = {};
  uint64_t dbuf[2] = {};
  uint64_t labels = 0, col = 0, dcol = 0, conv = 0;
  uint64_t total = 0;
};

class LayoutBuilder {
 public:
  uint64_t take(uint64_t bytes) {
    const uint64_t at = end_;
    end_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return at;
  }
  uint64_t end() const { return end_; }

 private:
  uint64_t end_ = 0;
};

void compute_layout(const ModelPlan& plan, uint64_t capacity, Layout* layout) {
  LayoutBuilder b;
  b.take(sizeof(TrainerState));
  const uint64_t p = plan.parameters * sizeof(float);
  layout->local = b.take(p);
  layout->velocity = b.take(p);
  layout->grad = b.take(p);
  layout->acts[0] = b.take(capacity * plan.input_dim * sizeof(float));
  // The gradient of layer l's output lives in dbuf[(count - 1 - l) % 2] (backward() alternates).
  uint64_t max_grad[2] = {1, 1}, max_col = 0, max_conv = 0;
  for (uint32_t l = 0; l < plan.count; ++l) {
    const LayerPlan& lp = plan.layers[l];
    layout->acts[l + 1] = b.take(capacity * lp.out_size * sizeof(float));
    if (lp.kind == LayerKind::kConvPool) {
      layout->argmax[l] = b.take(capacity * lp.out_size);
      const uint64_t col = uint64_t(lp.in_c) * 9 * lp.in_h * lp.in_w;
      if (col > max_col) max_col = col;
      if (lp.conv_size > max_conv) max_conv = lp.conv_size;
    }
    uint64_t& m = max_grad[(plan.count - 1 - l) % 2];
    if (lp.out_size > m) m = lp.out_size;
  }
  layout->dbuf[0] = b.take(capacity * max_grad[0] * sizeof(float));
  layout->dbuf[1] = b.take(capacity * max_grad[1] * sizeof(float));
  layout->labels = b.take(capacity);
  layout->col = b.take(max_col * sizeof(float));
  layout->dcol = b.take(max_col * sizeof(float));
  layout->conv = b.take(max_conv * sizeof(float));
  layout->total = b.end();
}

bool finite(float x) {
  return x - x == 0.0f;  // false for NaN and +-Inf (no -ffast-math in edgefl targets)
}

// Rows a config holds at once (the B of the layout).
uint32_t rows_held(const TrainConfig& c) {
  return c.micro_batch == 0 || c.micro_batch > c.batch_size ? c.batch_size : c.micro_batch;
}

bool valid_config(const TrainConfig& c) {
  return c.batch_size >= 1 && c.batch_size <= kMaxBatch && c.local_epochs >= 1 && finite(c.learning_rate) &&
         c.learning_rate > 0.0f && finite(c.momentum) && c.momentum >= 0.0f && c.momentum < 1.0f &&
         finite(c.weight_decay) && c.weight_decay >= 0.0f && finite(c.prox_mu) && c.prox_mu >= 0.0f;
}

// Number of samples a view selects.
size_t selected(const DataView& d) {
  return d.indices != nullptr ? d.index_count : d.count;
}

uint32_t sample_id(const DataView& d, uint32_t position) {
  return d.indices != nullptr ? d.indices[position] : position;
}

Status validate_data(const ModelPlan& plan, const DataView& d) {
  if (d.inputs == nullptr || d.labels == nullptr || d.count == 0 || d.count > 0xFFFFFFFFu ||
      d.input_dim != plan.input_dim) {
    return Status::kInvalidArgument;
  }
  const size_t n = selected(d);
  if (n == 0 || n > 0xFFFFFFFFu) return Status::kInvalidArgument;
  for (size_t i = 0; i < n; ++i) {
    const size_t id = sample_id(d, uint32_t(i));
    if (id >= d.count || d.labels[id] >= plan.classes) return Status::kInvalidArgument;
  }
  return Status::kOk;
}

// Copies the samples at positions first.. of `d` (through `order`) into acts[0] and labels.
template <typename Order>
void gather(TrainerState& st, const DataView& d, uint32_t first, uint32_t rows, const Order& order) {
  const size_t dim = st.plan.input_dim;
  for (uint32_t r = 0; r < rows; ++r) {
    const uint32_t id = sample_id(d, order(first + r));
    memcpy(st.acts[0] + size_t(r) * dim, d.inputs + size_t(id) * dim, dim * sizeof(float));
    st.labels[r] = d.labels[id];
  }
}

void forward(TrainerState& st, const float* params, size_t rows) {
  for (uint32_t l = 0; l < st.plan.count; ++l) {
    const LayerPlan& lp = st.plan.layers[l];
    const float* w = params + lp.weight_offset;
    const float* bias = params + lp.bias_offset;
    const float* in = st.acts[l];
    float* out = st.acts[l + 1];
    if (lp.kind == LayerKind::kDense) {
      dense_forward(in, rows, lp.in_size, lp.out_c, w, bias, out);
    } else {
      for (size_t s = 0; s < rows; ++s) {
        conv3x3_forward(in + s * lp.in_size, lp.in_c, lp.in_h, lp.in_w, lp.out_c, w, bias, st.col, st.conv);
        maxpool2_forward(st.conv, lp.out_c, lp.in_h, lp.in_w, out + s * lp.out_size,
                         st.argmax[l] + s * lp.out_size);
      }
    }
    if (lp.relu) relu_forward(out, rows * lp.out_size);
  }
}

// Back-propagates dbuf[0] (dloss/dlogits) and adds the parameter gradient to `grad`.
void backward(TrainerState& st, const float* params, size_t rows, float* grad) {
  int cur = 0;
  for (uint32_t l = st.plan.count; l-- > 0;) {
    const LayerPlan& lp = st.plan.layers[l];
    float* d = st.dbuf[cur];
    float* dx = l > 0 ? st.dbuf[1 - cur] : nullptr;
    if (lp.relu) relu_backward(st.acts[l + 1], d, rows * lp.out_size);
    const float* w = params + lp.weight_offset;
    float* dw = grad + lp.weight_offset;
    float* db = grad + lp.bias_offset;
    if (lp.kind == LayerKind::kDense) {
      dense_backward(st.acts[l], d, rows, lp.in_size, lp.out_c, w, dw, db, dx);
    } else {
      for (size_t s = 0; s < rows; ++s) {
        conv3x3_pool_backward(st.acts[l] + s * lp.in_size, d + s * lp.out_size,
                              st.argmax[l] + s * lp.out_size, lp.in_c, lp.in_h, lp.in_w, lp.out_c, w, st.col,
                              st.dcol, dw, db, dx != nullptr ? dx + s * lp.in_size : nullptr);
      }
    }
    cur = 1 - cur;
  }
}

// Forward (and, if `grad` is not null, backward with dlogits scaled by `scale`) over the rows of
// acts[0]. Returns `total` plus the rows' losses; adds correct predictions to *correct.
float run_part(TrainerState& st, const float* params, size_t rows, float scale, float* grad,
               uint32_t* correct, float total) {
  forward(st, params, rows);
  total = softmax_xent(st.acts[st.plan.count], st.labels, rows, st.plan.classes, scale,
                       grad != nullptr ? st.dbuf[0] : nullptr, correct, total);
  if (grad != nullptr) backward(st, params, rows, grad);
  return total;
}

// run_part over the samples at positions first .. first + rows - 1 of `d` (through `order`), in
// parts of st.capacity rows; every sum (loss, gradient) continues across the parts in row order,
// so the result is the bits of one part of `rows` rows. Returns the sum of the rows' losses.
template <typename Order>
float run_rows(TrainerState& st, const DataView& d, uint32_t first, uint32_t rows, const Order& order,
               const float* params, float scale, float* grad, uint32_t* correct) {
  float total = 0.0f;
  for (uint32_t done = 0; done < rows; done += st.capacity) {
    const uint32_t part = rows - done < st.capacity ? rows - done : st.capacity;
    gather(st, d, first + done, part, order);
    total = run_part(st, params, part, scale, grad, correct, total);
  }
  return total;
}

// One SGD step over a range of parameters (see TrainConfig for the rule).
void sgd_update(float* __restrict w, float* __restrict v, const float* __restrict g,
                const float* __restrict w0, size_t n, float lr, float momentum, float decay, float mu) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + decay * w[i] + mu * (w[i] - w0[i]);
    v[i] = momentum * v[i] + gi;
    w[i] -= lr * v[i];
  }
}

struct Sequential {
  uint32_t operator()(uint32_t position) const { return position; }
};

}  // namespace
}  // namespace train

using train::LayerPlan;
using train::ModelPlan;
using train::TrainerState;

size_t SgdTrainer::workspace_bytes(const ModelSpec& spec, const TrainConfig& config) {
  ModelPlan plan;
  if (train::build_plan(spec, &plan) != Status::kOk || !train::valid_config(config)) return 0;
  train::Layout layout;
  train::compute_layout(plan, train::rows_held(config), &layout);
  const uint64_t total = layout.total + train::kAlign - 1;
  return total > uint64_t(SIZE_MAX) ? 0 : size_t(total);
}

Status SgdTrainer::init(const ModelSpec& spec, const TrainConfig& config, Span<uint8_t> workspace) {
  state_ = nullptr;
  has_data_ = false;
  data_ = DataView();
  ModelPlan plan;
  EDGEFL_RETURN_IF_ERROR(train::build_plan(spec, &plan));
  if (!train::valid_config(config) || workspace.data() == nullptr) return Status::kInvalidArgument;
  const size_t need = workspace_bytes(spec, config);
  if (need == 0 || workspace.size() < need) return Status::kWorkspaceTooSmall;

  train::Layout layout;
  train::compute_layout(plan, train::rows_held(config), &layout);
  const uintptr_t address = reinterpret_cast<uintptr_t>(workspace.data());
  uint8_t* base = workspace.data() + ((train::kAlign - address % train::kAlign) % train::kAlign);
  TrainerState* st = ::new (static_cast<void*>(base)) TrainerState();  // placement: no allocation
  st->plan = plan;
  st->capacity = train::rows_held(config);
  st->batch_rows = config.batch_size;
  st->local = reinterpret_cast<float*>(base + layout.local);
  st->velocity = reinterpret_cast<float*>(base + layout.velocity);
  st->grad = reinterpret_cast<float*>(base + layout.grad);
  for (uint32_t l = 0; l <= plan.count; ++l) st->acts[l] = reinterpret_cast<float*>(base + layout.acts[l]);
  for (uint32_t l = 0; l < plan.count; ++l) {
    if (plan.layers[l].kind == train::LayerKind::kConvPool) st->argmax[l] = base + layout.argmax[l];
  }
  st->dbuf[0] = reinterpret_cast<float*>(base + layout.dbuf[0]);
  st->dbuf[1] = reinterpret_cast<float*>(base + layout.dbuf[1]);
  st->labels = base + layout.labels;
  st->col = reinterpret_cast<float*>(base + layout.col);
  st->dcol = reinterpret_cast<float*>(base + layout.dcol);
  st->conv = reinterpret_cast<float*>(base + layout.conv);
  spec_ = spec;
  config_ = config;
  state_ = st;
  return Status::kOk;
}

Status SgdTrainer::set_data(const DataView& data) {
  if (state_ == nullptr) return Status::kInvalidArgument;
  EDGEFL_RETURN_IF_ERROR(train::validate_data(state_->plan, data));
  data_ = data;
  has_data_ = true;
  return Status::kOk;
}

void SgdTrainer::set_seed(uint64_t seed) {
  config_.seed = seed;
}

Status SgdTrainer::set_config(const TrainConfig& config) {
  if (!train::valid_config(config) || state_ == nullptr || train::rows_held(config) > state_->capacity) {
    return Status::kInvalidArgument;
  }
  config_ = config;
  return Status::kOk;
}

size_t SgdTrainer::parameter_count() const {
  return state_ != nullptr ? state_->plan.parameters : 0;
}

Status SgdTrainer::fit_impl(Span<const float> global, Span<float> delta_out, FitResult* result) {
  if (state_ == nullptr || !has_data_ || result == nullptr) return Status::kInvalidArgument;
  TrainerState& st = *state_;
  const size_t p = st.plan.parameters;
  if (global.size() != p || delta_out.size() != p || global.data() == nullptr ||
      delta_out.data() == nullptr) {
    return Status::kInvalidArgument;
  }
  const float* w0 = global.data();
  for (size_t i = 0; i < p; ++i) {
    if (!train::finite(w0[i])) return Status::kNonFiniteInput;
  }
  memcpy(st.local, w0, p * sizeof(float));
  memset(st.velocity, 0, p * sizeof(float));

  const uint32_t n = uint32_t(train::selected(data_));
  const uint32_t batch = config_.batch_size;
  const uint32_t shuffle_key = derive_key(config_.seed, train::kPurposeShuffle);
  double loss_sum = 0.0;
  uint64_t samples = 0, correct = 0;
  uint32_t steps = 0;
  bool capped = false;
  for (uint32_t epoch = 0; epoch < config_.local_epochs && !capped; ++epoch) {
    const train::FeistelPermutation order(n, hash32(shuffle_key, epoch));
    for (uint32_t first = 0; first < n; first += batch) {
      if (config_.max_steps != 0 && steps >= config_.max_steps) {
        capped = true;
        break;
      }
      const uint32_t rows = n - first < batch ? n - first : batch;
      memset(st.grad, 0, p * sizeof(float));
      uint32_t batch_correct = 0;
      loss_sum += double(train::run_rows(st, data_, first, rows, order, st.local, 1.0f / float(rows), st.grad,
                                         &batch_correct));
      correct += batch_correct;
      for (uint32_t l = 0; l < st.plan.count; ++l) {
        const LayerPlan& lp = st.plan.layers[l];
        train::sgd_update(st.local + lp.weight_offset, st.velocity + lp.weight_offset,
                          st.grad + lp.weight_offset, w0 + lp.weight_offset, lp.weight_size,
                          config_.learning_rate, config_.momentum, config_.weight_decay, config_.prox_mu);
        train::sgd_update(st.local + lp.bias_offset, st.velocity + lp.bias_offset, st.grad + lp.bias_offset,
                          w0 + lp.bias_offset, lp.bias_size, config_.learning_rate, config_.momentum, 0.0f,
                          config_.prox_mu);
      }
      ++steps;
      samples += rows;
    }
  }

  for (size_t i = 0; i < p; ++i) {
    if (!train::finite(st.local[i])) return Status::kNonFiniteInput;
  }
  float* delta = delta_out.data();
  bool all_finite = true;
  for (size_t i = 0; i < p; ++i) {
    delta[i] = st.local[i] - w0[i];  // reads w0[i] before writing delta[i]: aliasing is fine
    all_finite &= train::finite(delta[i]);
  }
  if (!all_finite) return Status::kNonFiniteInput;
  FitResult r;
  r.samples = samples > 0xFFFFFFFFu ? 0xFFFFFFFFu : uint32_t(samples);
  r.steps = steps;
  r.loss = samples > 0 ? float(loss_sum / double(samples)) : 0.0f;
  r.accuracy = samples > 0 ? float(double(correct) / double(samples)) : 0.0f;
  *result = r;
  return Status::kOk;
}

Status SgdTrainer::evaluate(Span<const float> params, const DataView& data, float* loss, float* accuracy) {
  if (state_ == nullptr || loss == nullptr || accuracy == nullptr || params.data() == nullptr ||
      params.size() != state_->plan.parameters) {
    return Status::kInvalidArgument;
  }
  TrainerState& st = *state_;
  EDGEFL_RETURN_IF_ERROR(train::validate_data(st.plan, data));
  const uint32_t n = uint32_t(train::selected(data));
  double loss_sum = 0.0;
  uint32_t correct = 0;
  for (uint32_t first = 0; first < n; first += st.batch_rows) {
    const uint32_t rows = n - first < st.batch_rows ? n - first : st.batch_rows;
    loss_sum += double(
        train::run_rows(st, data, first, rows, train::Sequential(), params.data(), 0.0f, nullptr, &correct));
  }
  *loss = float(loss_sum / double(n));
  *accuracy = float(double(correct) / double(n));
  return Status::kOk;
}

Status SgdTrainer::gradient(Span<const float> params, const DataView& batch, Span<float> grad_out,
                            float* loss) {
  if (state_ == nullptr || loss == nullptr || params.data() == nullptr || grad_out.data() == nullptr ||
      params.size() != state_->plan.parameters || grad_out.size() != state_->plan.parameters) {
    return Status::kInvalidArgument;
  }
  TrainerState& st = *state_;
  EDGEFL_RETURN_IF_ERROR(train::validate_data(st.plan, batch));
  const uint32_t n = uint32_t(train::selected(batch));
  float* grad = grad_out.data();
  memset(grad, 0, grad_out.size() * sizeof(float));
  double loss_sum = 0.0;
  for (uint32_t first = 0; first < n; first += st.batch_rows) {
    const uint32_t rows = n - first < st.batch_rows ? n - first : st.batch_rows;
    loss_sum += double(train::run_rows(st, batch, first, rows, train::Sequential(), params.data(),
                                       1.0f / float(n), grad, nullptr));
  }
  *loss = float(loss_sum / double(n));
  return Status::kOk;
}

}  // namespace edgefl
