// server/src/public_model.h: the server's half of the downlink (sdk/src/round/downlink.h): the
// public model every device holds, the patches that moved it, their files, and the download
// stream each device gets.
//
// Files (in the state directory, written atomically before the model version is recorded):
//   public-vNNNNNN.bin  the public model of version N, one dense bf16 edgefl encoding (exact: the
//                       model is on the bf16 grid); what a device without a usable model downloads
//   patch-vNNNNNN.bin   the patch that made version N from version N-1 (absent for version 1)
// The last kPatchesKept patches stay in memory; a device further behind gets the whole model.
//
// Not thread-safe (the RoundManager's thread only).
#ifndef EDGEFL_SERVER_PUBLIC_MODEL_H_
#define EDGEFL_SERVER_PUBLIC_MODEL_H_

#include <stdint.h>

#include <map>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "edgefl/span.h"
#include "edgefl/status.h"
#include "edgefl/wire.h"

namespace edgefl::server {

class PublicModel {
 public:
  static constexpr uint64_t kPatchesKept = 64;

  // One download: TaskOffer.base_model_version, the stream's size and SHA-256. The stream itself
  // is never materialized: read_download() copies its bytes out of the patches and the whole
  // model, so a device asking for every base costs the server 48 bytes per base, not a copy.
  struct Download {
    uint64_t base = 0;
    uint64_t bytes = 0;
    wire::Digest digest{};
  };

  // `patch_codec`: the downlink codec of every patch; `n` parameters; `seeded`: version 1 is
  // the initial model a device can build from the model spec and the seed (TaskOffer
  // initial_model_seed), so a device with no model may start from version 1.
  Status init(const CodecSpec& patch_codec, size_t n, bool seeded, std::string* error);

  // Version `version` from the server model alone: the public model is the server model on the
  // bf16 grid, and no patch is known (devices behind it get the whole model).
  Status reset(Span<const float> server_model, uint64_t version, std::string* error);

  // Version `version` from its files in `dir`: the public model, and the patches of the versions
  // before it as far back as they are all present and valid (kPatchesKept at most). Without a
  // readable public file: reset(server_model, version), whose public file is written and whose
  // patch file is removed (the chain of old patches ends there). Fails only on that write.
  Status load(const std::string& dir, uint64_t version, Span<const float> server_model, std::string* error);

  // The next version's candidate: patch = C(next_server_model - public) with `seed`, then the
  // public model moved by it. Changes nothing current; kNonFiniteInput if the result would not
  // be finite. Deterministic: the same inputs give the same bytes.
  Status prepare_next(Span<const float> next_server_model, uint64_t seed, std::string* error);
  // Writes the current version's public file (and its patch, if it has one) into `dir`.
  Status write_current(const std::string& dir, std::string* error) const;
  // Writes the candidate's files as version `version` (the current one + 1) into `dir`.
  Status write_candidate(const std::string& dir, uint64_t version, std::string* error) const;
  // The candidate becomes the current version (once its files and record are durable).
  void commit_candidate();

  // The download for a device that holds `held` (0: none): nothing if it is current, the patches
  // since `held` (or since version 1 when seeded and held is 0) if they are all known and smaller
  // than the whole model, else the whole model. `needs_whole`: always the whole model.
  const Download& download_for(uint64_t held, bool needs_whole);
  // The download from `base` (a ModelRequest's), or null if this server does not serve it: the
  // whole model (0), nothing (the current version), or patches it holds that are smaller than the
  // whole model.
  const Download* download_from(uint64_t base);
  // Appends bytes [offset, offset + length) of the download from `base` to *out (clamped to its
  // end). False if that download is not served or offset is past its end.
  bool read_download(uint64_t base, uint64_t offset, uint64_t length, std::vector<uint8_t>* out);

  uint64_t version() const { return version_; }
  Span<const float> model() const { return {public_.data(), public_.size()}; }
  const wire::Digest& digest() const { return digest_; }

 private:
  Status set_current(uint64_t version, std::string* error);  // digest, whole stream, caches
  bool chain_known(uint64_t from) const;                     // patches from+1 .. version_ in memory
  // Calls piece(bytes) for each piece of the stream from `base` in order (prefixes included).
  template <typename F>
  void for_each_piece(uint64_t base, F piece) const;
  Status write_files(const std::string& dir, uint64_t version, Span<const uint8_t> whole,
                     Span<const uint8_t> patch, std::string* error) const;

  CodecSpec codec_{};
  CodecSpec bf16_{};
  size_t n_ = 0;
  bool seeded_ = false;
  uint64_t version_ = 0;
  std::vector<float> public_;
  wire::Digest digest_{};
  std::vector<uint8_t> whole_;                        // bf16 encoding of public_
  std::map<uint64_t, std::vector<uint8_t>> patches_;  // version -> the patch that made it
  std::map<uint64_t, Download> downloads_;            // by base, for the current version
  // The candidate of the next version, and scratch.
  std::vector<float> next_, scratch_;
  std::vector<uint8_t> next_patch_, next_whole_, workspace_, decode_workspace_;
  size_t next_patch_size_ = 0, next_whole_size_ = 0;
  bool next_ready_ = false;
};

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_PUBLIC_MODEL_H_
