// examples/pytorch: edgefl-server with an evaluator of the user's own model (server/src/evaluator.h):
// every new model version goes into the TorchScript module and is measured on the Fashion-MNIST
// test set, so the server's accuracy is the one PyTorch measures on global.safetensors.
//
//   edgefl_torch_server --torch-eval fashion_net.pt [--torch-eval-data DIR] <edgefl-server options>
//
// Everything else is edgefl-server's command line (server/src/command_line.h).
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command_line.h"
#include "edgefl/data.h"
#include "evaluator.h"
#include "torch_model.h"

namespace {

using edgefl::Status;

class TorchEvaluator final : public edgefl::server::ModelEvaluator {
 public:
  Status init(const std::string& module_path, const std::string& data_dir, std::string* error) {
    path_ = module_path;
    EDGEFL_RETURN_IF_ERROR(model_.load(module_path, error));
    if (!edgefl::load_fashion_mnist(data_dir, false, &test_, error)) return Status::kIoError;
    return Status::kOk;
  }

  std::string describe() const override {
    return path_ + " (TorchScript) on " + std::to_string(test_.count) + " Fashion-MNIST test images";
  }

  Status check_model(const std::vector<edgefl::TensorDesc>& tensors, const std::string&,
                     std::string* error) const override {
    // A copy shares the module and binds on its own: the check leaves the evaluator as it was.
    edgefl_example::TorchModel probe = model_;
    const Status s = probe.bind(tensors, error);
    if (s != Status::kOk) {
      *error = "--torch-eval " + path_ + ": " + *error;
      return s;
    }
    tensors_ = tensors;  // bound at the first evaluation
    return Status::kOk;
  }

  Status evaluate(edgefl::Span<const float> flat, edgefl::server::Evaluation* out,
                  std::string* error) override {
    if (!bound_) {
      EDGEFL_RETURN_IF_ERROR(model_.bind(tensors_, error));
      bound_ = true;
    }
    torch::NoGradGuard no_grad;
    model_.set_parameters(flat);
    torch::jit::Module& module = model_.module();
    module.eval();
    const auto n = int64_t(test_.count);
    int64_t correct = 0;
    double loss = 0;
    for (int64_t begin = 0; begin < n; begin += 1000) {
      const int64_t size = std::min<int64_t>(1000, n - begin);
      const at::Tensor x =
          torch::from_blob(const_cast<float*>(test_.input(size_t(begin))), {size, 1, 28, 28}, torch::kFloat);
      at::Tensor y = torch::empty({size}, torch::kLong);
      for (int64_t k = 0; k < size; ++k) y[k] = int64_t(test_.labels[size_t(begin + k)]);
      const at::Tensor logits = module.forward({x}).toTensor();
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
      loss += torch::nn::functional::cross_entropy(logits, y).item<double>() * double(size);
    }
    *out =
        edgefl::server::Evaluation{float(double(correct) / double(n)), float(loss / double(n)), uint32_t(n)};
    return Status::kOk;
  }

  std::string preprocessing() const override {
    return "Fashion-MNIST pixels scaled to [0, 1], then (x - 0.286) / 0.353; inputs 1x28x28";
  }

 private:
  std::string path_;
  edgefl_example::TorchModel model_;
  edgefl::Dataset test_;
  mutable std::vector<edgefl::TensorDesc> tensors_;  // the federation's table, from check_model()
  bool bound_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  std::string module_path, data_dir = edgefl::fashion_mnist_dir();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--torch-eval" || a == "--torch-eval-data") && i + 1 < argc) {
      (a == "--torch-eval" ? module_path : data_dir) = argv[++i];
    } else {
      args.push_back(a);
    }
  }
  edgefl::server::ServerCustomization custom;
  custom.program = "edgefl_torch_server";
  custom.extra_usage =
      "examples/pytorch:\n"
      "  --torch-eval FILE.pt    evaluate each new model with this TorchScript module (instead of --eval)\n"
      "  --torch-eval-data DIR   its Fashion-MNIST test set (the installed dataset)\n";
  if (!module_path.empty()) {
    torch::set_num_threads(1);
    auto evaluator = std::make_shared<TorchEvaluator>();
    std::string error;
    if (evaluator->init(module_path, data_dir, &error) != Status::kOk) {
      std::fprintf(stderr, "edgefl_torch_server: %s\n", error.c_str());
      return 2;
    }
    custom.evaluator = evaluator;
    custom.evaluator_name = "--torch-eval";
  }
  return edgefl::server::server_main(args, custom);
}
