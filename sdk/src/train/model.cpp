// Model specs: parsing, validation, canonical formatting, tensor layout and initialisation
// (grammar and layout in edgefl/model.h). Freestanding: no strtoul/printf.
#include <string.h>

#include "core/rng.h"
#include "core/text.h"
#include "edgefl/config.h"
#include "edgefl/model.h"
#include "train/plan.h"

namespace edgefl {
namespace {

constexpr uint64_t kMaxWidth = uint64_t(1) << 24;
constexpr uint32_t kMaxImageSide = 4096;
constexpr uint32_t kMaxImageChannels = 4096;

}  // namespace

namespace train {

namespace {

bool in_range(uint64_t v, uint64_t lo, uint64_t hi) {
  return v >= lo && v <= hi;
}

// Appends a dense layer of `in` -> `out` features at parameter offset `*params`.
bool add_dense(ModelPlan* plan, uint64_t in, uint64_t out, bool relu, uint64_t* params) {
  if (plan->count >= kMaxPlanLayers) return false;
  LayerPlan& l = plan->layers[plan->count++];
  l.kind = LayerKind::kDense;
  l.relu = relu;
  l.in_c = uint32_t(in);
  l.in_h = l.in_w = 1;
  l.out_c = uint32_t(out);
  l.in_size = size_t(in);
  l.conv_size = 0;
  l.out_size = size_t(out);
  l.weight_offset = size_t(*params);
  l.weight_size = size_t(in * out);
  l.bias_offset = size_t(*params + in * out);
  l.bias_size = size_t(out);
  *params += in * out + out;
  return *params <= EDGEFL_MAX_DIMENSION;
}

bool add_conv_pool(ModelPlan* plan, uint64_t c, uint64_t h, uint64_t w, uint64_t out_c, uint64_t* params) {
  if (plan->count >= kMaxPlanLayers) return false;
  const uint64_t in_size = c * h * w, conv_size = out_c * h * w;
  if (in_size > EDGEFL_MAX_DIMENSION || conv_size > EDGEFL_MAX_DIMENSION) return false;
  LayerPlan& l = plan->layers[plan->count++];
  l.kind = LayerKind::kConvPool;
  l.relu = true;
  l.in_c = uint32_t(c);
  l.in_h = uint32_t(h);
  l.in_w = uint32_t(w);
  l.out_c = uint32_t(out_c);
  l.in_size = size_t(in_size);
  l.conv_size = size_t(conv_size);
  l.out_size = size_t(conv_size / 4);
  l.weight_offset = size_t(*params);
  l.weight_size = size_t(out_c * c * 9);
  l.bias_offset = size_t(*params + out_c * c * 9);
  l.bias_size = size_t(out_c);
  *params += out_c * c * 9 + out_c;
  return *params <= EDGEFL_MAX_DIMENSION;
}

}  // namespace

Status build_plan(const ModelSpec& spec, ModelPlan* plan) {
  *plan = ModelPlan();
  uint64_t params = 0;
  if (spec.kind == ModelKind::kMlp) {
    if (!in_range(spec.layers, 1, kMaxMlpLayers)) return Status::kInvalidSpec;
    for (uint32_t i = 0; i <= spec.layers; ++i) {
      if (!in_range(spec.widths[i], 1, kMaxWidth)) return Status::kInvalidSpec;
    }
    if (spec.widths[spec.layers] > kMaxModelClasses) return Status::kInvalidSpec;
    for (uint32_t i = 0; i < spec.layers; ++i) {
      if (!add_dense(plan, spec.widths[i], spec.widths[i + 1], i + 1 < spec.layers, &params)) {
        return Status::kInvalidSpec;
      }
    }
    plan->input_dim = spec.widths[0];
    plan->classes = spec.widths[spec.layers];
  } else if (spec.kind == ModelKind::kCnn) {
    if (!in_range(spec.channels, 1, kMaxImageChannels) || !in_range(spec.height, 4, kMaxImageSide) ||
        !in_range(spec.width, 4, kMaxImageSide) || spec.height % 4 != 0 || spec.width % 4 != 0 ||
        !in_range(spec.conv1, 1, kMaxWidth) || !in_range(spec.conv2, 1, kMaxWidth) ||
        !in_range(spec.hidden, 1, kMaxWidth) || !in_range(spec.classes, 1, kMaxModelClasses)) {
      return Status::kInvalidSpec;
    }
    const uint64_t h = spec.height, w = spec.width;
    if (!add_conv_pool(plan, spec.channels, h, w, spec.conv1, &params) ||
        !add_conv_pool(plan, spec.conv1, h / 2, w / 2, spec.conv2, &params)) {
      return Status::kInvalidSpec;
    }
    const uint64_t flat = uint64_t(spec.conv2) * (h / 4) * (w / 4);
    if (flat > EDGEFL_MAX_DIMENSION || !add_dense(plan, flat, spec.hidden, true, &params) ||
        !add_dense(plan, spec.hidden, spec.classes, false, &params)) {
      return Status::kInvalidSpec;
    }
    plan->input_dim = size_t(uint64_t(spec.channels) * h * w);
    plan->classes = spec.classes;
  } else {
    return Status::kInvalidSpec;
  }
  plan->parameters = size_t(params);
  return Status::kOk;
}

}  // namespace train

namespace {

using train::build_plan;
using train::LayerKind;
using train::LayerPlan;
using train::ModelPlan;

// Reads a decimal number in [1, 2^24] (no sign, no leading zero) and advances *p past it.
bool parse_width(const char** p, uint32_t* out) {
  const char* s = *p;
  if (*s < '1' || *s > '9') return false;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') {
    v = v * 10 + uint64_t(*s - '0');
    if (v > kMaxWidth) return false;
    ++s;
  }
  *p = s;
  *out = uint32_t(v);
  return true;
}

bool match(const char** p, const char* word) {
  const size_t len = strlen(word);
  if (strncmp(*p, word, len) != 0) return false;
  *p += len;
  return true;
}

Status parse_mlp(const char* p, ModelSpec* spec) {
  uint32_t count = 0;
  for (;;) {
    if (count > kMaxMlpLayers || !parse_width(&p, &spec->widths[count])) return Status::kInvalidSpec;
    ++count;
    if (*p == '\0') break;
    if (*p++ != '-') return Status::kInvalidSpec;
  }
  if (count < 2) return Status::kInvalidSpec;
  spec->layers = count - 1;
  return Status::kOk;
}

Status parse_cnn(const char* p, ModelSpec* spec) {
  if (*p == ':') {
    ++p;
    if (!parse_width(&p, &spec->conv1) || *p++ != '-' || !parse_width(&p, &spec->conv2) || *p++ != '-' ||
        !parse_width(&p, &spec->hidden)) {
      return Status::kInvalidSpec;
    }
  }
  bool seen_in = false, seen_classes = false;
  while (*p == ',') {
    ++p;
    if (match(&p, "in=") && !seen_in) {
      seen_in = true;
      if (!parse_width(&p, &spec->channels) || *p++ != 'x' || !parse_width(&p, &spec->height) ||
          *p++ != 'x' || !parse_width(&p, &spec->width)) {
        return Status::kInvalidSpec;
      }
    } else if (match(&p, "classes=") && !seen_classes) {
      seen_classes = true;
      if (!parse_width(&p, &spec->classes)) return Status::kInvalidSpec;
    } else {
      return Status::kInvalidSpec;
    }
  }
  return *p == '\0' ? Status::kOk : Status::kInvalidSpec;
}

}  // namespace

Status parse_model_spec(const char* text, ModelSpec* spec) {
  if (text == nullptr || spec == nullptr) return Status::kInvalidArgument;
  ModelSpec parsed;
  Status s = Status::kInvalidSpec;
  if (strncmp(text, "mlp:", 4) == 0) {
    parsed.kind = ModelKind::kMlp;
    s = parse_mlp(text + 4, &parsed);
  } else if (strncmp(text, "cnn", 3) == 0) {
    parsed.kind = ModelKind::kCnn;
    s = parse_cnn(text + 3, &parsed);
  }
  if (s != Status::kOk) return s;
  EDGEFL_RETURN_IF_ERROR(validate_model_spec(parsed));
  *spec = parsed;
  return Status::kOk;
}

Status validate_model_spec(const ModelSpec& spec) {
  ModelPlan plan;
  return build_plan(spec, &plan);
}

size_t format_model_spec(const ModelSpec& spec, char* buf, size_t cap) {
  if (validate_model_spec(spec) != Status::kOk) {
    if (buf != nullptr && cap > 0) buf[0] = '\0';
    return 0;
  }
  text::Appender a{buf, buf == nullptr ? 0 : cap};
  if (spec.kind == ModelKind::kMlp) {
    a.put("mlp:");
    for (uint32_t i = 0; i <= spec.layers; ++i) {
      if (i > 0) a.put('-');
      a.put_uint(spec.widths[i]);
    }
  } else {
    a.put("cnn:");
    a.put_uint(spec.conv1);
    a.put('-');
    a.put_uint(spec.conv2);
    a.put('-');
    a.put_uint(spec.hidden);
    if (spec.channels != 1 || spec.height != 28 || spec.width != 28) {
      a.put(",in=");
      a.put_uint(spec.channels);
      a.put('x');
      a.put_uint(spec.height);
      a.put('x');
      a.put_uint(spec.width);
    }
    if (spec.classes != 10) {
      a.put(",classes=");
      a.put_uint(spec.classes);
    }
  }
  return a.finish();
}

size_t parameter_count(const ModelSpec& spec) {
  ModelPlan plan;
  return build_plan(spec, &plan) == Status::kOk ? plan.parameters : 0;
}

size_t tensor_count(const ModelSpec& spec) {
  ModelPlan plan;
  return build_plan(spec, &plan) == Status::kOk ? size_t(plan.count) * 2 : 0;
}

size_t input_dim(const ModelSpec& spec) {
  ModelPlan plan;
  return build_plan(spec, &plan) == Status::kOk ? plan.input_dim : 0;
}

uint32_t class_count(const ModelSpec& spec) {
  ModelPlan plan;
  return build_plan(spec, &plan) == Status::kOk ? plan.classes : 0;
}

Status tensor_info(const ModelSpec& spec, size_t i, TensorInfo* info) {
  ModelPlan plan;
  EDGEFL_RETURN_IF_ERROR(build_plan(spec, &plan));
  if (info == nullptr || i >= size_t(plan.count) * 2) return Status::kInvalidArgument;
  const LayerPlan& l = plan.layers[i / 2];
  const bool weight = i % 2 == 0;
  TensorInfo t;
  // Layer names: the cnn's two conv blocks are conv1, conv2 and its dense layers fc1, fc2; the
  // dense layers of an mlp are fc1..fc8.
  uint32_t number = uint32_t(i / 2) + 1;
  const char* prefix = "fc";
  if (spec.kind == ModelKind::kCnn) {
    if (l.kind == LayerKind::kConvPool) {
      prefix = "conv";
    } else {
      number -= 2;
    }
  }
  text::Appender a{t.name, sizeof t.name};
  a.put(prefix);
  a.put_uint(number);
  a.put(weight ? ".weight" : ".bias");
  a.finish();
  t.is_weight = weight;
  if (!weight) {
    t.rank = 1;
    t.shape[0] = l.out_c;
    t.offset = l.bias_offset;
    t.size = l.bias_size;
  } else if (l.kind == LayerKind::kConvPool) {
    t.rank = 4;
    t.shape[0] = l.out_c;
    t.shape[1] = l.in_c;
    t.shape[2] = 3;
    t.shape[3] = 3;
    t.offset = l.weight_offset;
    t.size = l.weight_size;
  } else {
    t.rank = 2;
    t.shape[0] = l.out_c;
    t.shape[1] = uint32_t(l.in_size);
    t.offset = l.weight_offset;
    t.size = l.weight_size;
  }
  *info = t;
  return Status::kOk;
}

void init_parameters(const ModelSpec& spec, uint64_t seed, Span<float> params) {
  ModelPlan plan;
  if (build_plan(spec, &plan) != Status::kOk || params.data() == nullptr ||
      params.size() != plan.parameters) {
    return;
  }
  constexpr uint32_t kPurposeInit = 0x696E6974u;  // "init": independent of the codecs' streams
  for (uint32_t li = 0; li < plan.count; ++li) {
    const LayerPlan& l = plan.layers[li];
    const size_t fan_in = l.kind == LayerKind::kConvPool ? size_t(l.in_c) * 9 : l.in_size;
    // He et al., ICCV 2015: Var[w] = 2 / fan_in before a ReLU; a uniform on +-b has variance
    // b^2 / 3, so b = sqrt(6 / fan_in). The output layer uses gain 1: b = sqrt(3 / fan_in).
    const float bound = __builtin_sqrtf((l.relu ? 6.0f : 3.0f) / float(fan_in));
    const uint32_t key = derive_key(seed, kPurposeInit + li);
    float* w = params.data() + l.weight_offset;
    for (size_t i = 0; i < l.weight_size; ++i) {
      w[i] = (2.0f * unit_float(hash32(key, uint32_t(i))) - 1.0f) * bound;
    }
    float* b = params.data() + l.bias_offset;
    for (size_t i = 0; i < l.bias_size; ++i) b[i] = 0.0f;
  }
}

}  // namespace edgefl
