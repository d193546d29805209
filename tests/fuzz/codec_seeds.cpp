// tests/fuzz/codec_seeds.cpp: writes the seed corpus of codec_fuzz: one encoding per codec family
// (dense, sparse with each index coding, entropy-coded, skc, cs) of a small gradient-like vector.
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "edgefl/codec.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  const size_t n = 3000;
  std::vector<float> x(n);
  uint64_t state = 12345;
  for (size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = double(state >> 11) / 9007199254740992.0;
    x[i] = float((u - 0.5) * 0.01 * (1.0 + 10.0 * double(i % 97 == 0)));
  }
  for (size_t i = 0; i < n; i += 7) x[i] = 0.0f;  // some zeros for skc's dense mode
  const char* specs[] = {"bf16",
                         "fp16",
                         "q4",
                         "q4:ans",
                         "bf16:ans",
                         "q8:shared=0.001",
                         "q8:shared=0.001,clip,ans",
                         "hq2",
                         "qsgd",
                         "qsgd:s=100,bucket=97",
                         "q4:shared=0.01,clip",
                         "tern",
                         "sign",
                         "topk:0.05+q4",
                         "topk:0.05+q4:sm",
                         "randk:0.1+qsgd",
                         "topk:0.05,idx=rice+q8",
                         "topk:0.05,idx=blockrice+q8",
                         "sparq:0.05",
                         "thresh:0.004+fp16",
                         "randk:0.1+q8",
                         "skc",
                         "topk:0.1+skc",
                         "topk:0.02+skc:bins=16,groups=2,rows=1,cols=1",
                         "cs:cells=0.2,rows=3,k=30,step=0.00001",
                         "cs:cols=64,rows=5,top=0.01,step=0.001"};
  int index = 0;
  for (const char* text : specs) {
    edgefl::CodecSpec spec;
    if (edgefl::parse_codec_spec(text, &spec) != edgefl::Status::kOk) {
      fprintf(stderr, "bad seed spec %s\n", text);
      return 1;
    }
    std::vector<uint8_t> ws(edgefl::workspace_size(spec, n) + 1), out(edgefl::encoded_bound(spec, n));
    size_t written = 0;
    if (edgefl::encode(spec, {x.data(), n}, 7, {ws.data(), ws.size()}, {out.data(), out.size()}, &written) !=
        edgefl::Status::kOk) {
      fprintf(stderr, "encode failed for %s\n", text);
      return 1;
    }
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(index++);
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr || fwrite(out.data(), 1, written, f) != written || fclose(f) != 0) {
      fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
