// torch_model.h: a TorchScript module (scripted from the user's nn.Module, examples/pytorch/model.py)
// as edgefl sees a model: its named parameters, in the order of the task's tensor table
// (edgefl/tensor_table.h), as one flat float32 vector.
#ifndef EDGEFL_EXAMPLES_TORCH_MODEL_H_
#define EDGEFL_EXAMPLES_TORCH_MODEL_H_

#include <torch/script.h>

#include <string>
#include <vector>

#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/tensor_table.h"

namespace edgefl_example {

class TorchModel {
 public:
  // Loads a TorchScript file (torch.jit.save). Fails: kIoError with the reason.
  edgefl::Status load(const std::string& path, std::string* error);

  // Binds the module's parameters to `table`, by name: every tensor of the table must be a
  // parameter of the module with the same shape, and every parameter must be in the table.
  // Fails: kInvalidSpec with the first difference.
  edgefl::Status bind(const std::vector<edgefl::TensorDesc>& table, std::string* error);

  // The flat vector (the bound table's order) into the parameters, and back.
  void set_parameters(edgefl::Span<const float> flat);
  void get_parameters(edgefl::Span<float> flat) const;

  size_t parameter_count() const { return count_; }
  torch::jit::Module& module() { return module_; }
  std::vector<at::Tensor> parameters() const { return bound_; }

 private:
  torch::jit::Module module_;
  std::vector<at::Tensor> bound_;  // the module's parameters in table order
  size_t count_ = 0;
};

}  // namespace edgefl_example

#endif  // EDGEFL_EXAMPLES_TORCH_MODEL_H_
