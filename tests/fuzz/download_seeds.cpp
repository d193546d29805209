// tests/fuzz/download_seeds.cpp: writes the seed corpus of download_fuzz: download streams as
// edgefl-server builds them (round/downlink.h): a whole bf16 model, and chains of patches of
// several downlink codecs.
#include <stdint.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "round/downlink.h"

namespace {

bool write(const std::string& path, const std::vector<uint8_t>& bytes, size_t size) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = fwrite(bytes.data(), 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  const size_t n = 2000;
  std::vector<float> server(n), public_model(n, 0.0f), scratch(n);
  uint64_t state = 777;
  const char* specs[] = {"bf16", "sparq:0.05", "q8", "topk:0.1+q4", "q2"};
  int written = 0;
  for (const char* text : specs) {
    edgefl::CodecSpec spec;
    if (edgefl::parse_codec_spec(text, &spec) != edgefl::Status::kOk) return 1;
    std::vector<uint8_t> workspace(edgefl::workspace_size(spec, n) + 1), out(edgefl::encoded_bound(spec, n));
    std::vector<uint8_t> stream(8 * out.size() + 64), decode_ws(1 << 20);
    size_t used = 0;
    const bool whole = std::string(text) == "bf16";
    for (int round = 1; round <= (whole ? 1 : 4); ++round) {
      for (size_t i = 0; i < n; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        server[i] += float((double(state >> 11) / 9007199254740992.0 - 0.5) * 0.02);
      }
      size_t size = 0;
      if (whole) {
        if (edgefl::encode(spec, {server.data(), n}, 0, {workspace.data(), workspace.size()},
                           {out.data(), out.size()}, &size) != edgefl::Status::kOk) {
          return 1;
        }
      } else if (edgefl::make_patch(spec, {server.data(), n}, {public_model.data(), n}, uint64_t(round),
                                    {scratch.data(), n}, {workspace.data(), workspace.size()},
                                    {out.data(), out.size()}, &size) != edgefl::Status::kOk ||
                 edgefl::apply_patch({out.data(), size}, {public_model.data(), n}, {scratch.data(), n},
                                     {decode_ws.data(), decode_ws.size()}) != edgefl::Status::kOk) {
        return 1;
      }
      if (edgefl::stream_append({out.data(), size}, {stream.data(), stream.size()}, &used) !=
          edgefl::Status::kOk) {
        return 1;
      }
    }
    if (!write(std::string(argv[1]) + "/" + std::to_string(written++), stream, used)) return 1;
  }
  return 0;
}
