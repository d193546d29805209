// safetensors.h: the global model's file format, safetensors (https://huggingface.co/docs/safetensors),
// so that `safetensors.torch.load_file()` reads our models into a PyTorch state_dict as they are
// (tensor names and layouts come from edgefl/model.h: "conv1.weight" [16, 1, 3, 3], ...).
//
// Byte layout:
//
//   0        8                    8 + N                                     end
//   +--------+--------------------+-----------------------------------------+
//   | N (u64 | header: N bytes of | data: every tensor's float32 values,    |
//   | LE)    | UTF-8 JSON, padded | little-endian, row-major, back to back  |
//   |        | with ' ' to N % 8 0| (offsets below are relative to here)    |
//   +--------+--------------------+-----------------------------------------+
//
//   {"__metadata__":{"edgefl.model_spec":"cnn:16-32-32","format":"pt",...},
//    "conv1.weight":{"dtype":"F32","shape":[16,1,3,3],"data_offsets":[0,576]},
//    "conv1.bias":{"dtype":"F32","shape":[16],"data_offsets":[576,640]}, ...}
//
// encode_safetensors writes the tensors in the flat vector's order (so the data section IS the
// flat parameter vector, little-endian) and the metadata keys sorted.
#ifndef EDGEFL_SERVER_SAFETENSORS_H_
#define EDGEFL_SERVER_SAFETENSORS_H_

#include <stdint.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "edgefl/model.h"
#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/tensor_table.h"

namespace edgefl {
namespace server {

// The largest JSON header decode_safetensors accepts.
constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t(1) << 20;

// A model as a safetensors file holds it: its tensor table in the order of the tensors' data
// (which is how safetensors.torch.save_file lays them out), the flat float32 values in that order,
// and the file's __metadata__.
struct SafetensorsModel {
  std::vector<TensorDesc> tensors;
  std::vector<float> values;
  std::map<std::string, std::string> metadata;
};

// Reads any safetensors file whose tensors are F32, F16 or BF16 (any names, any shapes up to rank 8,
// PyTorch's row-major layouts), as the model a federation starts from (edgefl-server
// --initial-model). Checks everything decode_safetensors checks (header length and cap, strict
// JSON, offsets in bounds, non-overlapping and covering the data exactly, finite values) and
// validate_tensor_table (1..kMaxTensors tensors, names, dims, at most EDGEFL_MAX_DIMENSION
// parameters in all). *model is replaced on kOk only. Fails with a specific *error and:
// kTruncated, kCorruptPayload (bad JSON, an unknown dtype such as "I64", bad offsets),
// kNonFiniteInput (NaN or infinity, with the tensor and element), kDimensionTooLarge (more
// parameters than EDGEFL_MAX_DIMENSION), kInvalidSpec (a table validate_tensor_table refuses),
// kInvalidArgument (null model).
Status read_safetensors(Span<const uint8_t> file, SafetensorsModel* model, std::string* error);

// Serialises params (tensor_table_parameters(table) floats, in table order) as one F32 tensor per
// table entry, whatever the entry's dtype (the federated model keeps float32 precision), with
// metadata {"format": "pt", plus the caller's pairs, sorted}. *out is replaced on kOk only. Fails:
// kInvalidSpec (a table validate_tensor_table refuses), kInvalidArgument (null out, params of
// another size, a metadata key repeated or "format", text that is not UTF-8), kNonFiniteInput.
Status encode_safetensors(const std::vector<TensorDesc>& table, Span<const float> params,
                          const std::vector<std::pair<std::string, std::string>>& metadata,
                          std::vector<uint8_t>* out, std::string* error);

// Reads a file of the model `table` describes: the same tensor names and shapes, nothing more or
// less (dtypes may differ: F16 and BF16 are widened); writes the flat params in table order.
// Fails like read_safetensors, and kDimensionMismatch (a tensor missing, extra or of another shape).
Status decode_safetensors(Span<const uint8_t> file, const std::vector<TensorDesc>& table,
                          std::vector<float>* params, std::map<std::string, std::string>* metadata,
                          std::string* error);

// Serialises params (parameter_count(spec) floats) as one F32 tensor per tensor_info(spec, i)
// (its name, its shape), metadata {"format": "pt", "edgefl.model_spec": <format_model_spec>, plus
// the caller's pairs}. *out is replaced on kOk only. Fails: kInvalidSpec (invalid spec),
// kInvalidArgument (null out, params of another size, a metadata key repeated or one of the two
// reserved keys, text that is not UTF-8), kNonFiniteInput (a NaN or infinite parameter).
Status encode_safetensors(const ModelSpec& spec, Span<const float> params,
                          const std::vector<std::pair<std::string, std::string>>& metadata,
                          std::vector<uint8_t>* out, std::string* error);

// Strict reader of files written by encode_safetensors (and of other safetensors files with F32
// tensors only): header length <= kMaxSafetensorsHeaderBytes, JSON parsed by a small strict
// parser (objects without duplicate keys, strings with escapes, valid UTF-8, non-negative
// integers, arrays; nothing else), tensor offsets in bounds, non-overlapping, without gaps and
// covering the data exactly; tensors matched to the spec by name and shape; writes the flat
// params in spec order (*params and *metadata, which may be null, are replaced on kOk only).
// Fails with a specific *error and: kTruncated (shorter than 8 bytes, or than the header length
// says), kCorruptPayload (bad JSON, a dtype other than F32, bad or inconsistent offsets, a tensor
// field missing or unknown), kDimensionMismatch (a tensor missing, extra or of another shape, or a
// "edgefl.model_spec" metadata entry naming another model), kNonFiniteInput (NaN or infinity),
// kInvalidSpec, kInvalidArgument (null params).
Status decode_safetensors(Span<const uint8_t> file, const ModelSpec& spec, std::vector<float>* params,
                          std::map<std::string, std::string>* metadata, std::string* error);

}  // namespace server
}  // namespace edgefl

#endif  // EDGEFL_SERVER_SAFETENSORS_H_
