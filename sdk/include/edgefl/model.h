// edgefl/model.h: the models the built-in trainer knows, and the layout of their parameters.
//
// A model is an ordered list of named float32 tensors stored back to back in ONE flat parameter
// vector of parameter_count(spec) floats: the vector the codecs compress and the server averages.
// The order and shapes below are part of the contract between clients and server: never reorder.
//
//   edgefl::ModelSpec spec;
//   if (edgefl::parse_model_spec("cnn", &spec) != edgefl::Status::kOk) { ... }
//   size_t n = edgefl::parameter_count(spec);                 // 55,338 for "cnn"
//   edgefl::init_parameters(spec, /*seed=*/7, {params, n});   // same floats on every platform
//   for (size_t i = 0; i < edgefl::tensor_count(spec); ++i) {
//     edgefl::TensorInfo t;
//     (void)edgefl::tensor_info(spec, i, &t);                 // "conv1.weight", {16,1,3,3}, offset 0
//   }
//
// Spec grammar (decimal numbers, no spaces):
//
//   spec := 'mlp:' N '-' N { '-' N }      input features, hidden widths..., classes (2..9 numbers)
//         | 'cnn' [ ':' C1 '-' C2 '-' H ] { ',' ( 'in=' C 'x' HEIGHT 'x' WIDTH | 'classes=' K ) }
//
//   mlp:784-128-10   dense 784->128, ReLU, dense 128->10 (101,770 parameters)
//   cnn              = cnn:16-32-32 on 1x28x28 inputs with 10 classes:
//                    conv3x3 1->16 (same padding) + 2x2 max-pool + ReLU
//                    -> conv3x3 16->32 + 2x2 max-pool + ReLU
//                    -> dense 1568->32 + ReLU -> dense 32->10 (55,338 parameters)
//   cnn:8-16-64,in=3x32x32,classes=100   other widths, inputs and class counts
//
// Every width is in [1, 2^24]; classes <= 256 (labels are uint8); cnn inputs have HEIGHT and WIDTH
// multiples of 4 in [4, 4096] and C in [1, 4096]; parameter_count() <= EDGEFL_MAX_DIMENSION.
// (Max-pool then ReLU equals ReLU then max-pool: both are monotone.)
//
// Tensors, in vector order (PyTorch layouts, so a state_dict maps one to one):
//   mlp:  fc1.weight [out, in], fc1.bias [out], fc2.weight, fc2.bias, ...
//   cnn:  conv1.weight [C1, C, 3, 3], conv1.bias [C1], conv2.weight [C2, C1, 3, 3], conv2.bias [C2],
//         fc1.weight [H, C2 * HEIGHT/4 * WIDTH/4], fc1.bias [H], fc2.weight [K, H], fc2.bias [K]
// Inputs are row-major float32: mlp a vector of N features; cnn a C x HEIGHT x WIDTH image (CHW).
//
// No function here allocates or keeps a pointer to its arguments; all are thread-safe.
#ifndef EDGEFL_MODEL_H_
#define EDGEFL_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/span.h"
#include "edgefl/status.h"

namespace edgefl {

enum class ModelKind : uint8_t {
  kMlp = 1,  // dense layers with ReLU between them
  kCnn = 2,  // two conv3x3 + max-pool + ReLU blocks, then two dense layers
};

constexpr size_t kMaxMlpLayers = 8;    // dense layers of an mlp (9 numbers in the spec)
constexpr size_t kMaxTensorRank = 4;   // conv weights are [out, in, 3, 3]
constexpr size_t kMaxTensorName = 16;  // bytes of TensorInfo::name, NUL included
constexpr uint32_t kMaxModelClasses = 256;

// A parsed model spec. Build it with parse_model_spec(); the fields are public so that tools can
// display them, and every function below re-validates them.
struct ModelSpec {
  ModelKind kind = ModelKind::kCnn;
  // kMlp: widths[0] = input features, widths[1..layers] = outputs of each dense layer; the last
  // is the number of classes.
  uint32_t layers = 0;
  uint32_t widths[kMaxMlpLayers + 1] = {};
  // kCnn: input image (CHW), the two conv widths, the hidden dense width, the class count.
  uint32_t channels = 1;
  uint32_t height = 28;
  uint32_t width = 28;
  uint32_t conv1 = 16;
  uint32_t conv2 = 32;
  uint32_t hidden = 32;
  uint32_t classes = 10;
};

// One tensor of the flat parameter vector.
struct TensorInfo {
  char name[kMaxTensorName] = {};       // "conv1.weight", "fc2.bias", NUL-terminated
  uint32_t rank = 0;                    // 1 (bias), 2 (dense weight) or 4 (conv weight)
  uint32_t shape[kMaxTensorRank] = {};  // outermost first; unused entries are 0
  size_t offset = 0;                    // first float of the tensor in the flat vector
  size_t size = 0;                      // floats: the product of the shape
  bool is_weight = false;               // weight (true) or bias (false): weight decay applies to weights
};

// Parses `text` (NUL-terminated). Fails with kInvalidSpec (and leaves *spec unchanged) on any
// unknown model, key, or number out of range; kInvalidArgument on null pointers.
[[nodiscard]] Status parse_model_spec(const char* text, ModelSpec* spec);

// kOk if `spec` describes a model within the limits above, kInvalidSpec otherwise.
[[nodiscard]] Status validate_model_spec(const ModelSpec& spec);

// Writes the canonical spelling of `spec` ("mlp:784-128-10", "cnn:16-32-32") into `buf`
// (NUL-terminated, truncated to cap; buf may be null when cap is 0). Returns the length the full
// spelling needs, excluding the NUL; 0 for an invalid spec.
size_t format_model_spec(const ModelSpec& spec, char* buf, size_t cap);

// Floats in the flat parameter vector; 0 for an invalid spec.
size_t parameter_count(const ModelSpec& spec);

// Number of tensors (two per layer: weight, bias); 0 for an invalid spec.
size_t tensor_count(const ModelSpec& spec);

// Describes tensor `i` (< tensor_count(spec)). Fails: kInvalidSpec; kInvalidArgument if i is out
// of range or info is null (*info is then unchanged).
[[nodiscard]] Status tensor_info(const ModelSpec& spec, size_t i, TensorInfo* info);

// Floats in one input sample (mlp: widths[0]; cnn: channels * height * width); 0 if invalid.
size_t input_dim(const ModelSpec& spec);

// Number of classes (the width of the last layer); 0 for an invalid spec.
uint32_t class_count(const ModelSpec& spec);

// Fills `params` with fresh weights: uniform in +-sqrt(6 / fan_in) for layers followed by a ReLU
// (He et al., "Delving Deep into Rectifiers", ICCV 2015, the uniform variant), +-sqrt(3 / fan_in)
// for the output layer (gain 1), biases 0. The values come from an integer hash of (seed, tensor,
// index), so a seed gives the same floats on every platform. Precondition: params.size() ==
// parameter_count(spec) and the spec is valid; otherwise nothing is written.
void init_parameters(const ModelSpec& spec, uint64_t seed, Span<float> params);

}  // namespace edgefl

#endif  // EDGEFL_MODEL_H_
