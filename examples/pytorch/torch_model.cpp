// torch_model.cpp: torch_model.h.
#include "torch_model.h"

#include <cstring>
#include <map>

namespace edgefl_example {

edgefl::Status TorchModel::load(const std::string& path, std::string* error) {
  try {
    module_ = torch::jit::load(path);
  } catch (const std::exception& e) {
    *error = "cannot load the TorchScript module " + path + ": " + e.what();
    return edgefl::Status::kIoError;
  }
  return edgefl::Status::kOk;
}

edgefl::Status TorchModel::bind(const std::vector<edgefl::TensorDesc>& table, std::string* error) {
  std::map<std::string, at::Tensor> by_name;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) by_name.emplace(p.name, p.value);
  std::vector<at::Tensor> bound;
  size_t count = 0;
  for (const edgefl::TensorDesc& t : table) {
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      *error = "the task's tensor '" + t.name + "' is not a parameter of the module";
      return edgefl::Status::kInvalidSpec;
    }
    const auto sizes = it->second.sizes();
    std::vector<uint64_t> shape(sizes.begin(), sizes.end());
    if (shape != t.shape) {
      *error = "tensor '" + t.name + "' has another shape in the module than in the task";
      return edgefl::Status::kInvalidSpec;
    }
    if (it->second.scalar_type() != at::kFloat || !it->second.is_contiguous()) {
      *error = "parameter '" + t.name + "' is not a contiguous float32 tensor";
      return edgefl::Status::kInvalidSpec;
    }
    bound.push_back(it->second);
    count += size_t(it->second.numel());
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    *error = "the module's parameter '" + by_name.begin()->first + "' is not in the task's tensor table";
    return edgefl::Status::kInvalidSpec;
  }
  bound_ = std::move(bound);
  count_ = count;
  return edgefl::Status::kOk;
}

void TorchModel::set_parameters(edgefl::Span<const float> flat) {
  torch::NoGradGuard no_grad;
  size_t offset = 0;
  for (at::Tensor& p : bound_) {
    const size_t n = size_t(p.numel());
    std::memcpy(p.data_ptr<float>(), flat.data() + offset, n * sizeof(float));
    offset += n;
  }
}

void TorchModel::get_parameters(edgefl::Span<float> flat) const {
  size_t offset = 0;
  for (const at::Tensor& p : bound_) {
    const at::Tensor c = p.detach().contiguous();
    const size_t n = size_t(c.numel());
    std::memcpy(flat.data() + offset, c.data_ptr<float>(), n * sizeof(float));
    offset += n;
  }
}

}  // namespace edgefl_example
