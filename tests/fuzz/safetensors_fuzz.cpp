// tests/fuzz/safetensors_fuzz.cpp: any bytes as a model file (server/src/safetensors.h), the way
// edgefl-server reads an --initial-model. Properties checked on every input:
//  - read_safetensors never reads out of bounds (ASan), never crashes, and on failure leaves its
//    output as it was;
//  - an accepted file is a valid model (validate_tensor_table) whose values are all finite, and
//    writing it back (F32) and reading that by its table gives the same values, bit for bit.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <utility>
#include <vector>

#include "edgefl/tensor_table.h"
#include "safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgefl;
  server::SafetensorsModel model;
  model.values = {42.0f};
  std::string error;
  if (server::read_safetensors({data, size}, &model, &error) != Status::kOk) {
    if (model.values.size() != 1 || model.values[0] != 42.0f || !model.tensors.empty()) abort();
    if (error.empty()) abort();  // every refusal says why
    return 0;
  }
  if (validate_tensor_table(model.tensors, nullptr) != Status::kOk) abort();
  if (tensor_table_parameters(model.tensors) != model.values.size()) abort();
  for (float v : model.values) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u) abort();
  }
  std::vector<std::pair<std::string, std::string>> metadata;
  for (const auto& [key, value] : model.metadata) {
    if (key != "format") metadata.emplace_back(key, value);
  }
  std::vector<uint8_t> written;
  if (server::encode_safetensors(model.tensors, {model.values.data(), model.values.size()}, metadata,
                                 &written, &error) != Status::kOk) {
    abort();
  }
  std::vector<float> again;
  if (server::decode_safetensors({written.data(), written.size()}, model.tensors, &again, nullptr, &error) !=
          Status::kOk ||
      again.size() != model.values.size() ||
      memcmp(again.data(), model.values.data(), 4 * again.size()) != 0) {
    abort();
  }
  return 0;
}
