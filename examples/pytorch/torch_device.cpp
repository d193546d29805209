// examples/pytorch: a device that trains the user's own PyTorch model with libtorch and takes part
// in edgefl rounds: edgefl::Client downloads the model, this LocalTrainer trains the TorchScript
// module on the device's shard of Fashion-MNIST, edgefl compresses and uploads the delta.
//
//   edgefl_torch_device --module fashion_net.pt --server HOST:PORT --ca ca.crt --cert dev.crt
//       --key dev.key [--shard I/N] [--rounds R] [--data DIR]
//
// Exit status: 0 when the rounds were done (or the server drained), 1 on a failure (printed).
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "edgefl/client.h"
#include "edgefl/data.h"
#include "torch_model.h"

namespace {

using edgefl::Status;

// The app's training engine (edgefl/client.h): plain PyTorch SGD on the module's parameters.
class TorchTrainer final : public edgefl::LocalTrainer {
 public:
  TorchTrainer(edgefl_example::TorchModel* model, const edgefl::Dataset* data, std::vector<uint32_t> indices)
      : model_(model), data_(data), indices_(std::move(indices)) {}

  size_t memory_bytes(const edgefl::RoundTask& task) const override {
    // Parameters, gradients and momentum buffers, plus one batch of inputs and activations
    // (an estimate: libtorch allocates as it goes).
    return 3 * task.parameter_count * sizeof(float) + size_t(task.training.batch_size) * 64 * 1024;
  }

  Status prepare(const edgefl::RoundTask& task) override {
    std::string why;
    if (const Status s = model_->bind(task.tensors, &why); s != Status::kOk) {
      std::fprintf(stderr, "edgefl_torch_device: round %llu: this module cannot train the task's model: %s\n",
                   static_cast<unsigned long long>(task.round_id), why.c_str());
      return s;
    }
    task_ = task;
    return Status::kOk;
  }

  Status fit(edgefl::Span<const float> global, edgefl::Span<float> delta, uint32_t* samples,
             float* loss) override {
    const edgefl::TrainConfig& t = task_.training;
    model_->set_parameters(global);
    torch::jit::Module& module = model_->module();
    module.train();
    torch::optim::SGD optimizer(
        model_->parameters(),
        torch::optim::SGDOptions(t.learning_rate).momentum(t.momentum).weight_decay(t.weight_decay));
    torch::manual_seed(t.seed);
    const auto dim = int64_t(data_->dim());
    const auto n = int64_t(indices_.size());
    double loss_sum = 0;
    uint64_t steps = 0, seen = 0;
    for (uint32_t epoch = 0; epoch < t.local_epochs; ++epoch) {
      const at::Tensor order = torch::randperm(n, torch::kLong);
      const int64_t* shuffled = order.data_ptr<int64_t>();
      for (int64_t begin = 0; begin < n; begin += t.batch_size) {
        if (t.max_steps != 0 && steps == t.max_steps) break;
        const int64_t size = std::min<int64_t>(t.batch_size, n - begin);
        at::Tensor x = torch::empty({size, 1, 28, 28});
        at::Tensor y = torch::empty({size}, torch::kLong);
        for (int64_t k = 0; k < size; ++k) {
          const uint32_t i = indices_[size_t(shuffled[begin + k])];
          std::memcpy(x.data_ptr<float>() + k * dim, data_->input(i), size_t(dim) * sizeof(float));
          y[k] = int64_t(data_->labels[i]);
        }
        optimizer.zero_grad();
        const at::Tensor out = module.forward({x}).toTensor();
        const at::Tensor l = torch::nn::functional::cross_entropy(out, y);
        l.backward();
        optimizer.step();
        loss_sum += l.item<double>() * double(size);
        seen += uint64_t(size);
        ++steps;
      }
    }
    model_->get_parameters(delta);
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= global[i];
    *samples = uint32_t(std::max<uint64_t>(seen, 1));
    *loss = float(loss_sum / double(std::max<uint64_t>(seen, 1)));
    return Status::kOk;
  }

 private:
  edgefl_example::TorchModel* model_;
  const edgefl::Dataset* data_;
  std::vector<uint32_t> indices_;
  edgefl::RoundTask task_;
};

int usage(const char* message) {
  std::fprintf(
      stderr,
      "edgefl_torch_device: %s\nusage: edgefl_torch_device --module FILE.pt --server HOST:PORT --ca FILE "
      "--cert FILE --key FILE [--server-name NAME] [--shard I/N] [--rounds R] [--data DIR]\n",
      message);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  edgefl::ClientOptions options;
  options.stop_when_draining = true;
  std::string module_path, data_dir = edgefl::fashion_mnist_dir();
  unsigned shard = 0, shards = 1, rounds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--module") {
      module_path = v;
    } else if (a == "--server") {
      const size_t colon = v.rfind(':');
      if (colon == std::string::npos) return usage("--server takes HOST:PORT");
      options.host = v.substr(0, colon);
      options.port = uint16_t(std::strtoul(v.c_str() + colon + 1, nullptr, 10));
    } else if (a == "--server-name") {
      options.server_name = v;
    } else if (a == "--ca") {
      options.ca_file = v;
    } else if (a == "--cert") {
      options.cert_file = v;
    } else if (a == "--key") {
      options.key_file = v;
    } else if (a == "--shard") {
      if (std::sscanf(v.c_str(), "%u/%u", &shard, &shards) != 2 || shards == 0 || shard >= shards) {
        return usage("--shard takes I/N with I < N");
      }
    } else if (a == "--rounds") {
      rounds = unsigned(std::strtoul(v.c_str(), nullptr, 10));
    } else if (a == "--data") {
      data_dir = v;
    } else {
      return usage(("unknown option " + a).c_str());
    }
  }
  if (module_path.empty()) return usage("--module is required");
  torch::set_num_threads(1);  // one core per device, as on a gateway running other work

  std::string error;
  edgefl_example::TorchModel model;
  if (model.load(module_path, &error) != Status::kOk) return std::fprintf(stderr, "%s\n", error.c_str()), 1;
  edgefl::Dataset train;
  if (!edgefl::load_fashion_mnist(data_dir, true, &train, &error)) {
    return std::fprintf(stderr, "edgefl_torch_device: %s\n", error.c_str()), 1;
  }
  edgefl::PartitionSpec partition_spec;
  if (!edgefl::parse_partition_spec("dirichlet:0.5", &partition_spec, &error)) return 1;
  const auto parts = edgefl::partition(train.labels, shards, partition_spec, /*seed=*/1, &error);
  if (parts.size() != shards) return std::fprintf(stderr, "edgefl_torch_device: %s\n", error.c_str()), 1;
  TorchTrainer trainer(&model, &train, parts[shard]);

  options.log = [](edgefl::LogLevel level, const std::string& message) {
    if (level <= edgefl::LogLevel::kInfo) std::fprintf(stderr, "[device] %s\n", message.c_str());
  };
  edgefl::Client client(options);
  if (client.init(&error) != Status::kOk)
    return std::fprintf(stderr, "edgefl_torch_device: %s\n", error.c_str()), 1;
  const Status s = client.participate(
      trainer, rounds,
      [&](const edgefl::RoundResult& r) {
        std::printf(
            "shard %u/%u round %llu: %s; loss %.4f on %u samples; update %llu bytes (%s), model %llu bytes "
            "down\n",
            shard, shards, static_cast<unsigned long long>(r.round_id), edgefl::round_outcome_name(r.outcome),
            double(r.train_loss), r.samples, static_cast<unsigned long long>(r.update_bytes), r.codec.c_str(),
            static_cast<unsigned long long>(r.model_bytes));
        std::fflush(stdout);
      },
      &error);
  if (s != Status::kOk) {
    std::fprintf(stderr, "edgefl_torch_device: %s: %s\n", edgefl::status_name(s), error.c_str());
    return 1;
  }
  return 0;
}
