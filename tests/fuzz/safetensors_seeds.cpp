// tests/fuzz/safetensors_seeds.cpp: writes the seed corpus of safetensors_fuzz: model files as
// edgefl-server writes them (a built-in model, a model of its own) and as PyTorch's
// safetensors.torch.save_file lays them out (F16 and BF16 tensors, a scalar, metadata).
#include <stdint.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "edgefl/model.h"
#include "safetensors.h"

namespace {

bool write(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return fclose(f) == 0 && ok;
}

std::vector<uint8_t> raw(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace edgefl;
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  ModelSpec spec;
  if (parse_model_spec("mlp:8-4-3", &spec) != Status::kOk) return 1;
  std::vector<float> values(parameter_count(spec));
  init_parameters(spec, 3, {values.data(), values.size()});
  std::vector<uint8_t> file;
  ok = ok && server::encode_safetensors(spec, {values.data(), values.size()}, {{"edgefl.round", "2"}}, &file,
                                        nullptr) == Status::kOk;
  ok = ok && write(dir + "/builtin.safetensors", file);
  const std::vector<TensorDesc> own = {{"embed.weight", {3, 2}, TensorDtype::kF32},
                                       {"head.bias", {2}, TensorDtype::kF32},
                                       {"scale", {}, TensorDtype::kF32}};
  const std::vector<float> own_values = {0.5f, -1, 2, 0, 1e-3f, -7, 3, 4, 0.25f};
  ok = ok && server::encode_safetensors(own, {own_values.data(), own_values.size()},
                                        {{"preprocessing", "x/255"}}, &file, nullptr) == Status::kOk;
  ok = ok && write(dir + "/own.safetensors", file);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
      R"("t":{"dtype":"F16","shape":[],"data_offsets":[8,10]},)"
      R"("b":{"dtype":"F32","shape":[1,2,1],"data_offsets":[10,18]}})";
  const std::vector<uint8_t> data = {0xC0, 0x3F, 0x00, 0xC0, 0,    0, 0, 0x80, 1,
                                     0,    0,    0,    0x80, 0x3F, 0, 0, 0,    0xC0};
  ok = ok && write(dir + "/mixed.safetensors", raw(header, data));
  return ok ? 0 : 1;
}
