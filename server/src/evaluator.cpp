// evaluator.cpp: the built-in Fashion-MNIST evaluator (evaluator.h).
#include "evaluator.h"

#include <algorithm>

#include "edgefl/data.h"
#include "edgefl/model.h"
#include "edgefl/trainer.h"

namespace edgefl::server {
namespace {

class FashionMnistEvaluator final : public ModelEvaluator {
 public:
  Status init(const std::string& model_spec, const std::string& data_dir, uint32_t samples,
              std::string* error) {
    if (parse_model_spec(model_spec.c_str(), &spec_) != Status::kOk) {
      *error = "--eval: model '" + model_spec +
               "' is not a built-in model (mlp:/cnn); the built-in evaluation runs built-in models on "
               "Fashion-MNIST. Evaluate a model of your own through ModelEvaluator (server/src/evaluator.h), "
               "or load global.safetensors in PyTorch";
      return Status::kInvalidSpec;
    }
    spec_text_ = model_spec;
    if (input_dim(spec_) != 28 * 28 || class_count(spec_) != 10) {
      *error = "--eval: model '" + model_spec + "' takes " + std::to_string(input_dim(spec_)) +
               " inputs and has " + std::to_string(class_count(spec_)) +
               " classes; Fashion-MNIST has 784 (1x28x28) and 10, so it cannot be evaluated on it";
      return Status::kInvalidSpec;
    }
    if (!load_fashion_mnist(data_dir, false, &test_set_, error)) return Status::kIoError;
    count_ = std::min<size_t>(samples, test_set_.count);
    TrainConfig config;
    workspace_.resize(SgdTrainer::workspace_bytes(spec_, config));
    return trainer_.init(spec_, config, {workspace_.data(), workspace_.size()});
  }

  std::string describe() const override {
    return spec_text_ + " on " + std::to_string(count_) + " Fashion-MNIST test images";
  }

  Status check_model(const std::vector<TensorDesc>& tensors, const std::string& model_spec,
                     std::string* error) const override {
    std::vector<TensorDesc> mine;
    if (tensor_table_from_spec(spec_, &mine) != Status::kOk || model_spec != spec_text_ ||
        mine.size() != tensors.size()) {
      *error = "--eval: the evaluator was made for '" + spec_text_ + "', the federation trains '" +
               (model_spec.empty() ? std::string("a model of its own") : model_spec) + "'";
      return Status::kInvalidSpec;
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine[i].name != tensors[i].name || mine[i].shape != tensors[i].shape) {
        *error =
            "--eval: tensor '" + tensors[i].name + "' is not the built-in model's '" + mine[i].name + "'";
        return Status::kInvalidSpec;
      }
    }
    return Status::kOk;
  }

  Status evaluate(Span<const float> model, Evaluation* out, std::string* error) override {
    DataView view{test_set_.inputs.data(), test_set_.labels.data(), count_, test_set_.dim(), nullptr, 0};
    float loss = 0, accuracy = 0;
    const Status s = trainer_.evaluate(model, view, &loss, &accuracy);
    if (s != Status::kOk) {
      *error = std::string("evaluation failed: ") + status_name(s);
      return s;
    }
    *out = Evaluation{accuracy, loss, uint32_t(count_)};
    return Status::kOk;
  }

  std::string preprocessing() const override { return fashion_mnist_preprocessing(spec_text_); }

 private:
  ModelSpec spec_;
  std::string spec_text_;
  Dataset test_set_;
  size_t count_ = 0;
  std::vector<uint8_t> workspace_;
  SgdTrainer trainer_;
};

}  // namespace

std::string fashion_mnist_preprocessing(const std::string& model_spec) {
  ModelSpec spec;
  if (parse_model_spec(model_spec.c_str(), &spec) != Status::kOk || input_dim(spec) != 28 * 28 ||
      class_count(spec) != 10) {
    return "";
  }
  auto trim = [](float v) {
    std::string s = std::to_string(v);
    while (!s.empty() && s.back() == '0') s.pop_back();
    return s;
  };
  return "Fashion-MNIST pixels scaled to [0, 1], then (x - " + trim(kFashionMnistNormalization.mean) +
         ") / " + trim(kFashionMnistNormalization.stddev) + "; inputs " +
         (spec.kind == ModelKind::kCnn ? "1x28x28 (CHW)" : "784 features, row-major");
}

Status make_fashion_mnist_evaluator(const std::string& model_spec, const std::string& data_dir,
                                    uint32_t samples, std::unique_ptr<ModelEvaluator>* out,
                                    std::string* error) {
  auto evaluator = std::make_unique<FashionMnistEvaluator>();
  EDGEFL_RETURN_IF_ERROR(evaluator->init(model_spec, data_dir, samples, error));
  *out = std::move(evaluator);
  return Status::kOk;
}

}  // namespace edgefl::server
