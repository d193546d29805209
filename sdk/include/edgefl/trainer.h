// edgefl/trainer.h: the trainer seam, and the built-in SGD trainer.
//
// A Trainer turns the global model into a local update. Apps with TFLite, ExecuTorch, ONNX
// Runtime or anything else implement the one-method interface below; everyone else uses
// SgdTrainer, which trains the models of edgefl/model.h out of one caller-owned workspace.
//
// Ask, then give (the shape of ZSTD_estimateCCtxSize / ZSTD_initStaticCCtx):
//
//   edgefl::ModelSpec spec;                         // parse_model_spec("cnn", &spec)
//   edgefl::TrainConfig cfg;                        // batch 32, lr 0.05, momentum 0.9, ...
//   size_t ws = edgefl::SgdTrainer::workspace_bytes(spec, cfg);     // ~1.1 MB for cnn, batch 32
//   edgefl::SgdTrainer trainer;
//   if (trainer.init(spec, cfg, {ws_buf, ws}) != edgefl::Status::kOk) { ... }
//   // per round (one trainer per thread can serve many simulated clients in turn):
//   edgefl::DataView data{images, labels, count, edgefl::input_dim(spec), client_indices, n_client};
//   if (trainer.set_data(data) != edgefl::Status::kOk) { ... }
//   trainer.set_seed(round_seed);
//   edgefl::FitResult r;
//   edgefl::Status s = trainer.fit({global, n}, {delta, n}, &r);  // delta = local - global
//
// After init() the trainer never allocates, throws, or calls the OS; the workspace must outlive
// the trainer (it is never freed here). A trainer is not thread-safe: use one per thread.
// Distinct trainers share nothing.
#ifndef EDGEFL_TRAINER_H_
#define EDGEFL_TRAINER_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/model.h"
#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

// What one fit() did.
struct FitResult {
  uint32_t samples = 0;  // training examples processed: client samples x epochs, fewer if capped
  float loss = 0;        // mean training loss over those examples (measured while training)
  float accuracy = 0;    // fraction of those examples classified correctly (while training)
  uint32_t steps = 0;    // optimizer steps (mini-batches)
};

// The seam an app implements to plug in its own training engine. Implementations are `final`.
class Trainer {
 public:
  // Trains from `global` (read-only, parameter_count floats) and writes delta = local - global
  // into `delta_out` (same length). Fills *result on success.
  [[nodiscard]] virtual Status fit(Span<const float> global, Span<float> delta_out, FitResult* result) = 0;

 protected:
  Trainer() = default;
  Trainer(const Trainer&) = default;
  Trainer& operator=(const Trainer&) = default;
  ~Trainer() = default;  // non-virtual: no deleting destructor, so no operator delete is linked
};

// Hyper-parameters of SgdTrainer. The update of one step, for every parameter w (PyTorch's SGD
// convention: no dampening, no Nesterov):
//   g = mean over the batch of dloss/dw  +  weight_decay * w (weights only, not biases)
//       + prox_mu * (w - w_global)         (FedProx: Li et al., "Federated Optimization in
//                                            Heterogeneous Networks", MLSys 2020)
//   v = momentum * v + g;   w -= learning_rate * v
// v starts at 0 in every fit(), and w at the global model.
struct TrainConfig {
  uint32_t batch_size = 32;     // 1..65536; the last batch of an epoch may be smaller
  uint32_t local_epochs = 1;    // >= 1 passes over the client's samples
  uint32_t max_steps = 0;       // 0 = no cap; else fit() stops after this many steps
  float learning_rate = 0.05f;  // > 0
  float momentum = 0.9f;        // [0, 1)
  float weight_decay = 0.0f;    // >= 0, L2 on weights
  float prox_mu = 0.0f;         // >= 0, FedProx proximal term
  uint64_t seed = 1;            // sample order; set_seed() changes it between rounds
  // Rows of a batch held in memory at once (0 = the whole batch): a batch runs through the
  // network in parts of this many rows, whose gradients and losses are summed in the same order
  // as the whole batch's, so the result is the same bits whatever this is. It sets the size of
  // the activation buffers (SgdTrainer::workspace_bytes): the CNN needs about 46 kB per row
  // (1.12 MB in all with 4 rows, 2.40 MB with a whole batch of 32), at the same speed.
  uint32_t micro_batch = 4;
};

// A view of labelled samples; the caller keeps the memory alive and unchanged while the trainer
// uses it (from set_data() to the end of the last fit(), or during evaluate()/gradient()).
struct DataView {
  const float* inputs = nullptr;      // count x input_dim floats, row-major
  const uint8_t* labels = nullptr;    // count labels, each < class_count(spec)
  size_t count = 0;                   // samples in `inputs` (<= 2^32 - 1)
  size_t input_dim = 0;               // must equal input_dim(spec)
  const uint32_t* indices = nullptr;  // optional subset (the client's samples), each < count;
                                      // nullptr = all `count` samples in order
  size_t index_count = 0;             // entries of `indices` (ignored when indices is nullptr)
};

namespace train {
struct TrainerState;  // internal: lives at the head of the workspace
}  // namespace train

// The built-in trainer: dense, conv3x3 (stride 1, same zero padding), 2x2 max-pool, ReLU and
// softmax cross-entropy, trained by mini-batch SGD with momentum, weight decay and FedProx.
//
// Deterministic: the same (spec, config, seed, data, global) gives the same delta bytes, on every
// platform with IEEE binary32, no FMA contraction (-ffp-contract=off, set by the edgefl targets)
// and no -ffast-math: every sum has a fixed order and the kernels need no libm (GCC and Clang,
// -O0 to -O3, SSE2 to AVX-512 agree; tests/sdk/train_test.cpp pins the bytes). Sample order: a fresh
// pseudorandom permutation of the client's samples per epoch, from a 4-round Feistel network keyed by (seed,
// epoch) and cycle-walked to the sample count (Luby & Rackoff, SIAM J. Comput. 1988; Black & Rogaway,
// "Ciphers with Arbitrary Finite Domains", CT-RSA 2002): no index buffer, any number of samples.
class SgdTrainer final : public Trainer {
 public:
  SgdTrainer() = default;
  SgdTrainer(const SgdTrainer&) = delete;  // two trainers must not share a workspace
  SgdTrainer& operator=(const SgdTrainer&) = delete;
  SgdTrainer(SgdTrainer&& other) noexcept { *this = static_cast<SgdTrainer&&>(other); }
  SgdTrainer& operator=(SgdTrainer&& other) noexcept {  // moves the binding; `other` is left uninitialised
    if (this != &other) {
      state_ = other.state_;
      spec_ = other.spec_;
      config_ = other.config_;
      data_ = other.data_;
      has_data_ = other.has_data_;
      other.state_ = nullptr;
      other.has_data_ = false;
    }
    return *this;
  }
  ~SgdTrainer() = default;

  // Bytes of workspace init() needs (any alignment): model plan, local weights, momentum and
  // gradient buffers (3 x parameter_count floats), activations and their gradients for
  // min(micro_batch, batch_size) rows (batch_size rows when micro_batch is 0), and one sample's
  // im2col scratch. 0 if spec or config is invalid, or if the size does not fit in size_t.
  static size_t workspace_bytes(const ModelSpec& spec, const TrainConfig& config);

  // Binds the trainer to `workspace` (workspace_bytes(spec, config) bytes; contents ignored).
  // Forgets any data set before. May be called again to re-bind.
  // Fails: kInvalidSpec (spec); kInvalidArgument (config out of range, or workspace.data() null);
  // kWorkspaceTooSmall if workspace.size() < workspace_bytes(spec, config). On failure the
  // trainer is left uninitialised.
  [[nodiscard]] Status init(const ModelSpec& spec, const TrainConfig& config, Span<uint8_t> workspace);

  // Sets the samples fit() trains on; cheap (validates indices and labels: O(samples)), so a
  // simulation can switch clients between rounds without re-init. The trainer keeps the pointers.
  // Fails (the previous data stays set): kInvalidArgument if not initialised, a pointer is null,
  // no sample is selected, input_dim differs from the spec, an index >= count, a selected label
  // >= class_count(spec), or count >= 2^32.
  [[nodiscard]] Status set_data(const DataView& data);

  // Sets the seed of the sample order of the next fit() calls (as TrainConfig::seed).
  void set_seed(uint64_t seed);

  // Replaces the hyper-parameters without re-init. Fails with kInvalidArgument (and keeps the old
  // ones) if the config is out of range, or holds more rows at once (min(micro_batch,
  // batch_size), or batch_size when micro_batch is 0) than the config init() was sized for.
  [[nodiscard]] Status set_config(const TrainConfig& config);

  // Trains on the data of set_data(): starting from `global`, local_epochs passes over the
  // samples in mini-batches (stopping after max_steps if set), then writes local - global into
  // `delta_out`. `delta_out` may alias `global` (each global value is read before its delta is
  // written). result->samples counts examples processed (samples x epochs unless capped).
  // Fails: kInvalidArgument if not initialised, no data set, a span is not parameter_count long,
  // or result is null; kNonFiniteInput if `global` holds NaN/Inf, or if training diverged so that
  // the delta would (delta_out then holds partial data; *result is unchanged).
  // (Inline, so that SgdTrainer has no key function: its vtable and typeinfo are emitted where it
  // is used, which links whether that code is built with RTTI or, like the SDK, without.)
  [[nodiscard]] Status fit(Span<const float> global, Span<float> delta_out, FitResult* result) override {
    return fit_impl(global, delta_out, result);
  }

  // Mean loss and accuracy of `params` over the samples of `data` (validated as by set_data();
  // the data of set_data() is not changed), in batches of init()'s batch_size (each run in parts
  // of its micro_batch rows: the same bits).
  // Fails: kInvalidArgument (not initialised, params mis-sized, null outputs, bad data).
  [[nodiscard]] Status evaluate(Span<const float> params, const DataView& data, float* loss, float* accuracy);

  // grad_out = gradient of the mean cross-entropy over the samples of `batch` at `params` (no
  // weight decay, no proximal term), computed in chunks of init()'s batch_size; *loss = that mean
  // loss.
  // For tests and custom optimizers. Fails as evaluate(), or if grad_out is mis-sized.
  [[nodiscard]] Status gradient(Span<const float> params, const DataView& batch, Span<float> grad_out,
                                float* loss);

  bool initialized() const { return state_ != nullptr; }
  size_t parameter_count() const;  // 0 before init()
  const ModelSpec& spec() const { return spec_; }
  const TrainConfig& config() const { return config_; }

 private:
  [[nodiscard]] Status fit_impl(Span<const float> global, Span<float> delta_out, FitResult* result);

  train::TrainerState* state_ = nullptr;  // in the workspace
  ModelSpec spec_;
  TrainConfig config_;
  DataView data_;
  bool has_data_ = false;
};

}  // namespace edgefl

#endif  // EDGEFL_TRAINER_H_
