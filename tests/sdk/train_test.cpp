// tests/sdk/train_test.cpp: edgefl::train — model specs, tensor layout, initialisation, the
// kernels' gradients against double-precision finite differences, the SGD rule, determinism,
// workspace bounds, no allocation during training, and that training actually learns.
//
// White-box parts include the internal kernels (sdk/src/train/layers.h, permutation.h).
#include <doctest/doctest.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <new>
#include <vector>

#include "core/half.h"
#include "core/rng.h"
#include "edgefl/model.h"
#include "edgefl/trainer.h"
#include "train/layers.h"
#include "train/permutation.h"

// --- Counting global allocator: fit() and friends must not allocate. -------------------------
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// Not inlined: GCC 12 would otherwise see operator new's result reach free() through the inlined
// body and report a false -Wmismatched-new-delete (both replacements use malloc and free).
[[gnu::noinline]] void operator delete(void* p) noexcept {
  free(p);
}
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept {
  free(p);
}

namespace {

using edgefl::DataView;
using edgefl::FitResult;
using edgefl::ModelSpec;
using edgefl::SgdTrainer;
using edgefl::Span;
using edgefl::Status;
using edgefl::TensorInfo;
using edgefl::TrainConfig;

// --- Helpers ----------------------------------------------------------------------------------

struct Rng {
  edgefl::SplitMix64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double uniform() { return double(g.next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double symmetric() { return 2.0 * uniform() - 1.0; }                              // [-1, 1)
  double normal() {  // Irwin-Hall approximation: plenty for test data
    double s = 0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6.0;
  }
  uint32_t below(uint32_t n) { return g.below(n); }
};

ModelSpec parse(const char* text) {
  ModelSpec spec;
  REQUIRE(edgefl::parse_model_spec(text, &spec) == Status::kOk);
  return spec;
}

std::vector<float> init_params(const ModelSpec& spec, uint64_t seed) {
  std::vector<float> p(edgefl::parameter_count(spec));
  edgefl::init_parameters(spec, seed, {p.data(), p.size()});
  return p;
}

// A labelled data set owned by the test.
struct Dataset {
  std::vector<float> inputs;
  std::vector<uint8_t> labels;
  size_t dim = 0;
  DataView view(const uint32_t* indices = nullptr, size_t index_count = 0) const {
    DataView v;
    v.inputs = inputs.data();
    v.labels = labels.data();
    v.count = labels.size();
    v.input_dim = dim;
    v.indices = indices;
    v.index_count = index_count;
    return v;
  }
};

Dataset random_dataset(size_t count, size_t dim, uint32_t classes, uint64_t seed) {
  Rng rng(seed);
  Dataset d;
  d.dim = dim;
  d.inputs.resize(count * dim);
  d.labels.resize(count);
  for (float& x : d.inputs) x = float(rng.uniform());
  for (uint8_t& y : d.labels) y = uint8_t(rng.below(classes));
  return d;
}

// Linearly separable: label = argmax_k (M x)_k for a random M.
Dataset separable_dataset(size_t count, size_t dim, uint32_t classes, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> m(classes * dim);
  for (double& v : m) v = rng.normal();
  Dataset d;
  d.dim = dim;
  d.inputs.resize(count * dim);
  d.labels.resize(count);
  for (size_t i = 0; i < count; ++i) {
    float* x = &d.inputs[i * dim];
    for (size_t j = 0; j < dim; ++j) x[j] = float(rng.normal());
    size_t best = 0;
    double best_score = -1e300;
    for (size_t k = 0; k < classes; ++k) {
      double s = 0;
      for (size_t j = 0; j < dim; ++j) s += m[k * dim + j] * x[j];
      if (s > best_score) best_score = s, best = k;
    }
    d.labels[i] = uint8_t(best);
  }
  return d;
}

struct TrainerBox {
  std::vector<uint8_t> workspace;
  SgdTrainer trainer;
  TrainerBox(const ModelSpec& spec, const TrainConfig& cfg) {
    workspace.resize(SgdTrainer::workspace_bytes(spec, cfg));
    REQUIRE(!workspace.empty());
    REQUIRE(trainer.init(spec, cfg, {workspace.data(), workspace.size()}) == Status::kOk);
  }
};

// --- Double-precision references ----------------------------------------------------------------

void ref_dense(const double* x, size_t batch, size_t in, size_t out, const double* w, const double* b,
               double* y) {
  for (size_t s = 0; s < batch; ++s) {
    for (size_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (size_t i = 0; i < in; ++i) acc += w[o * in + i] * x[s * in + i];
      y[s * out + o] = acc;
    }
  }
}

// One sample: x [ci][h][w] -> y [co][h][w], 3x3, zero padding 1.
void ref_conv(const double* x, size_t ci, size_t h, size_t w, size_t co, const double* wt, const double* b,
              double* y) {
  for (size_t o = 0; o < co; ++o) {
    for (size_t r = 0; r < h; ++r) {
      for (size_t c = 0; c < w; ++c) {
        double acc = b[o];
        for (size_t i = 0; i < ci; ++i) {
          for (size_t ky = 0; ky < 3; ++ky) {
            for (size_t kx = 0; kx < 3; ++kx) {
              const long sr = long(r) + long(ky) - 1, sc = long(c) + long(kx) - 1;
              if (sr < 0 || sc < 0 || sr >= long(h) || sc >= long(w)) continue;
              acc += wt[((o * ci + i) * 3 + ky) * 3 + kx] * x[(i * h + size_t(sr)) * w + size_t(sc)];
            }
          }
        }
        y[(o * h + r) * w + c] = acc;
      }
    }
  }
}

void ref_pool(const double* x, size_t c, size_t h, size_t w, double* y) {
  for (size_t i = 0; i < c; ++i) {
    for (size_t r = 0; r < h / 2; ++r) {
      for (size_t s = 0; s < w / 2; ++s) {
        const double* p = x + (i * h + 2 * r) * w + 2 * s;
        double m = p[0];
        if (p[1] > m) m = p[1];
        if (p[w] > m) m = p[w];
        if (p[w + 1] > m) m = p[w + 1];
        y[(i * (h / 2) + r) * (w / 2) + s] = m;
      }
    }
  }
}

void ref_relu(double* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? x[i] : 0;
}

// Sum over rows of -log softmax(z)[label].
double ref_xent(const double* z, const uint8_t* labels, size_t batch, size_t classes) {
  double total = 0;
  for (size_t s = 0; s < batch; ++s) {
    const double* row = z + s * classes;
    double m = row[0];
    for (size_t k = 1; k < classes; ++k) m = row[k] > m ? row[k] : m;
    double sum = 0;
    for (size_t k = 0; k < classes; ++k) sum += exp(row[k] - m);
    total += log(sum) + m - row[labels[s]];
  }
  return total;
}

// The offset of tensor `i` of `spec`.
size_t offset_of(const ModelSpec& spec, size_t i) {
  TensorInfo t;
  REQUIRE(edgefl::tensor_info(spec, i, &t) == Status::kOk);
  return t.offset;
}

// Mean loss of the whole model in double, written from the spec and tensor_info() alone.
double ref_model_loss(const ModelSpec& spec, const std::vector<double>& p, const Dataset& d, size_t n) {
  double total = 0;
  for (size_t s = 0; s < n; ++s) {
    std::vector<double> a(d.inputs.begin() + long(s * d.dim), d.inputs.begin() + long((s + 1) * d.dim));
    size_t tensor = 0;
    if (spec.kind == edgefl::ModelKind::kCnn) {
      size_t c = spec.channels, h = spec.height, w = spec.width;
      for (uint32_t co : {spec.conv1, spec.conv2}) {
        std::vector<double> conv(co * h * w), pooled(co * h * w / 4);
        ref_conv(a.data(), c, h, w, co, &p[offset_of(spec, tensor)], &p[offset_of(spec, tensor + 1)],
                 conv.data());
        ref_pool(conv.data(), co, h, w, pooled.data());
        ref_relu(pooled.data(), pooled.size());
        a = pooled;
        c = co, h /= 2, w /= 2;
        tensor += 2;
      }
      const uint32_t widths[] = {spec.hidden, spec.classes};
      for (int l = 0; l < 2; ++l) {
        std::vector<double> y(widths[l]);
        ref_dense(a.data(), 1, a.size(), y.size(), &p[offset_of(spec, tensor)],
                  &p[offset_of(spec, tensor + 1)], y.data());
        if (l == 0) ref_relu(y.data(), y.size());
        a = y;
        tensor += 2;
      }
    } else {
      for (uint32_t l = 0; l < spec.layers; ++l) {
        std::vector<double> y(spec.widths[l + 1]);
        ref_dense(a.data(), 1, a.size(), y.size(), &p[offset_of(spec, tensor)],
                  &p[offset_of(spec, tensor + 1)], y.data());
        if (l + 1 < spec.layers) ref_relu(y.data(), y.size());
        a = y;
        tensor += 2;
      }
    }
    total += ref_xent(a.data(), &d.labels[s], 1, a.size());
  }
  return total / double(n);
}

// Compares an analytic (float) gradient with central differences of a double function.
struct GradCheck {
  size_t checked = 0;
  size_t passed = 0;
  double worst = 0;  // largest relative error among coordinates with |gradient| > 1e-3
  double pass_rate() const { return checked ? double(passed) / double(checked) : 0.0; }
};

constexpr double kRelTol = 1e-2;  // relative error allowed per coordinate
constexpr double kAbsTol = 1e-5;  // below this absolute error a coordinate passes (float noise)

template <typename F>
GradCheck check_gradient(F f, std::vector<double>& theta, const std::vector<float>& analytic,
                         const std::vector<size_t>& coords, double h) {
  GradCheck r;
  for (size_t i : coords) {
    const double saved = theta[i];
    theta[i] = saved + h;
    const double up = f(theta);
    theta[i] = saved - h;
    const double down = f(theta);
    theta[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double a = analytic[i];
    const double err = fabs(a - numeric);
    const double scale = fabs(a) > fabs(numeric) ? fabs(a) : fabs(numeric);
    const double rel = scale > 0 ? err / scale : 0.0;
    ++r.checked;
    if (err <= kRelTol * scale + kAbsTol) ++r.passed;
    if (scale > 1e-3 && rel > r.worst) r.worst = rel;
  }
  return r;
}

std::vector<size_t> all_coords(size_t n) {
  std::vector<size_t> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = i;
  return c;
}

// a ++ b ++ c, element by element (vector::insert trips GCC 12's -Warray-bounds here).
template <typename T>
std::vector<T> concat(const std::vector<T>& a, const std::vector<T>& b, const std::vector<T>& c) {
  std::vector<T> out(a.size() + b.size() + c.size());
  size_t at = 0;
  for (const std::vector<T>* part : {&a, &b, &c}) {
    for (const T& v : *part) out[at++] = v;
  }
  return out;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

std::vector<float> random_floats(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.symmetric() * scale);
  return v;
}

}  // namespace

// =================================================================================================
TEST_SUITE("train") {
  TEST_CASE("model specs parse and print back canonically") {
    struct Case {
      const char* text;
      const char* canonical;
    };
    const Case cases[] = {
        {"mlp:784-128-10", "mlp:784-128-10"},
        {"mlp:784-10", "mlp:784-10"},
        {"mlp:1-1", "mlp:1-1"},
        {"mlp:9-8-7-6-5-4-3-2-1", "mlp:9-8-7-6-5-4-3-2-1"},
        {"cnn", "cnn:16-32-32"},
        {"cnn:16-32-32", "cnn:16-32-32"},
        {"cnn:8-16-64", "cnn:8-16-64"},
        {"cnn,classes=2", "cnn:16-32-32,classes=2"},
        {"cnn:8-16-64,in=3x32x32,classes=100", "cnn:8-16-64,in=3x32x32,classes=100"},
        {"cnn,classes=100,in=3x32x32", "cnn:16-32-32,in=3x32x32,classes=100"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.text);
      ModelSpec spec;
      REQUIRE(edgefl::parse_model_spec(c.text, &spec) == Status::kOk);
      char buf[96];
      const size_t len = edgefl::format_model_spec(spec, buf, sizeof buf);
      CHECK(len == strlen(c.canonical));
      CHECK(strcmp(buf, c.canonical) == 0);
      ModelSpec again;
      REQUIRE(edgefl::parse_model_spec(buf, &again) == Status::kOk);
      CHECK(edgefl::parameter_count(again) == edgefl::parameter_count(spec));
    }
    const ModelSpec mlp = parse("mlp:784-128-10");
    CHECK(mlp.kind == edgefl::ModelKind::kMlp);
    CHECK(mlp.layers == 2);
    CHECK(edgefl::input_dim(mlp) == 784);
    CHECK(edgefl::class_count(mlp) == 10);
    const ModelSpec cnn = parse("cnn");
    CHECK(cnn.kind == edgefl::ModelKind::kCnn);
    CHECK(edgefl::input_dim(cnn) == 784);
    CHECK(edgefl::class_count(cnn) == 10);
  }

  TEST_CASE("format_model_spec truncates, reports the full length, and accepts a null buffer") {
    const ModelSpec spec = parse("mlp:784-128-10");
    char small[6];
    CHECK(edgefl::format_model_spec(spec, small, sizeof small) == 14);
    CHECK(strcmp(small, "mlp:7") == 0);
    CHECK(edgefl::format_model_spec(spec, nullptr, 0) == 14);
  }

  TEST_CASE("malformed model specs are rejected and leave the spec unchanged") {
    const char* bad[] = {"",
                         "mlp",
                         "mlp:",
                         "mlp:784",
                         "mlp:784-",
                         "mlp:-784-10",
                         "mlp:784--10",
                         "mlp:0-10",
                         "mlp:784-0",
                         "mlp:0784-10",
                         "mlp:784-128-10x",
                         "mlp:784-128-10 ",
                         "mlp:784-+10",
                         "mlp:10-257",                      // labels are uint8
                         "mlp:16777217-10",                 // width > 2^24
                         "mlp:99999999999999999999999-10",  // overflow
                         "mlp:1-2-3-4-5-6-7-8-9-10",        // 9 layers
                         "mlp:65536-65536-65536-10",        // over EDGEFL_MAX_DIMENSION parameters
                         "MLP:784-10",
                         "cnn:",
                         "cnn:16-32",
                         "cnn:16-32-32-10",
                         "cnn:16--32",
                         "cnn:0-32-32",
                         "cnn,",
                         "cnn,in=1x28",
                         "cnn,in=1x30x28",  // sides must be multiples of 4
                         "cnn,in=1x28x2",
                         "cnn,in=0x28x28",
                         "cnn,classes=0",
                         "cnn,classes=257",
                         "cnn,classes=10,classes=10",
                         "cnn,in=1x28x28,in=1x28x28",
                         "cnn,depth=3",
                         "cnnx",
                         "cnn ",
                         "resnet18"};
    for (const char* text : bad) {
      CAPTURE(text);
      ModelSpec spec = parse("mlp:3-2");
      CHECK(edgefl::parse_model_spec(text, &spec) == Status::kInvalidSpec);
      CHECK(spec.kind == edgefl::ModelKind::kMlp);
      CHECK(spec.widths[0] == 3);
    }
    ModelSpec spec;
    CHECK(edgefl::parse_model_spec(nullptr, &spec) == Status::kInvalidArgument);
    CHECK(edgefl::parse_model_spec("cnn", nullptr) == Status::kInvalidArgument);
  }

  TEST_CASE("invalid specs built by hand report zero sizes and fail tensor_info") {
    ModelSpec spec = parse("mlp:4-3");
    spec.widths[1] = 0;
    CHECK(edgefl::validate_model_spec(spec) == Status::kInvalidSpec);
    CHECK(edgefl::parameter_count(spec) == 0);
    CHECK(edgefl::tensor_count(spec) == 0);
    CHECK(edgefl::input_dim(spec) == 0);
    TensorInfo t;
    CHECK(edgefl::tensor_info(spec, 0, &t) == Status::kInvalidSpec);
    char buf[8] = "x";
    CHECK(edgefl::format_model_spec(spec, buf, sizeof buf) == 0);
    CHECK(buf[0] == '\0');
    CHECK(SgdTrainer::workspace_bytes(spec, TrainConfig()) == 0);
  }

  TEST_CASE("parameter counts match the architectures, and the default cnn is under 100k") {
    CHECK(edgefl::parameter_count(parse("mlp:784-128-10")) == 101770);
    CHECK(edgefl::parameter_count(parse("mlp:784-10")) == 7850);
    // conv1 16*9+16, conv2 32*16*9+32, fc1 1568*32+32, fc2 32*10+10
    CHECK(edgefl::parameter_count(parse("cnn")) == 160 + 4640 + 50208 + 330);
    CHECK(edgefl::parameter_count(parse("cnn")) < 100000);
    CHECK(edgefl::parameter_count(parse("cnn:8-16-64,in=3x32x32,classes=100")) ==
          (8 * 27 + 8) + (16 * 72 + 16) + (16 * 64 * 64 + 64) + (64 * 100 + 100));
    CHECK(edgefl::tensor_count(parse("mlp:784-128-10")) == 4);
    CHECK(edgefl::tensor_count(parse("cnn")) == 8);
  }

  TEST_CASE("tensors are named, shaped, and tile the flat vector exactly") {
    for (const char* text : {"mlp:784-128-10", "mlp:5-4-3-2", "cnn", "cnn:3-5-7,in=2x8x12,classes=4"}) {
      CAPTURE(text);
      const ModelSpec spec = parse(text);
      size_t next = 0;
      for (size_t i = 0; i < edgefl::tensor_count(spec); ++i) {
        TensorInfo t;
        REQUIRE(edgefl::tensor_info(spec, i, &t) == Status::kOk);
        CHECK(t.offset == next);
        size_t product = 1;
        for (uint32_t r = 0; r < t.rank; ++r) product *= t.shape[r];
        for (uint32_t r = t.rank; r < edgefl::kMaxTensorRank; ++r) CHECK(t.shape[r] == 0);
        CHECK(t.size == product);
        CHECK(t.is_weight == (i % 2 == 0));
        CHECK(strlen(t.name) > 0);
        next += t.size;
      }
      CHECK(next == edgefl::parameter_count(spec));
      TensorInfo t;
      CHECK(edgefl::tensor_info(spec, edgefl::tensor_count(spec), &t) == Status::kInvalidArgument);
      CHECK(edgefl::tensor_info(spec, 0, nullptr) == Status::kInvalidArgument);
    }
    const ModelSpec cnn = parse("cnn");
    struct Expected {
      const char* name;
      uint32_t rank;
      uint32_t shape[4];
    };
    const Expected expected[] = {{"conv1.weight", 4, {16, 1, 3, 3}},  {"conv1.bias", 1, {16}},
                                 {"conv2.weight", 4, {32, 16, 3, 3}}, {"conv2.bias", 1, {32}},
                                 {"fc1.weight", 2, {32, 1568}},       {"fc1.bias", 1, {32}},
                                 {"fc2.weight", 2, {10, 32}},         {"fc2.bias", 1, {10}}};
    for (size_t i = 0; i < 8; ++i) {
      TensorInfo t;
      REQUIRE(edgefl::tensor_info(cnn, i, &t) == Status::kOk);
      CHECK(strcmp(t.name, expected[i].name) == 0);
      CHECK(t.rank == expected[i].rank);
      for (uint32_t r = 0; r < t.rank; ++r) CHECK(t.shape[r] == expected[i].shape[r]);
    }
    TensorInfo t;
    REQUIRE(edgefl::tensor_info(parse("mlp:784-128-10"), 2, &t) == Status::kOk);
    CHECK(strcmp(t.name, "fc2.weight") == 0);
    CHECK(t.offset == 784 * 128 + 128);
  }

  TEST_CASE("init_parameters is deterministic, seed-dependent, He-scaled, with zero biases") {
    const ModelSpec spec = parse("cnn");
    const std::vector<float> a = init_params(spec, 7), b = init_params(spec, 7), c = init_params(spec, 8);
    CHECK(memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    CHECK(memcmp(a.data(), c.data(), a.size() * sizeof(float)) != 0);
    for (size_t i = 0; i < edgefl::tensor_count(spec); ++i) {
      TensorInfo t;
      REQUIRE(edgefl::tensor_info(spec, i, &t) == Status::kOk);
      CAPTURE(t.name);
      if (!t.is_weight) {
        for (size_t j = 0; j < t.size; ++j) CHECK(a[t.offset + j] == 0.0f);
        continue;
      }
      const double fan_in = double(t.size / t.shape[0]);
      const double bound = sqrt((i + 2 == edgefl::tensor_count(spec) ? 3.0 : 6.0) / fan_in);
      double sum = 0, sq = 0, max_abs = 0;
      for (size_t j = 0; j < t.size; ++j) {
        const double v = a[t.offset + j];
        sum += v, sq += v * v;
        if (fabs(v) > max_abs) max_abs = fabs(v);
      }
      CHECK(max_abs <= bound);
      CHECK(max_abs > 0.9 * bound);
      const double var = sq / double(t.size);
      CHECK(var == doctest::Approx(bound * bound / 3).epsilon(t.size > 1000 ? 0.05 : 0.3));
      CHECK(fabs(sum / double(t.size)) < 0.1 * bound);
    }
    // Pinned: the same floats on every platform (integer hash, one rounding per operation).
    uint32_t bits;
    memcpy(&bits, &a[0], 4);
    uint64_t h = 1469598103934665603ull;  // FNV-1a over all bytes
    for (float v : a) {
      uint32_t u;
      memcpy(&u, &v, 4);
      for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 1099511628211ull;
    }
    char text[64];
    snprintf(text, sizeof text, "0x%08x 0x%016llx", unsigned(bits), static_cast<unsigned long long>(h));
    MESSAGE("init(cnn, 7): first bits, FNV-1a: " << text);
    CHECK(bits == 0x3f4bbfb3u);
    CHECK(h == 0x6b5ba32e62a93307ull);
  }

  TEST_CASE("init_parameters writes nothing when the span is mis-sized") {
    const ModelSpec spec = parse("mlp:4-3");
    std::vector<float> p(edgefl::parameter_count(spec) + 1, 42.0f);
    edgefl::init_parameters(spec, 1, {p.data(), p.size()});
    for (float v : p) CHECK(v == 42.0f);
  }

  // --- Kernels ------------------------------------------------------------------------------------

  TEST_CASE("exp_f32 and log_f32 are within a few ulp of libm") {
    double worst_exp = 0, worst_log = 0;
    for (int i = 0; i <= 200000; ++i) {
      const float x = -87.0f + 87.0f * float(i) / 200000.0f;
      const double ref = exp(double(x));
      const double rel = fabs(double(edgefl::train::exp_f32(x)) - ref) / ref;
      if (rel > worst_exp) worst_exp = rel;
    }
    for (int i = 1; i <= 200000; ++i) {
      const float x = float(i) * 0.01f;
      const double ref = log(double(x));
      const double err = fabs(double(edgefl::train::log_f32(x)) - ref);
      const double rel = err / (fabs(ref) > 1e-3 ? fabs(ref) : 1e-3);
      if (rel > worst_log) worst_log = rel;
    }
    MESSAGE("exp_f32 worst rel " << worst_exp << ", log_f32 worst rel " << worst_log);
    CHECK(worst_exp < 5e-7);
    CHECK(worst_log < 5e-7);
    CHECK(edgefl::train::exp_f32(0.0f) == 1.0f);
    CHECK(edgefl::train::exp_f32(-100.0f) == 0.0f);
    CHECK(edgefl::train::log_f32(1.0f) == 0.0f);
  }

  TEST_CASE("the Feistel shuffle is a permutation of every size and depends on the key") {
    for (uint32_t n : {1u, 2u, 3u, 5u, 17u, 100u, 1000u, 4096u, 4097u, 60000u}) {
      CAPTURE(n);
      const edgefl::train::FeistelPermutation perm(n, 12345);
      std::vector<uint8_t> seen(n, 0);
      bool ok = true;
      size_t fixed = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t j = perm(i);
        ok = ok && j < n && !seen[j];
        if (j < n) seen[j] = 1;
        fixed += j == i;
      }
      CHECK(ok);
      if (n >= 100) CHECK(fixed < n / 20);  // looks shuffled
    }
    const edgefl::train::FeistelPermutation a(1000, 1), b(1000, 2);
    size_t same = 0;
    for (uint32_t i = 0; i < 1000; ++i) same += a(i) == b(i);
    CHECK(same < 20);
  }

  TEST_CASE("dot is exact on small integers and handles every tail length") {
    for (size_t n = 0; n < 40; ++n) {
      std::vector<float> a(n), b(n);
      double ref = 0;
      for (size_t i = 0; i < n; ++i)
        a[i] = float(i % 7) - 3, b[i] = float(i % 5) - 2, ref += double(a[i]) * b[i];
      CHECK(edgefl::train::dot(a.data(), b.data(), n) == float(ref));
    }
  }

  TEST_CASE("dot sums in eight lanes in a fixed order: the same bits on every target and build") {
    uint64_t state = 17;
    for (size_t n : {size_t{8}, size_t{9}, size_t{63}, size_t{784}, size_t{1001}}) {
      std::vector<float> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = float(int64_t(edgefl::splitmix64_next(&state) % 2001) - 1000) * 1.37e-3f;
        b[i] = float(int64_t(edgefl::splitmix64_next(&state) % 2001) - 1000) * 0.71e-3f;
      }
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        for (size_t l = 0; l < 8; ++l) {
          const volatile float product = a[i + l] * b[i + l];  // rounded before the sum: no FMA
          lane[l] += product;
        }
      }
      float tail = 0.0f;
      for (; i < n; ++i) {
        const volatile float product = a[i] * b[i];
        tail += product;
      }
      const float want =
          (((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]))) + tail;
      CAPTURE(n);
      CHECK(edgefl::float_bits(edgefl::train::dot(a.data(), b.data(), n)) == edgefl::float_bits(want));
    }
  }

  TEST_CASE("the dense forward gives bias + dot() bit for bit: outputs in fours and the rest, every tail") {
    // dense_forward computes four outputs per pass over a row; each must be dot()'s own sum, so
    // that training gives the same bits whatever the layer's width.
    uint64_t state = 5;
    for (size_t in : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{784}}) {
      for (size_t out : {size_t{1}, size_t{3}, size_t{4}, size_t{6}, size_t{10}, size_t{32}}) {
        const size_t batch = 3;
        std::vector<float> x(batch * in), w(out * in), b(out), y(batch * out);
        for (float& v : x) v = float(int64_t(edgefl::splitmix64_next(&state) % 2001) - 1000) * 1.37e-3f;
        for (float& v : w) v = float(int64_t(edgefl::splitmix64_next(&state) % 2001) - 1000) * 0.71e-3f;
        for (float& v : b) v = float(int64_t(edgefl::splitmix64_next(&state) % 2001) - 1000) * 0.3e-3f;
        edgefl::train::dense_forward(x.data(), batch, in, out, w.data(), b.data(), y.data());
        size_t differ = 0;
        for (size_t r = 0; r < batch; ++r) {
          for (size_t o = 0; o < out; ++o) {
            const float want = b[o] + edgefl::train::dot(x.data() + r * in, w.data() + o * in, in);
            differ += edgefl::float_bits(y[r * out + o]) != edgefl::float_bits(want);
          }
        }
        CAPTURE(in);
        CAPTURE(out);
        CHECK(differ == 0);
      }
    }
  }

  TEST_CASE("dense layer: forward matches double, gradients match finite differences") {
    const size_t batch = 3, in = 13, out = 6;
    const std::vector<float> x = random_floats(batch * in, 1), w = random_floats(out * in, 2),
                             b = random_floats(out, 3), r = random_floats(batch * out, 4);
    std::vector<float> y(batch * out);
    edgefl::train::dense_forward(x.data(), batch, in, out, w.data(), b.data(), y.data());
    std::vector<double> yd(batch * out);
    const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b);
    ref_dense(xd.data(), batch, in, out, wd.data(), bd.data(), yd.data());
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == doctest::Approx(yd[i]).epsilon(1e-5));

    // L = sum r . y over theta = [x, w, b].
    std::vector<float> dx(batch * in), dw(out * in, 0.0f), db(out, 0.0f);
    edgefl::train::dense_backward(x.data(), r.data(), batch, in, out, w.data(), dw.data(), db.data(),
                                  dx.data());
    const std::vector<float> analytic = concat(dx, dw, db);
    std::vector<double> theta = concat(xd, wd, bd);
    auto f = [&](const std::vector<double>& t) {
      std::vector<double> yy(batch * out);
      ref_dense(&t[0], batch, in, out, &t[batch * in], &t[batch * in + out * in], yy.data());
      double s = 0;
      for (size_t i = 0; i < yy.size(); ++i) s += r[i] * yy[i];
      return s;
    };
    const GradCheck g = check_gradient(f, theta, analytic, all_coords(theta.size()), 1e-4);
    CHECK(g.pass_rate() == 1.0);
    CHECK(g.worst < 1e-4);

    // Weight and bias gradients accumulate; a null dx is allowed.
    std::vector<float> dw2 = dw, db2 = db;
    edgefl::train::dense_backward(x.data(), r.data(), batch, in, out, w.data(), dw2.data(), db2.data(),
                                  nullptr);
    for (size_t i = 0; i < dw.size(); ++i) CHECK(dw2[i] == doctest::Approx(2 * dw[i]));
    for (size_t i = 0; i < db.size(); ++i) CHECK(db2[i] == doctest::Approx(2 * db[i]));
  }

  TEST_CASE("im2col and col2im are adjoint") {
    const size_t c = 3, h = 5, w = 7, n = edgefl::train::im2col3x3_floats(c, h, w);
    const std::vector<float> x = random_floats(c * h * w, 5), col_r = random_floats(n, 6);
    std::vector<float> col(n), back(c * h * w, 0.0f);
    edgefl::train::im2col3x3(x.data(), c, h, w, col.data());
    edgefl::train::col2im3x3_add(col_r.data(), c, h, w, back.data());
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < n; ++i) lhs += double(col[i]) * col_r[i];
    for (size_t i = 0; i < x.size(); ++i) rhs += double(x[i]) * back[i];
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-5));
  }

  TEST_CASE("conv3x3 layer: forward matches double, gradients match finite differences") {
    // 5 output channels: one block of 4 and the remainder path; 11 = 2*9 - 7 im2col rows per... any.
    const size_t ci = 2, h = 6, w = 5, co = 5;
    const size_t kx = ci * h * w, kw = co * ci * 9;
    const std::vector<float> x = random_floats(kx, 11), wt = random_floats(kw, 12, 0.5),
                             b = random_floats(co, 13), r = random_floats(co * h * w, 14);
    const size_t cols = edgefl::train::im2col3x3_floats(ci, h, w);
    std::vector<float> col(cols), dcol(cols), y(co * h * w);
    edgefl::train::conv3x3_forward(x.data(), ci, h, w, co, wt.data(), b.data(), col.data(), y.data());
    std::vector<double> yd(co * h * w);
    const std::vector<double> xd = to_double(x), wd = to_double(wt), bd = to_double(b);
    ref_conv(xd.data(), ci, h, w, co, wd.data(), bd.data(), yd.data());
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == doctest::Approx(yd[i]).epsilon(1e-5));

    std::vector<float> dx(kx), dw(kw, 0.0f), db(co, 0.0f);
    edgefl::train::conv3x3_backward(x.data(), r.data(), ci, h, w, co, wt.data(), col.data(), dcol.data(),
                                    dw.data(), db.data(), dx.data());
    const std::vector<float> analytic = concat(dx, dw, db);
    std::vector<double> theta = concat(xd, wd, bd);
    auto f = [&](const std::vector<double>& t) {
      std::vector<double> yy(co * h * w);
      ref_conv(&t[0], ci, h, w, co, &t[kx], &t[kx + kw], yy.data());
      double s = 0;
      for (size_t i = 0; i < yy.size(); ++i) s += r[i] * yy[i];
      return s;
    };
    const GradCheck g = check_gradient(f, theta, analytic, all_coords(theta.size()), 1e-4);
    CHECK(g.pass_rate() == 1.0);
    CHECK(g.worst < 1e-4);
  }

  TEST_CASE("im2row is the transpose of im2col, and row2im its adjoint") {
    const size_t c = 2, h = 5, w = 6, n = h * w, k = c * 9;
    const std::vector<float> x = random_floats(c * h * w, 15), r = random_floats(n * k, 16);
    std::vector<float> col(n * k), rows(n * k), back(c * h * w, 0.0f), back_ref(c * h * w, 0.0f), r_t(n * k);
    edgefl::train::im2col3x3(x.data(), c, h, w, col.data());
    edgefl::train::im2row3x3(x.data(), c, h, w, rows.data());
    bool transposed = true;
    for (size_t p = 0; p < n; ++p) {
      for (size_t q = 0; q < k; ++q) {
        transposed = transposed && rows[p * k + q] == col[q * n + p];
        r_t[q * n + p] = r[p * k + q];
      }
    }
    CHECK(transposed);
    edgefl::train::row2im3x3_add(r.data(), c, h, w, back.data());
    edgefl::train::col2im3x3_add(r_t.data(), c, h, w, back_ref.data());
    for (size_t i = 0; i < back.size(); ++i) CHECK(back[i] == doctest::Approx(back_ref[i]).epsilon(1e-6));
  }

  TEST_CASE("the fused conv + max-pool backward equals max-pool backward then conv backward") {
    for (size_t co : {1u, 5u, 8u}) {
      CAPTURE(co);
      const size_t ci = 3, h = 6, w = 8, n = h * w, k = ci * 9;
      const std::vector<float> x = random_floats(ci * n, 50 + co), wt = random_floats(co * k, 51, 0.5),
                               b = random_floats(co, 52);
      std::vector<float> col(n * k), dcol(n * k), conv(co * n), pooled(co * n / 4);
      std::vector<uint8_t> arg(co * n / 4);
      edgefl::train::conv3x3_forward(x.data(), ci, h, w, co, wt.data(), b.data(), col.data(), conv.data());
      edgefl::train::maxpool2_forward(conv.data(), co, h, w, pooled.data(), arg.data());
      std::vector<float> dpool = random_floats(pooled.size(), 53);
      edgefl::train::relu_forward(pooled.data(), pooled.size());
      edgefl::train::relu_backward(pooled.data(), dpool.data(), dpool.size());  // zeros, as in training
      std::vector<float> dconv(co * n), dx_ref(ci * n), dw_ref(co * k, 0.5f), db_ref(co, 0.5f);
      edgefl::train::maxpool2_backward(dpool.data(), arg.data(), co, h, w, dconv.data());
      edgefl::train::conv3x3_backward(x.data(), dconv.data(), ci, h, w, co, wt.data(), col.data(),
                                      dcol.data(), dw_ref.data(), db_ref.data(), dx_ref.data());
      std::vector<float> dx(ci * n), dw(co * k, 0.5f), db(co, 0.5f), dw2(co * k, 0.5f), db2(co, 0.5f);
      edgefl::train::conv3x3_pool_backward(x.data(), dpool.data(), arg.data(), ci, h, w, co, wt.data(),
                                           col.data(), dcol.data(), dw.data(), db.data(), dx.data());
      for (size_t i = 0; i < dx.size(); ++i) CHECK(dx[i] == doctest::Approx(dx_ref[i]).epsilon(1e-5));
      for (size_t i = 0; i < dw.size(); ++i) CHECK(dw[i] == doctest::Approx(dw_ref[i]).epsilon(1e-5));
      for (size_t i = 0; i < db.size(); ++i) CHECK(db[i] == doctest::Approx(db_ref[i]).epsilon(1e-5));
      edgefl::train::conv3x3_pool_backward(x.data(), dpool.data(), arg.data(), ci, h, w, co, wt.data(),
                                           col.data(), nullptr, dw2.data(), db2.data(), nullptr);
      CHECK(memcmp(dw.data(), dw2.data(), dw.size() * sizeof(float)) == 0);
      CHECK(memcmp(db.data(), db2.data(), db.size() * sizeof(float)) == 0);
    }
  }

  TEST_CASE("max-pool layer: forward matches double, gradient routes to the argmax") {
    const size_t c = 3, h = 6, w = 8;
    const std::vector<float> x = random_floats(c * h * w, 21), r = random_floats(c * h * w / 4, 22);
    std::vector<float> y(c * h * w / 4), dx(c * h * w);
    std::vector<uint8_t> arg(y.size());
    edgefl::train::maxpool2_forward(x.data(), c, h, w, y.data(), arg.data());
    std::vector<double> xd = to_double(x), yd(y.size());
    ref_pool(xd.data(), c, h, w, yd.data());
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == yd[i]);
    edgefl::train::maxpool2_backward(r.data(), arg.data(), c, h, w, dx.data());
    auto f = [&](const std::vector<double>& t) {
      std::vector<double> yy(y.size());
      ref_pool(t.data(), c, h, w, yy.data());
      double s = 0;
      for (size_t i = 0; i < yy.size(); ++i) s += r[i] * yy[i];
      return s;
    };
    const GradCheck g = check_gradient(f, xd, dx, all_coords(xd.size()), 1e-6);
    CHECK(g.pass_rate() == 1.0);
  }

  TEST_CASE("ReLU layer: gradient matches finite differences away from the kink") {
    const std::vector<float> x = random_floats(64, 31), r = random_floats(64, 32);
    std::vector<float> y(x), dy(r);
    edgefl::train::relu_forward(y.data(), y.size());
    edgefl::train::relu_backward(y.data(), dy.data(), dy.size());
    std::vector<double> xd = to_double(x);
    auto f = [&](const std::vector<double>& t) {
      double s = 0;
      for (size_t i = 0; i < t.size(); ++i) s += r[i] * (t[i] > 0 ? t[i] : 0);
      return s;
    };
    const GradCheck g = check_gradient(f, xd, dy, all_coords(xd.size()), 1e-6);
    CHECK(g.pass_rate() == 1.0);
  }

  TEST_CASE("softmax cross-entropy: loss matches double, dlogits match finite differences") {
    const size_t batch = 4, classes = 7;
    const std::vector<float> z = random_floats(batch * classes, 41, 4.0);
    const uint8_t labels[batch] = {0, 6, 3, 3};
    std::vector<float> dz(batch * classes);
    uint32_t correct = 0;
    const float scale = 0.25f;
    const float loss =
        edgefl::train::softmax_xent(z.data(), labels, batch, classes, scale, dz.data(), &correct);
    std::vector<double> zd = to_double(z);
    CHECK(loss == doctest::Approx(ref_xent(zd.data(), labels, batch, classes)).epsilon(1e-6));
    uint32_t expected_correct = 0;
    for (size_t s = 0; s < batch; ++s) {
      size_t best = 0;
      for (size_t k = 1; k < classes; ++k) best = z[s * classes + k] > z[s * classes + best] ? k : best;
      expected_correct += best == labels[s];
    }
    CHECK(correct == expected_correct);
    auto f = [&](const std::vector<double>& t) { return scale * ref_xent(t.data(), labels, batch, classes); };
    const GradCheck g = check_gradient(f, zd, dz, all_coords(zd.size()), 1e-6);
    CHECK(g.pass_rate() == 1.0);
    CHECK(g.worst < 1e-4);
    // Extreme logits stay finite.
    const float big[3] = {1000.0f, -1000.0f, 0.0f};
    const uint8_t label = 1;
    float d[3];
    const float l = edgefl::train::softmax_xent(big, &label, 1, 3, 1.0f, d, nullptr);
    CHECK(l == doctest::Approx(2000.0f));
    CHECK(d[0] == doctest::Approx(1.0f));
    CHECK(d[1] == doctest::Approx(-1.0f));
  }

  // --- Whole models -------------------------------------------------------------------------------

  namespace {

  // Checks SgdTrainer::gradient() of `spec` on `n` random samples against central differences of the
  // double reference model, over `coords` (all if empty).
  GradCheck check_model_gradient(const char* text, size_t n, size_t sampled_coords, uint64_t seed,
                                 float* loss_diff) {
    const ModelSpec spec = parse(text);
    TrainConfig cfg;
    cfg.batch_size = 2;  // smaller than n: gradient() must combine chunks
    TrainerBox box(spec, cfg);
    const Dataset d = random_dataset(n, edgefl::input_dim(spec), edgefl::class_count(spec), seed);
    std::vector<float> params = init_params(spec, seed);
    // Non-zero biases, so that every code path carries them.
    for (size_t i = 0; i < edgefl::tensor_count(spec); i += 2) {
      TensorInfo t;
      REQUIRE(edgefl::tensor_info(spec, i + 1, &t) == Status::kOk);
      const std::vector<float> b = random_floats(t.size, seed + i, 0.1);
      for (size_t j = 0; j < t.size; ++j) params[t.offset + j] = b[j];
    }
    std::vector<float> grad(params.size());
    float loss = 0;
    REQUIRE(box.trainer.gradient({params.data(), params.size()}, d.view(), {grad.data(), grad.size()},
                                 &loss) == Status::kOk);
    std::vector<double> theta = to_double(params);
    *loss_diff = float(fabs(double(loss) - ref_model_loss(spec, theta, d, n)));
    std::vector<size_t> coords;
    if (sampled_coords == 0) {
      coords = all_coords(params.size());
    } else {  // the same number from every tensor
      Rng rng(seed);
      const size_t tensors = edgefl::tensor_count(spec);
      for (size_t i = 0; i < tensors; ++i) {
        TensorInfo t;
        REQUIRE(edgefl::tensor_info(spec, i, &t) == Status::kOk);
        for (size_t k = 0; k < sampled_coords / tensors; ++k)
          coords.push_back(t.offset + rng.below(uint32_t(t.size)));
      }
    }
    auto f = [&](const std::vector<double>& t) { return ref_model_loss(spec, t, d, n); };
    return check_gradient(f, theta, grad, coords, 1e-5);
  }

  }  // namespace

  TEST_CASE("the gradient of a whole MLP matches finite differences") {
    float loss_diff = 0;
    const GradCheck small = check_model_gradient("mlp:6-5-4-3", 5, 0, 1, &loss_diff);
    CHECK(loss_diff < 1e-5f);
    MESSAGE("mlp:6-5-4-3: " << small.passed << "/" << small.checked << " coordinates, worst rel "
                            << small.worst);
    CHECK(small.pass_rate() >= 0.98);
    CHECK(small.worst < 1e-3);
    const GradCheck big = check_model_gradient("mlp:784-128-10", 3, 400, 2, &loss_diff);
    CHECK(loss_diff < 1e-4f);
    MESSAGE("mlp:784-128-10: " << big.passed << "/" << big.checked << " sampled coordinates, worst rel "
                               << big.worst);
    CHECK(big.pass_rate() >= 0.98);
    CHECK(big.worst < 1e-3);
  }

  TEST_CASE("the gradient of a whole CNN matches finite differences") {
    float loss_diff = 0;
    const GradCheck small = check_model_gradient("cnn:3-4-5,in=2x8x12,classes=3", 3, 0, 3, &loss_diff);
    CHECK(loss_diff < 1e-5f);
    MESSAGE("cnn:3-4-5: " << small.passed << "/" << small.checked << " coordinates, worst rel "
                          << small.worst);
    CHECK(small.pass_rate() >= 0.98);
    CHECK(small.worst < 1e-3);
    const GradCheck full = check_model_gradient("cnn", 2, 160, 4, &loss_diff);
    CHECK(loss_diff < 1e-4f);
    MESSAGE("cnn: " << full.passed << "/" << full.checked << " sampled coordinates, worst rel "
                    << full.worst);
    CHECK(full.pass_rate() >= 0.95);
    CHECK(full.worst < 1e-2);
  }

  TEST_CASE("one fit() applies SGD with momentum, weight decay and the FedProx term as documented") {
    // mlp:3-2 (one dense layer, logits = W x + b); 3 identical samples, batch 1: 3 steps whose
    // order does not matter, computed by hand below in double.
    const ModelSpec spec = parse("mlp:3-2");
    TrainConfig cfg;
    cfg.batch_size = 1;
    cfg.local_epochs = 1;
    cfg.learning_rate = 0.1f;
    cfg.momentum = 0.5f;
    cfg.weight_decay = 0.01f;
    cfg.prox_mu = 0.3f;
    TrainerBox box(spec, cfg);
    Dataset d;
    d.dim = 3;
    const float x[3] = {0.5f, -1.0f, 2.0f};
    for (int s = 0; s < 3; ++s) {
      d.inputs.insert(d.inputs.end(), x, x + 3);
      d.labels.push_back(1);
    }
    REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
    const std::vector<float> global = {0.1f, -0.2f, 0.3f,  -0.4f,
                                       0.5f, 0.05f, 0.02f, -0.03f};  // W[2][3], b[2]
    std::vector<float> delta(8);
    FitResult r;
    REQUIRE(box.trainer.fit({global.data(), 8}, {delta.data(), 8}, &r) == Status::kOk);
    CHECK(r.steps == 3);
    CHECK(r.samples == 3);

    std::vector<double> w(global.begin(), global.end()), w0 = w, v(8, 0.0);
    double loss_sum = 0;
    for (int step = 0; step < 3; ++step) {
      const double z0 = w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[6];
      const double z1 = w[3] * x[0] + w[4] * x[1] + w[5] * x[2] + w[7];
      const double m = z0 > z1 ? z0 : z1, e0 = exp(z0 - m), e1 = exp(z1 - m);
      const double p0 = e0 / (e0 + e1), p1 = e1 / (e0 + e1);
      loss_sum += -log(p1);
      const double dz[2] = {p0, p1 - 1.0};  // label 1
      double g[8];
      for (int o = 0; o < 2; ++o) {
        for (int i = 0; i < 3; ++i) g[o * 3 + i] = dz[o] * x[i];
        g[6 + o] = dz[o];
      }
      for (int i = 0; i < 8; ++i) {
        const double decay = i < 6 ? 0.01 : 0.0;  // weights only
        const double gi = g[i] + decay * w[i] + 0.3 * (w[i] - w0[i]);
        v[i] = 0.5 * v[i] + gi;
        w[i] -= 0.1 * v[i];
      }
    }
    for (int i = 0; i < 8; ++i) {
      CAPTURE(i);
      CHECK(delta[i] == doctest::Approx(w[i] - w0[i]).epsilon(1e-4));
    }
    CHECK(r.loss == doctest::Approx(loss_sum / 3).epsilon(1e-5));
  }

  TEST_CASE("fit() is deterministic for a seed and changes with the seed") {
    const ModelSpec spec = parse("cnn:4-8-16,in=1x12x12,classes=5");
    TrainConfig cfg;
    cfg.batch_size = 8;
    cfg.local_epochs = 2;
    cfg.weight_decay = 1e-4f;
    cfg.prox_mu = 0.01f;
    cfg.seed = 99;
    const Dataset d = random_dataset(70, edgefl::input_dim(spec), 5, 5);
    const std::vector<float> global = init_params(spec, 3);
    const size_t p = global.size();
    std::vector<float> a(p), b(p), c(p);
    FitResult ra, rb, rc;
    {
      TrainerBox box(spec, cfg);
      REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
      REQUIRE(box.trainer.fit({global.data(), p}, {a.data(), p}, &ra) == Status::kOk);
      REQUIRE(box.trainer.fit({global.data(), p}, {b.data(), p}, &rb) == Status::kOk);  // same object again
    }
    CHECK(memcmp(a.data(), b.data(), p * sizeof(float)) == 0);
    CHECK(ra.loss == rb.loss);
    {
      TrainerBox box(spec, cfg);  // a fresh object and workspace
      REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
      REQUIRE(box.trainer.fit({global.data(), p}, {b.data(), p}, &rb) == Status::kOk);
      CHECK(memcmp(a.data(), b.data(), p * sizeof(float)) == 0);
      box.trainer.set_seed(100);
      REQUIRE(box.trainer.fit({global.data(), p}, {c.data(), p}, &rc) == Status::kOk);
      CHECK(memcmp(a.data(), c.data(), p * sizeof(float)) != 0);
    }
    bool moved = false;
    for (float v : a) moved = moved || v != 0.0f;
    CHECK(moved);
  }

  TEST_CASE("fit() gives pinned bytes: the same on every compiler and ISA") {
    // Integer RNGs, no libm, no FMA contraction, a fixed order of every sum: GCC and Clang on x86-64
    // agree bit for bit; a different hash on another platform is a determinism bug.
    const ModelSpec spec = parse("cnn:4-8-16,in=1x12x12,classes=5");
    TrainConfig cfg;
    cfg.batch_size = 8;
    cfg.local_epochs = 2;
    cfg.weight_decay = 1e-4f;
    cfg.prox_mu = 0.01f;
    cfg.seed = 99;
    const Dataset d = random_dataset(70, edgefl::input_dim(spec), 5, 5);
    const std::vector<float> global = init_params(spec, 3);
    std::vector<float> delta(global.size());
    TrainerBox box(spec, cfg);
    REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
    FitResult r;
    REQUIRE(box.trainer.fit({global.data(), global.size()}, {delta.data(), delta.size()}, &r) == Status::kOk);
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the delta's bytes
    for (float v : delta) {
      uint32_t u;
      memcpy(&u, &v, 4);
      for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 1099511628211ull;
    }
    char text[32];
    snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(h));
    MESSAGE("fit delta FNV-1a: " << text);
    CHECK(h == 0x428bb77402b74bd4ull);
  }

  TEST_CASE("one trainer serves many clients: set_data and set_seed between fits") {
    const ModelSpec spec = parse("mlp:20-8-4");
    TrainConfig cfg;
    cfg.batch_size = 5;
    const Dataset d = random_dataset(100, 20, 4, 6);
    std::vector<uint32_t> client_a, client_b;
    for (uint32_t i = 0; i < 100; ++i) (i % 3 == 0 ? client_a : client_b).push_back(i);
    const std::vector<float> global = init_params(spec, 1);
    const size_t p = global.size();
    std::vector<float> shared_a(p), shared_b(p), fresh_a(p), fresh_b(p);
    FitResult r;
    TrainerBox shared(spec, cfg);
    REQUIRE(shared.trainer.set_data(d.view(client_a.data(), client_a.size())) == Status::kOk);
    shared.trainer.set_seed(11);
    REQUIRE(shared.trainer.fit({global.data(), p}, {shared_a.data(), p}, &r) == Status::kOk);
    CHECK(r.samples == client_a.size());
    REQUIRE(shared.trainer.set_data(d.view(client_b.data(), client_b.size())) == Status::kOk);
    shared.trainer.set_seed(12);
    REQUIRE(shared.trainer.fit({global.data(), p}, {shared_b.data(), p}, &r) == Status::kOk);
    CHECK(r.samples == client_b.size());
    for (int k = 0; k < 2; ++k) {
      TrainerBox fresh(spec, cfg);
      const std::vector<uint32_t>& idx = k == 0 ? client_a : client_b;
      REQUIRE(fresh.trainer.set_data(d.view(idx.data(), idx.size())) == Status::kOk);
      fresh.trainer.set_seed(k == 0 ? 11 : 12);
      REQUIRE(fresh.trainer.fit({global.data(), p}, {(k == 0 ? fresh_a : fresh_b).data(), p}, &r) ==
              Status::kOk);
    }
    CHECK(memcmp(shared_a.data(), fresh_a.data(), p * sizeof(float)) == 0);
    CHECK(memcmp(shared_b.data(), fresh_b.data(), p * sizeof(float)) == 0);
  }

  TEST_CASE("a trainer can be moved, taking its workspace binding along") {
    const ModelSpec spec = parse("mlp:4-3");
    TrainConfig cfg;
    std::vector<uint8_t> ws(SgdTrainer::workspace_bytes(spec, cfg));
    std::vector<SgdTrainer> trainers;
    trainers.emplace_back();
    REQUIRE(trainers[0].init(spec, cfg, {ws.data(), ws.size()}) == Status::kOk);
    const Dataset d = random_dataset(10, 4, 3, 13);
    REQUIRE(trainers[0].set_data(d.view()) == Status::kOk);
    SgdTrainer moved(static_cast<SgdTrainer&&>(trainers[0]));
    CHECK(!trainers[0].initialized());
    CHECK(moved.initialized());
    const std::vector<float> global = init_params(spec, 1);
    std::vector<float> delta(global.size());
    FitResult r;
    CHECK(moved.fit({global.data(), global.size()}, {delta.data(), delta.size()}, &r) == Status::kOk);
    CHECK(trainers[0].fit({global.data(), global.size()}, {delta.data(), delta.size()}, &r) ==
          Status::kInvalidArgument);
  }

  TEST_CASE("fit() reports samples x epochs and ceil(samples / batch) steps per epoch, or the step cap") {
    const ModelSpec spec = parse("mlp:8-3");
    const Dataset d = random_dataset(50, 8, 3, 7);
    const std::vector<float> global = init_params(spec, 1);
    const size_t p = global.size();
    std::vector<float> delta(p);
    TrainConfig cfg;
    cfg.batch_size = 8;
    cfg.local_epochs = 3;
    TrainerBox box(spec, cfg);
    REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
    FitResult r;
    REQUIRE(box.trainer.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kOk);
    CHECK(r.samples == 150);
    CHECK(r.steps == 21);
    CHECK(r.loss > 0.0f);
    CHECK(r.accuracy >= 0.0f);
    CHECK(r.accuracy <= 1.0f);
    cfg.max_steps = 5;
    REQUIRE(box.trainer.set_config(cfg) == Status::kOk);
    REQUIRE(box.trainer.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kOk);
    CHECK(r.steps == 5);
    CHECK(r.samples == 40);
    // A subset of 13 samples.
    const uint32_t idx[13] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 49};
    cfg.max_steps = 0;
    cfg.local_epochs = 2;
    REQUIRE(box.trainer.set_config(cfg) == Status::kOk);
    REQUIRE(box.trainer.set_data(d.view(idx, 13)) == Status::kOk);
    REQUIRE(box.trainer.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kOk);
    CHECK(r.samples == 26);
    CHECK(r.steps == 4);
  }

  TEST_CASE("delta_out may alias global") {
    const ModelSpec spec = parse("mlp:8-6-3");
    const Dataset d = random_dataset(40, 8, 3, 8);
    TrainConfig cfg;
    cfg.prox_mu = 0.1f;
    TrainerBox box(spec, cfg);
    REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
    std::vector<float> global = init_params(spec, 2), separate(global.size());
    const size_t p = global.size();
    FitResult r;
    REQUIRE(box.trainer.fit({global.data(), p}, {separate.data(), p}, &r) == Status::kOk);
    REQUIRE(box.trainer.fit({global.data(), p}, {global.data(), p}, &r) == Status::kOk);
    CHECK(memcmp(global.data(), separate.data(), p * sizeof(float)) == 0);
  }

  TEST_CASE("training an MLP on separable data lowers the loss and raises the accuracy") {
    const ModelSpec spec = parse("mlp:10-16-3");
    // One labelling rule for both sets: the first 600 samples train, the other 300 test.
    const Dataset all = separable_dataset(900, 10, 3, 21);
    std::vector<uint32_t> train_idx, test_idx;
    for (uint32_t i = 0; i < 900; ++i) (i < 600 ? train_idx : test_idx).push_back(i);
    const DataView train_view = all.view(train_idx.data(), train_idx.size());
    const DataView test_view = all.view(test_idx.data(), test_idx.size());
    TrainConfig cfg;
    cfg.batch_size = 16;
    cfg.local_epochs = 10;
    cfg.learning_rate = 0.05f;
    TrainerBox box(spec, cfg);
    REQUIRE(box.trainer.set_data(train_view) == Status::kOk);
    std::vector<float> params = init_params(spec, 5), delta(params.size());
    float loss0 = 0, acc0 = 0, loss1 = 0, acc1 = 0;
    REQUIRE(box.trainer.evaluate({params.data(), params.size()}, test_view, &loss0, &acc0) == Status::kOk);
    FitResult r;
    REQUIRE(box.trainer.fit({params.data(), params.size()}, {delta.data(), delta.size()}, &r) == Status::kOk);
    for (size_t i = 0; i < params.size(); ++i) params[i] += delta[i];
    REQUIRE(box.trainer.evaluate({params.data(), params.size()}, test_view, &loss1, &acc1) == Status::kOk);
    MESSAGE("separable mlp: test loss " << loss0 << " -> " << loss1 << ", accuracy " << acc0 << " -> " << acc1
                                        << " (train loss " << r.loss << ", train accuracy " << r.accuracy
                                        << ")");
    CHECK(acc0 < 0.8f);
    CHECK(loss1 < 0.5f * loss0);
    CHECK(acc1 > 0.9f);
    CHECK(r.accuracy > acc0);
  }

  TEST_CASE("training a CNN on images whose class is the bright quadrant learns it") {
    const ModelSpec spec = parse("cnn:4-8-16,in=1x8x8,classes=4");
    Rng rng(31);
    auto make = [&](size_t count) {
      Dataset d;
      d.dim = 64;
      d.inputs.resize(count * 64);
      d.labels.resize(count);
      for (size_t s = 0; s < count; ++s) {
        const uint32_t q = rng.below(4);
        d.labels[s] = uint8_t(q);
        for (size_t y = 0; y < 8; ++y) {
          for (size_t x = 0; x < 8; ++x) {
            const bool lit = (y / 4) * 2 + (x / 4) == q;
            d.inputs[s * 64 + y * 8 + x] = float(0.3 * rng.uniform() + (lit ? 0.5 : 0.0));
          }
        }
      }
      return d;
    };
    const Dataset train_set = make(400), test_set = make(200);
    TrainConfig cfg;
    cfg.batch_size = 16;
    cfg.local_epochs = 5;
    TrainerBox box(spec, cfg);
    REQUIRE(box.trainer.set_data(train_set.view()) == Status::kOk);
    std::vector<float> params = init_params(spec, 9), delta(params.size());
    float loss0 = 0, acc0 = 0, loss1 = 0, acc1 = 0;
    REQUIRE(box.trainer.evaluate({params.data(), params.size()}, test_set.view(), &loss0, &acc0) ==
            Status::kOk);
    FitResult r;
    REQUIRE(box.trainer.fit({params.data(), params.size()}, {delta.data(), delta.size()}, &r) == Status::kOk);
    for (size_t i = 0; i < params.size(); ++i) params[i] += delta[i];
    REQUIRE(box.trainer.evaluate({params.data(), params.size()}, test_set.view(), &loss1, &acc1) ==
            Status::kOk);
    MESSAGE("quadrant cnn: test loss " << loss0 << " -> " << loss1 << ", accuracy " << acc0 << " -> "
                                       << acc1);
    CHECK(loss1 < 0.5f * loss0);
    CHECK(acc1 > 0.9f);
  }

  TEST_CASE("init() needs exactly workspace_bytes, at any alignment, and the trainer stays inside it") {
    const ModelSpec spec = parse("cnn:4-8-16,in=1x12x12,classes=5");
    TrainConfig cfg;
    cfg.batch_size = 7;
    const size_t ws = SgdTrainer::workspace_bytes(spec, cfg);
    REQUIRE(ws > 0);
    const Dataset d = random_dataset(30, edgefl::input_dim(spec), 5, 9);
    const std::vector<float> global = init_params(spec, 4);
    const size_t p = global.size();
    std::vector<float> reference(p);
    for (size_t misalign = 0; misalign < 64; misalign += 9) {
      CAPTURE(misalign);
      constexpr size_t kGuard = 256;
      std::vector<uint8_t> memory(kGuard + 64 + ws + kGuard, 0xA5);
      uint8_t* begin = memory.data() + kGuard + misalign;
      SgdTrainer trainer;
      CHECK(trainer.init(spec, cfg, {begin, ws - 1}) == Status::kWorkspaceTooSmall);
      CHECK(!trainer.initialized());
      REQUIRE(trainer.init(spec, cfg, {begin, ws}) == Status::kOk);
      CHECK(trainer.parameter_count() == p);
      REQUIRE(trainer.set_data(d.view()) == Status::kOk);
      std::vector<float> delta(p), grad(p);
      FitResult r;
      REQUIRE(trainer.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kOk);
      float loss, acc;
      REQUIRE(trainer.evaluate({global.data(), p}, d.view(), &loss, &acc) == Status::kOk);
      REQUIRE(trainer.gradient({global.data(), p}, d.view(), {grad.data(), p}, &loss) == Status::kOk);
      for (size_t i = 0; i < memory.size(); ++i) {
        if (memory.data() + i >= begin && memory.data() + i < begin + ws) continue;
        if (memory[i] != 0xA5) {
          FAIL("byte " << i << " outside the workspace was written");
          break;
        }
      }
      if (misalign == 0) reference = delta;
      CHECK(memcmp(reference.data(), delta.data(), p * sizeof(float)) == 0);  // alignment changes nothing
    }
    SgdTrainer trainer;
    std::vector<uint8_t> memory(ws);
    CHECK(trainer.init(spec, cfg, {nullptr, ws}) == Status::kInvalidArgument);
    TrainConfig bad = cfg;
    bad.batch_size = 0;
    CHECK(SgdTrainer::workspace_bytes(spec, bad) == 0);
    CHECK(trainer.init(spec, bad, {memory.data(), ws}) == Status::kInvalidArgument);
    ModelSpec bad_spec = spec;
    bad_spec.height = 10;
    CHECK(trainer.init(bad_spec, cfg, {memory.data(), ws}) == Status::kInvalidSpec);
    // The workspace grows with the rows held at once, not with the batch size.
    TrainConfig bigger = cfg;
    bigger.batch_size = 64;
    CHECK(SgdTrainer::workspace_bytes(spec, bigger) == ws);
    bigger.micro_batch = 0;
    CHECK(SgdTrainer::workspace_bytes(spec, bigger) > ws);
    MESSAGE("workspace_bytes(cnn, batch 32) = "
            << SgdTrainer::workspace_bytes(parse("cnn"), TrainConfig()) << ", (mlp:784-128-10, batch 32) = "
            << SgdTrainer::workspace_bytes(parse("mlp:784-128-10"), TrainConfig()));
  }

  TEST_CASE(
      "micro_batch changes the memory, not the bits: fit, evaluate and gradient agree for every part size") {
    // A CNN (conv, pool, dense) and an MLP; batches that do and do not divide by the part size,
    // a last batch shorter than the rest, two epochs, momentum, weight decay and FedProx.
    for (const char* text : {"cnn:4-8-16,in=1x12x12,classes=5", "mlp:144-24-5"}) {
      CAPTURE(text);
      const ModelSpec spec = parse(text);
      const Dataset d = random_dataset(45, edgefl::input_dim(spec), 5, 21);
      const std::vector<float> global = init_params(spec, 8);
      const size_t p = global.size();
      TrainConfig cfg;
      cfg.batch_size = 12;
      cfg.local_epochs = 2;
      cfg.weight_decay = 0.001f;
      cfg.prox_mu = 0.01f;
      std::vector<float> reference_delta, reference_grad;
      FitResult reference_fit;
      float reference_loss = 0, reference_acc = 0, reference_grad_loss = 0;
      size_t previous_ws = 0;
      for (uint32_t micro : {0u, 12u, 7u, 5u, 1u}) {
        CAPTURE(micro);
        cfg.micro_batch = micro;
        const size_t ws = SgdTrainer::workspace_bytes(spec, cfg);
        if (previous_ws != 0) CHECK(ws < previous_ws + (micro == 12 ? 1 : 0));  // fewer rows, less memory
        previous_ws = ws;
        TrainerBox box(spec, cfg);
        REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
        std::vector<float> delta(p), grad(p);
        FitResult r;
        float loss = 0, acc = 0, grad_loss = 0;
        REQUIRE(box.trainer.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kOk);
        REQUIRE(box.trainer.evaluate({global.data(), p}, d.view(), &loss, &acc) == Status::kOk);
        REQUIRE(box.trainer.gradient({global.data(), p}, d.view(), {grad.data(), p}, &grad_loss) ==
                Status::kOk);
        if (micro == 0) {
          reference_delta = delta;
          reference_grad = grad;
          reference_fit = r;
          reference_loss = loss;
          reference_acc = acc;
          reference_grad_loss = grad_loss;
          continue;
        }
        CHECK(memcmp(delta.data(), reference_delta.data(), p * sizeof(float)) == 0);
        CHECK(memcmp(grad.data(), reference_grad.data(), p * sizeof(float)) == 0);
        CHECK(r.steps == reference_fit.steps);
        CHECK(r.samples == reference_fit.samples);
        CHECK(memcmp(&r.loss, &reference_fit.loss, sizeof(float)) == 0);
        CHECK(memcmp(&r.accuracy, &reference_fit.accuracy, sizeof(float)) == 0);
        CHECK(memcmp(&loss, &reference_loss, sizeof(float)) == 0);
        CHECK(memcmp(&acc, &reference_acc, sizeof(float)) == 0);
        CHECK(memcmp(&grad_loss, &reference_grad_loss, sizeof(float)) == 0);
      }
    }
    // The CNN's activations: the default 4 rows need a fraction of a whole batch of 32.
    TrainConfig whole;
    whole.micro_batch = 0;
    const size_t cnn_whole = SgdTrainer::workspace_bytes(parse("cnn"), whole);
    const size_t cnn_default = SgdTrainer::workspace_bytes(parse("cnn"), TrainConfig());
    MESSAGE("cnn, batch 32: workspace " << cnn_whole << " bytes whole, " << cnn_default
                                        << " in parts of 4 rows");
    CHECK(cnn_default < cnn_whole * 6 / 10);
  }

  TEST_CASE("set_data, fit, evaluate and gradient allocate nothing") {
    const ModelSpec spec = parse("cnn:4-8-16,in=1x12x12,classes=5");
    TrainConfig cfg;
    cfg.batch_size = 8;
    TrainerBox box(spec, cfg);
    const Dataset d = random_dataset(40, edgefl::input_dim(spec), 5, 10);
    const std::vector<float> global = init_params(spec, 4);
    const size_t p = global.size();
    std::vector<float> delta(p), grad(p);
    FitResult r;
    float loss = 0, acc = 0;
    const long before = g_allocations.load();
    const Status s1 = box.trainer.set_data(d.view());
    const Status s2 = box.trainer.fit({global.data(), p}, {delta.data(), p}, &r);
    const Status s3 = box.trainer.evaluate({global.data(), p}, d.view(), &loss, &acc);
    const Status s4 = box.trainer.gradient({global.data(), p}, d.view(), {grad.data(), p}, &loss);
    const long after = g_allocations.load();
    CHECK(s1 == Status::kOk);
    CHECK(s2 == Status::kOk);
    CHECK(s3 == Status::kOk);
    CHECK(s4 == Status::kOk);
    CHECK(after - before == 0);
    // The counter does count: a vector allocates.
    const long probe = g_allocations.load();
    std::vector<int> v(3);
    CHECK(g_allocations.load() > probe);
  }

  TEST_CASE("bad data, mis-sized spans and wrong call order fail with specific statuses") {
    const ModelSpec spec = parse("mlp:4-3");
    const std::vector<float> global = init_params(spec, 1);
    const size_t p = global.size();
    std::vector<float> delta(p);
    FitResult r;
    SgdTrainer uninit;
    const Dataset d = random_dataset(10, 4, 3, 11);
    CHECK(uninit.set_data(d.view()) == Status::kInvalidArgument);
    CHECK(uninit.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kInvalidArgument);
    CHECK(uninit.parameter_count() == 0);

    TrainerBox box(spec, TrainConfig());
    CHECK(box.trainer.fit({global.data(), p}, {delta.data(), p}, &r) == Status::kInvalidArgument);  // no data

    DataView v = d.view();
    v.input_dim = 5;
    CHECK(box.trainer.set_data(v) == Status::kInvalidArgument);
    v = d.view();
    v.count = 0;
    CHECK(box.trainer.set_data(v) == Status::kInvalidArgument);
    v = d.view();
    v.labels = nullptr;
    CHECK(box.trainer.set_data(v) == Status::kInvalidArgument);
    const uint32_t out_of_range[2] = {0, 10};
    CHECK(box.trainer.set_data(d.view(out_of_range, 2)) == Status::kInvalidArgument);
    const uint32_t some[2] = {0, 9};
    CHECK(box.trainer.set_data(d.view(some, 0)) == Status::kInvalidArgument);  // nothing selected
    Dataset bad_label = d;
    bad_label.labels[3] = 3;
    CHECK(box.trainer.set_data(bad_label.view()) == Status::kInvalidArgument);
    CHECK(box.trainer.set_data(bad_label.view(some, 2)) == Status::kOk);  // sample 3 not selected

    REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
    CHECK(box.trainer.fit({global.data(), p - 1}, {delta.data(), p}, &r) == Status::kInvalidArgument);
    CHECK(box.trainer.fit({global.data(), p}, {delta.data(), p + 1}, &r) == Status::kInvalidArgument);
    CHECK(box.trainer.fit({global.data(), p}, {delta.data(), p}, nullptr) == Status::kInvalidArgument);
    std::vector<float> nan_global = global;
    nan_global[2] = NAN;
    CHECK(box.trainer.fit({nan_global.data(), p}, {delta.data(), p}, &r) == Status::kNonFiniteInput);
    float loss, acc;
    CHECK(box.trainer.evaluate({global.data(), p - 1}, d.view(), &loss, &acc) == Status::kInvalidArgument);
    CHECK(box.trainer.evaluate({global.data(), p}, d.view(), nullptr, &acc) == Status::kInvalidArgument);
    std::vector<float> grad(p);
    CHECK(box.trainer.gradient({global.data(), p}, d.view(), {grad.data(), p - 1}, &loss) ==
          Status::kInvalidArgument);

    TrainConfig cfg;
    cfg.batch_size = 64;  // a larger batch in parts of the 4 rows init() sized for: fine
    CHECK(box.trainer.set_config(cfg) == Status::kOk);
    cfg.micro_batch = 5;  // more rows at once than init()'s 4
    CHECK(box.trainer.set_config(cfg) == Status::kInvalidArgument);
    cfg.micro_batch = 0;  // the whole batch of 64 at once
    CHECK(box.trainer.set_config(cfg) == Status::kInvalidArgument);
    for (int k = 0; k < 5; ++k) {
      TrainConfig bad;
      if (k == 0) bad.learning_rate = 0.0f;
      if (k == 1) bad.momentum = 1.0f;
      if (k == 2) bad.weight_decay = -1.0f;
      if (k == 3) bad.prox_mu = INFINITY;
      if (k == 4) bad.local_epochs = 0;
      CHECK(box.trainer.set_config(bad) == Status::kInvalidArgument);
      CHECK(SgdTrainer::workspace_bytes(spec, bad) == 0);
    }
    CHECK(box.trainer.config().learning_rate == TrainConfig().learning_rate);  // unchanged
  }

  TEST_CASE("a diverging fit() fails with kNonFiniteInput instead of returning a poisoned delta") {
    const ModelSpec spec = parse("mlp:4-8-3");
    TrainConfig cfg;
    cfg.batch_size = 2;
    cfg.learning_rate = 1e30f;
    cfg.local_epochs = 5;
    TrainerBox box(spec, cfg);
    Dataset d = random_dataset(20, 4, 3, 12);
    for (float& x : d.inputs) x *= 1e10f;
    REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
    const std::vector<float> global = init_params(spec, 1);
    std::vector<float> delta(global.size());
    FitResult r;
    r.samples = 12345;
    CHECK(box.trainer.fit({global.data(), global.size()}, {delta.data(), delta.size()}, &r) ==
          Status::kNonFiniteInput);
    CHECK(r.samples == 12345);  // unchanged
  }

}  // TEST_SUITE("train")

// =================================================================================================
// Throughput, not a correctness test: skipped unless asked for with
//   edgefl_train_tests -ts=train.bench --no-skip
TEST_SUITE("train.bench" * doctest::skip()) {
  TEST_CASE("training throughput of the default cnn and mlp:784-128-10") {
    // CPU time of this thread (the machine may be shared), best of 5 runs of one epoch.
    auto cpu_seconds = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    };
    // Each model with the whole batch of 32 in memory, then in parts of 8 and 4 (the default) rows.
    for (const char* text : {"cnn", "mlp:784-128-10"})
      for (uint32_t micro : {0u, 8u, 4u}) {
        const ModelSpec spec = parse(text);
        TrainConfig cfg;  // batch 32, 1 epoch
        cfg.micro_batch = micro;
        TrainerBox box(spec, cfg);
        const Dataset d = random_dataset(600, edgefl::input_dim(spec), 10, 1);
        REQUIRE(box.trainer.set_data(d.view()) == Status::kOk);
        const std::vector<float> global = init_params(spec, 1);
        std::vector<float> delta(global.size());
        FitResult r;
        double fit_best = 0, eval_best = 0;
        for (int rep = 0; rep < 5; ++rep) {
          double t0 = cpu_seconds();
          REQUIRE(box.trainer.fit({global.data(), global.size()}, {delta.data(), delta.size()}, &r) ==
                  Status::kOk);
          const double fit_rate = r.samples / (cpu_seconds() - t0);
          float loss, acc;
          t0 = cpu_seconds();
          REQUIRE(box.trainer.evaluate({global.data(), global.size()}, d.view(), &loss, &acc) == Status::kOk);
          const double eval_rate = 600 / (cpu_seconds() - t0);
          fit_best = fit_rate > fit_best ? fit_rate : fit_best;
          eval_best = eval_rate > eval_best ? eval_rate : eval_best;
        }
        printf(
            "train.bench %-16s micro_batch %2u  %8zu params  fit %8.0f samples/s  evaluate %8.0f samples/s  "
            "workspace %zu B\n",
            text, micro, global.size(), fit_best, eval_best, box.workspace.size());
      }
  }

}  // TEST_SUITE("train.bench")
