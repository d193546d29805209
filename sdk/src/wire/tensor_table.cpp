// tensor_table.cpp: edgefl/tensor_table.h.
#include "edgefl/tensor_table.h"

#include <algorithm>

#include "edgefl/config.h"

namespace edgefl {

bool operator==(const TensorDesc& a, const TensorDesc& b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype;
}

const char* tensor_dtype_name(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32: return "F32";
    case TensorDtype::kF16: return "F16";
    case TensorDtype::kBf16: return "BF16";
  }
  return "?";
}

namespace {
constexpr uint64_t kElementLimit = uint64_t{1} << 62;

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}
}  // namespace

uint64_t tensor_elements(const TensorDesc& tensor) {
  uint64_t elements = 1;
  for (uint64_t d : tensor.shape) {
    if (d == 0 || elements > kElementLimit / d) return 0;
    elements *= d;
  }
  return elements;
}

uint64_t tensor_table_parameters(const std::vector<TensorDesc>& table) {
  uint64_t total = 0;
  for (const TensorDesc& t : table) {
    const uint64_t e = tensor_elements(t);
    if (e == 0 || total > kElementLimit - e) return 0;
    total += e;
  }
  return total;
}

Status validate_tensor_table(const std::vector<TensorDesc>& table, std::string* error) {
  auto fail = [&](size_t i, const std::string& what) {
    if (error != nullptr) {
      *error = i == SIZE_MAX
                   ? what
                   : "tensor " + std::to_string(i) + " (\"" + table[i].name.substr(0, 64) + "\"): " + what;
    }
    return Status::kInvalidSpec;
  };
  if (table.empty()) return fail(SIZE_MAX, "the model has no tensors");
  if (table.size() > kMaxTensors) {
    return fail(SIZE_MAX, "the model has " + std::to_string(table.size()) + " tensors; at most " +
                              std::to_string(kMaxTensors) + " are supported");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const TensorDesc& t = table[i];
    if (t.name.empty() || t.name.size() > kMaxTensorNameChars) {
      return fail(i, "a name needs 1 to " + std::to_string(kMaxTensorNameChars) + " characters");
    }
    for (char c : t.name) {
      if (c <= ' ' || c > '~') return fail(i, "a name is printable ASCII without spaces");
    }
    if (t.shape.size() > kMaxTensorTableRank) {
      return fail(
          i, "rank " + std::to_string(t.shape.size()) + " exceeds " + std::to_string(kMaxTensorTableRank));
    }
    for (uint64_t d : t.shape) {
      if (d == 0 || d > kMaxTensorDim)
        return fail(i, "shape " + shape_text(t.shape) + " has a dimension outside [1, 2^30]");
    }
    if (t.dtype != TensorDtype::kF32 && t.dtype != TensorDtype::kF16 && t.dtype != TensorDtype::kBf16) {
      return fail(i, "unknown dtype " + std::to_string(unsigned(t.dtype)));
    }
    const uint64_t e = tensor_elements(t);
    if (e == 0 || e > EDGEFL_MAX_DIMENSION || total + e > EDGEFL_MAX_DIMENSION) {
      return fail(i, "the model would exceed EDGEFL_MAX_DIMENSION (" +
                         std::to_string(uint64_t{EDGEFL_MAX_DIMENSION}) + ") parameters");
    }
    total += e;
  }
  std::vector<const std::string*> names;
  names.reserve(table.size());
  for (const TensorDesc& t : table) names.push_back(&t.name);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i) {
    if (*names[i] == *names[i - 1]) return fail(SIZE_MAX, "tensor name \"" + *names[i] + "\" appears twice");
  }
  return Status::kOk;
}

Status tensor_table_from_spec(const ModelSpec& spec, std::vector<TensorDesc>* table) {
  if (table == nullptr) return Status::kInvalidArgument;
  const size_t count = tensor_count(spec);
  if (count == 0) return Status::kInvalidSpec;
  std::vector<TensorDesc> out(count);
  for (size_t i = 0; i < count; ++i) {
    TensorInfo info;
    EDGEFL_RETURN_IF_ERROR(tensor_info(spec, i, &info));
    out[i].name = info.name;
    out[i].shape.assign(info.shape, info.shape + info.rank);
    out[i].dtype = TensorDtype::kF32;
  }
  *table = std::move(out);
  return Status::kOk;
}

std::string describe_tensor_table(const std::vector<TensorDesc>& table, size_t max_lines) {
  std::string s;
  for (size_t i = 0; i < table.size(); ++i) {
    if (i == max_lines) {
      s += "... and " + std::to_string(table.size() - i) + " more\n";
      break;
    }
    s += table[i].name + " " + tensor_dtype_name(table[i].dtype) + " " + shape_text(table[i].shape) + "\n";
  }
  return s;
}

}  // namespace edgefl
