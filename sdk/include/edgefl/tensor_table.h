// edgefl/tensor_table.h: a model defined by its tensors, the way PyTorch and safetensors see it.
//
// The flat parameter vector every codec compresses and the server averages is the tensors of the
// table, in table order, each row-major, back to back. A built-in spec (edgefl/model.h) is a
// shorthand for one table (tensor_table_from_spec); a model brought from PyTorch is a table read
// from its .safetensors file (edgefl-server --initial-model). The server sends the table with
// every task (wire::TaskOffer::tensors); a device's trainer checks it against its own model.
//
// Hosted C++17 (std::string, std::vector); part of edgefl::wire.
#ifndef EDGEFL_TENSOR_TABLE_H_
#define EDGEFL_TENSOR_TABLE_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "edgefl/model.h"
#include "edgefl/status.h"

namespace edgefl {

// How a tensor was stored in the model file it came from. Devices always train and exchange
// float32; the dtype tells a trainer what precision the model's author chose.
enum class TensorDtype : uint8_t {
  kF32 = 1,
  kF16 = 2,   // IEEE 754 half
  kBf16 = 3,  // bfloat16
};

// Limits of a table (checked by validate_tensor_table and by the wire protocol).
constexpr size_t kMaxTensors = 1024;          // tensors in one model
constexpr size_t kMaxTensorNameChars = 128;   // printable ASCII, no space
constexpr size_t kMaxTensorTableRank = 8;     // dimensions of one tensor (0: a scalar)
constexpr uint64_t kMaxTensorDim = 1u << 30;  // each dimension in [1, 2^30]

struct TensorDesc {
  std::string name;             // "conv1.weight", "layers.0.attn.q_proj.bias": unique in a table
  std::vector<uint64_t> shape;  // outermost first; empty: a scalar (one element)
  TensorDtype dtype = TensorDtype::kF32;
};

bool operator==(const TensorDesc& a, const TensorDesc& b);
inline bool operator!=(const TensorDesc& a, const TensorDesc& b) {
  return !(a == b);
}

// "F32", "F16", "BF16" (the safetensors names); "?" for anything else.
const char* tensor_dtype_name(TensorDtype dtype);

// Elements of one tensor: the product of its shape (1 for a scalar); 0 if a dimension is 0 or the
// product passes 2^62.
uint64_t tensor_elements(const TensorDesc& tensor);

// Elements of the whole table (the flat vector's length); 0 if any tensor has 0 elements or the sum
// passes 2^62.
uint64_t tensor_table_parameters(const std::vector<TensorDesc>& table);

// kOk if the table is one the SDK accepts: 1..kMaxTensors tensors, names of 1..kMaxTensorNameChars
// printable ASCII characters without spaces, unique; rank <= kMaxTensorTableRank; every dimension in
// [1, kMaxTensorDim]; a known dtype; in all 1..EDGEFL_MAX_DIMENSION elements. Otherwise
// kInvalidSpec, with the first offence in *error (if not null): "tensor 3 (\"fc.weight\"): ...".
[[nodiscard]] Status validate_tensor_table(const std::vector<TensorDesc>& table, std::string* error);

// The table of a built-in model (edgefl/model.h's tensors, F32). Fails: kInvalidSpec.
[[nodiscard]] Status tensor_table_from_spec(const ModelSpec& spec, std::vector<TensorDesc>* table);

// One line per tensor, "name F32 [16,1,3,3]", for logs and error messages (at most `max_lines`
// lines, then "... and K more").
std::string describe_tensor_table(const std::vector<TensorDesc>& table, size_t max_lines = 16);

}  // namespace edgefl

#endif  // EDGEFL_TENSOR_TABLE_H_
