#include "public_model.h"

#include <errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "model_files.h"
#include "round/downlink.h"
#include "tls/digest.h"

namespace edgefl::server {
namespace {

std::string versioned_name(const char* prefix, uint64_t version) {
  char name[48];
  std::snprintf(name, sizeof name, "%s-v%06llu.bin", prefix, static_cast<unsigned long long>(version));
  return name;
}

}  // namespace

Status PublicModel::init(const CodecSpec& patch_codec, size_t n, bool seeded, std::string* error) {
  codec_ = patch_codec;
  n_ = n;
  seeded_ = seeded;
  if (parse_codec_spec("bf16", &bf16_) != Status::kOk) {
    *error = "bf16 codec unavailable";
    return Status::kInvalidSpec;
  }
  public_.assign(n, 0.0f);
  next_.assign(n, 0.0f);
  scratch_.assign(n, 0.0f);
  next_patch_.resize(encoded_bound(codec_, n));
  next_whole_.resize(encoded_bound(bf16_, n));
  workspace_.resize(std::max(workspace_size(codec_, n), workspace_size(bf16_, n)));
  return Status::kOk;
}

Status PublicModel::set_current(uint64_t version, std::string* error) {
  version_ = version;
  const tls::Sha256Digest d = tls::sha256_of_floats({public_.data(), n_});
  std::memcpy(digest_.data(), d.data(), digest_.size());
  whole_.resize(encoded_bound(bf16_, n_));
  size_t size = 0;
  const Status s = encode(bf16_, Span<const float>(public_.data(), n_), 0,
                          {workspace_.data(), workspace_.size()}, {whole_.data(), whole_.size()}, &size);
  if (s != Status::kOk) {
    *error = std::string("encoding the public model: ") + status_name(s);
    return s;
  }
  whole_.resize(size);
  downloads_.clear();
  while (!patches_.empty() && patches_.begin()->first + kPatchesKept <= version_)
    patches_.erase(patches_.begin());
  return Status::kOk;
}

Status PublicModel::reset(Span<const float> server_model, uint64_t version, std::string* error) {
  std::copy(server_model.begin(), server_model.end(), public_.begin());
  if (round_to_bf16_grid({public_.data(), n_}) != Status::kOk) {
    *error = "the model is not finite in bf16";
    return Status::kNonFiniteInput;
  }
  patches_.clear();
  return set_current(version, error);
}

Status PublicModel::load(const std::string& dir, uint64_t version, Span<const float> server_model,
                         std::string* error) {
  std::vector<uint8_t> file;
  std::string why;
  const uint64_t max_bytes = uint64_t{64} + 4 * uint64_t{n_};
  if (read_file(dir + "/" + versioned_name("public", version), max_bytes, &file, &why) != Status::kOk ||
      apply_whole_model({file.data(), file.size()}, {public_.data(), n_}) != Status::kOk) {
    // Missing or damaged (or state from before the public model existed): a new history starts
    // here. Its file replaces the old one, and the patch into this version goes, so that the
    // patches of the old history are never chained to the new one after a later restart.
    EDGEFL_RETURN_IF_ERROR(reset(server_model, version, error));
    const std::string patch = dir + "/" + versioned_name("patch", version);
    if (std::remove(patch.c_str()) != 0 && errno != ENOENT) {
      *error = "cannot remove " + patch + ": " + std::strerror(errno);
      return Status::kIoError;
    }
    return write_current(dir, error);
  }
  patches_.clear();
  // The patches before it, newest first, while they are present and verify.
  for (uint64_t v = version; v >= 2 && v + kPatchesKept > version; --v) {
    std::vector<uint8_t> patch;
    if (read_file(dir + "/" + versioned_name("patch", v), max_bytes, &patch, &why) != Status::kOk) break;
    EncodedInfo info;
    const size_t ws = stream_decode_workspace({patch.data(), patch.size()});
    decode_workspace_.resize(std::max(decode_workspace_.size(), ws));
    if (verify({patch.data(), patch.size()}, {decode_workspace_.data(), decode_workspace_.size()}, &info) !=
            Status::kOk ||
        info.n != n_) {
      break;
    }
    patches_[v] = std::move(patch);
  }
  return set_current(version, error);
}

Status PublicModel::prepare_next(Span<const float> next_server_model, uint64_t seed, std::string* error) {
  next_ready_ = false;
  size_t size = 0;
  Status s =
      make_patch(codec_, next_server_model, {public_.data(), n_}, seed, {scratch_.data(), n_},
                 {workspace_.data(), workspace_.size()}, {next_patch_.data(), next_patch_.size()}, &size);
  if (s == Status::kOk) {
    const Span<const uint8_t> patch{next_patch_.data(), size};
    decode_workspace_.resize(std::max(decode_workspace_.size(), stream_decode_workspace(patch)));
    std::copy(public_.begin(), public_.end(), next_.begin());
    s = apply_patch(patch, {next_.data(), n_}, {scratch_.data(), n_},
                    {decode_workspace_.data(), decode_workspace_.size()});
  }
  if (s != Status::kOk) {
    *error = std::string("the downlink patch (") + status_name(s) + ")";
    return s;
  }
  next_patch_size_ = size;
  size_t whole = 0;
  s = encode(bf16_, Span<const float>(next_.data(), n_), 0, {workspace_.data(), workspace_.size()},
             {next_whole_.data(), next_whole_.size()}, &whole);
  if (s != Status::kOk) {
    *error = std::string("encoding the next public model: ") + status_name(s);
    return s;
  }
  next_whole_size_ = whole;
  next_ready_ = true;
  return Status::kOk;
}

Status PublicModel::write_files(const std::string& dir, uint64_t version, Span<const uint8_t> whole,
                                Span<const uint8_t> patch, std::string* error) const {
  if (patch.size() != 0) {
    EDGEFL_RETURN_IF_ERROR(write_file_atomic(dir, versioned_name("patch", version), patch, error));
  }
  return write_file_atomic(dir, versioned_name("public", version), whole, error);
}

Status PublicModel::write_current(const std::string& dir, std::string* error) const {
  auto it = patches_.find(version_);
  const Span<const uint8_t> patch = it == patches_.end()
                                        ? Span<const uint8_t>()
                                        : Span<const uint8_t>(it->second.data(), it->second.size());
  return write_files(dir, version_, {whole_.data(), whole_.size()}, patch, error);
}

Status PublicModel::write_candidate(const std::string& dir, uint64_t version, std::string* error) const {
  if (!next_ready_ || version != version_ + 1) {
    *error = "no downlink candidate for version " + std::to_string(version);
    return Status::kInvalidArgument;
  }
  return write_files(dir, version, {next_whole_.data(), next_whole_size_},
                     {next_patch_.data(), next_patch_size_}, error);
}

void PublicModel::commit_candidate() {
  public_.swap(next_);
  patches_[version_ + 1].assign(next_patch_.begin(),
                                next_patch_.begin() + static_cast<ptrdiff_t>(next_patch_size_));
  next_ready_ = false;
  std::string error;
  (void)set_current(version_ + 1, &error);  // cannot fail: the candidate encoded before
}

bool PublicModel::chain_known(uint64_t from) const {
  if (from == 0 || from >= version_) return false;
  for (uint64_t v = from + 1; v <= version_; ++v) {
    if (patches_.count(v) == 0) return false;
  }
  return true;
}

template <typename F>
void PublicModel::for_each_piece(uint64_t base, F piece) const {
  auto framed = [&](const std::vector<uint8_t>& encoding) {
    const uint32_t length = static_cast<uint32_t>(encoding.size());
    const uint8_t prefix[kStreamPrefixBytes] = {uint8_t(length), uint8_t(length >> 8), uint8_t(length >> 16),
                                                uint8_t(length >> 24)};
    piece(Span<const uint8_t>(prefix, kStreamPrefixBytes));
    piece(Span<const uint8_t>(encoding.data(), encoding.size()));
  };
  if (base == 0) {
    framed(whole_);
    return;
  }
  for (uint64_t v = base + 1; v <= version_; ++v) framed(patches_.at(v));
}

const PublicModel::Download* PublicModel::download_from(uint64_t base) {
  auto it = downloads_.find(base);
  if (it != downloads_.end()) return &it->second;
  const uint64_t whole_bytes = kStreamPrefixBytes + whole_.size();
  Download d;
  d.base = base;
  if (base != 0 && base != version_) {
    if (!chain_known(base)) return nullptr;
    for (uint64_t v = base + 1; v <= version_; ++v) d.bytes += kStreamPrefixBytes + patches_.at(v).size();
    if (d.bytes >= whole_bytes) return nullptr;  // offered whole instead: never served as patches
  } else if (base == 0) {
    d.bytes = whole_bytes;
  }
  tls::Sha256 hash;
  for_each_piece(base, [&](Span<const uint8_t> bytes) { hash.update(bytes); });
  const tls::Sha256Digest digest = hash.finish();
  std::memcpy(d.digest.data(), digest.data(), d.digest.size());
  return &downloads_.emplace(base, d).first->second;
}

bool PublicModel::read_download(uint64_t base, uint64_t offset, uint64_t length, std::vector<uint8_t>* out) {
  const Download* d = download_from(base);
  if (d == nullptr || offset >= d->bytes) return false;
  const uint64_t end = std::min(d->bytes, offset + length);
  uint64_t at = 0;  // stream offset of the current piece
  for_each_piece(base, [&](Span<const uint8_t> bytes) {
    const uint64_t lo = std::max(at, offset), hi = std::min<uint64_t>(at + bytes.size(), end);
    if (lo < hi) out->insert(out->end(), bytes.data() + (lo - at), bytes.data() + (hi - at));
    at += bytes.size();
  });
  return true;
}

const PublicModel::Download& PublicModel::download_for(uint64_t held, bool needs_whole) {
  const Download& whole = *download_from(0);
  if (needs_whole) return whole;
  if (held == version_) return *download_from(version_);
  const uint64_t from = held == 0 && seeded_ ? 1 : held;
  if (from == version_) return *download_from(version_);  // version 1, built from the seed
  if (!chain_known(from)) return whole;
  const Download* chain = download_from(from);
  return chain != nullptr ? *chain : whole;
}

}  // namespace edgefl::server
