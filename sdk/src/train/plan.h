// Internal: a ModelSpec unrolled into the layers the trainer runs, with their offsets in the flat
// parameter vector. model.cpp (tensor layout) and sgd_trainer.cpp (execution) share it, so the
// layout the header documents and the layout the trainer uses cannot drift apart.
#ifndef EDGEFL_SRC_TRAIN_PLAN_H_
#define EDGEFL_SRC_TRAIN_PLAN_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/model.h"
#include "edgefl/status.h"

namespace edgefl {
namespace train {

constexpr size_t kMaxPlanLayers = kMaxMlpLayers;  // the cnn has 4

enum class LayerKind : uint8_t {
  kDense = 1,     // y = W x + b                    W: [out_c, in_size]
  kConvPool = 2,  // y = maxpool2(conv3x3(x) + b)   W: [out_c, in_c, 3, 3], same zero padding
};

struct LayerPlan {
  LayerKind kind = LayerKind::kDense;
  bool relu = false;     // ReLU applied to the layer's output
  uint32_t in_c = 0;     // dense: input features; conv: input channels
  uint32_t in_h = 1;     // conv: input height (dense: 1)
  uint32_t in_w = 1;     // conv: input width (dense: 1)
  uint32_t out_c = 0;    // dense: output features; conv: output channels
  size_t in_size = 0;    // floats per sample in (in_c * in_h * in_w)
  size_t conv_size = 0;  // conv: floats per sample of the conv output before pooling (out_c*h*w)
  size_t out_size = 0;   // floats per sample out (after pooling for conv)
  size_t weight_offset = 0;
  size_t weight_size = 0;
  size_t bias_offset = 0;
  size_t bias_size = 0;
};

struct ModelPlan {
  LayerPlan layers[kMaxPlanLayers];
  uint32_t count = 0;
  size_t parameters = 0;
  size_t input_dim = 0;
  uint32_t classes = 0;
};

// Unrolls a valid spec. Fails with kInvalidSpec (plan unspecified) if the spec is invalid.
[[nodiscard]] Status build_plan(const ModelSpec& spec, ModelPlan* plan);

}  // namespace train
}  // namespace edgefl

#endif  // EDGEFL_SRC_TRAIN_PLAN_H_
