// tests/fuzz/wire_seeds.cpp: writes the seed corpus of wire_fuzz into the directory given as the
// only argument: one valid frame per message type (tests/support/wire_samples.h), and variants
// with optional fields empty and the other nonce length. Run at build time; nothing is committed.
#include <stdint.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "edgefl/wire.h"
#include "support/wire_samples.h"

namespace w = edgefl::wire;
namespace samples = edgefl_test::wire_samples;

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  std::vector<w::Message> seeds = samples::all();
  w::TaskOffer offer = samples::task_offer();
  offer.model_spec.clear();
  offer.downlink_codec = "bf16";
  offer.uplink_codec = "randk:0.1+q8:shared=0.05";
  offer.round_nonce.resize(w::kRoundNonceShortBytes);
  seeds.push_back(offer);
  w::Commit commit = samples::commit();
  commit.metrics.clear();
  seeds.push_back(commit);
  w::Error error = samples::error();
  error.message.clear();
  seeds.push_back(error);
  w::ModelChunk chunk = samples::model_chunk();
  chunk.offset = chunk.total_bytes - chunk.data.size();
  seeds.push_back(chunk);
  seeds.push_back(samples::secure_task_offer());
  w::SecAggKeys keys = samples::secagg_keys();
  keys.keys.clear();
  seeds.push_back(keys);
  w::SecAggUnmaskRequest request = samples::secagg_unmask_request();
  request.dropped.clear();
  seeds.push_back(request);

  int written = 0;
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::vector<uint8_t> frame;
    if (w::encode(seeds[i], &frame) != edgefl::Status::kOk) {
      fprintf(stderr, "wire_seeds: seed %zu does not encode\n", i);
      return 1;
    }
    const std::string path = std::string(argv[1]) + "/" + w::message_type_name(w::message_type(seeds[i])) +
                             "-" + std::to_string(i) + ".bin";
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr || fwrite(frame.data(), 1, frame.size(), f) != frame.size() || fclose(f) != 0) {
      fprintf(stderr, "wire_seeds: cannot write %s\n", path.c_str());
      return 1;
    }
    ++written;
  }
  printf("wire_seeds: %d seeds in %s\n", written, argv[1]);
  return 0;
}
