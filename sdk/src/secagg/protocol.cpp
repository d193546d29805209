#include "secagg/protocol.h"

#include <string.h>

#include <algorithm>
#include <functional>

#include <mbedtls/platform_util.h>

#include "core/bitio.h"

namespace edgefl {
namespace secagg {
namespace {

constexpr char kShareKeyLabel[] = "edgefl secagg v1 share key";
constexpr char kPairMaskLabel[] = "edgefl secagg v1 pair mask";
constexpr char kAadLabel[] = "edgefl secagg v1 shares";
constexpr char kCommitmentLabel[] = "edgefl secagg v1 seed commitment";
constexpr uint8_t kSelfMaskNonce[kAeadNonceBytes] = {'e', 'd', 'g', 'e', 'f', 'l',
                                                     ' ', 's', 'e', 'l', 'f', 0};
constexpr uint8_t kPairMaskNonce[kAeadNonceBytes] = {'e', 'd', 'g', 'e', 'f', 'l',
                                                     ' ', 'p', 'a', 'i', 'r', 0};

uint32_t word_mask(uint32_t bits) {
  return bits == 32 ? 0xffffffffu : (1u << bits) - 1;
}

// HKDF(salt = round nonce, X25519(own_secret, peer_public), info = label | round id | lower
// index | higher index): the same key on both sides of the pair (a nonce tells directions apart).
template <size_t N>
Status pair_key(const RoundParameters& p, const char (&label)[N], const Key32& own_secret,
                const Key32& peer_public, uint32_t a, uint32_t b, Key32* out) {
  Key32 shared;
  Status status = x25519_agree(own_secret, peer_public, &shared);
  uint8_t info[N - 1 + 16];
  memcpy(info, label, N - 1);
  store_le64(info + N - 1, p.round_id);
  store_le32(info + N - 1 + 8, std::min(a, b));
  store_le32(info + N - 1 + 12, std::max(a, b));
  if (status == Status::kOk) {
    status = hkdf_sha256({p.round_nonce.data(), p.round_nonce.size()}, {shared.data(), shared.size()},
                         {info, sizeof info}, out->data(), out->size());
  }
  mbedtls_platform_zeroize(shared.data(), shared.size());
  return status;
}

void share_nonce(uint32_t from, uint32_t to, uint8_t nonce[kAeadNonceBytes]) {
  store_le32(nonce, from);
  store_le32(nonce + 4, to);
  memcpy(nonce + 8, "shr1", 4);
}

constexpr size_t kAadBytes = sizeof kAadLabel - 1 + 8 + 32 + 8;
void share_aad(const RoundParameters& p, uint32_t from, uint32_t to, uint8_t aad[kAadBytes]) {
  memcpy(aad, kAadLabel, sizeof kAadLabel - 1);
  uint8_t* at = aad + sizeof kAadLabel - 1;
  store_le64(at, p.round_id);
  memcpy(at + 8, p.round_nonce.data(), 32);
  store_le32(at + 40, from);
  store_le32(at + 44, to);
}

// SHA-256(label | round id | round nonce | device | seed): binds the seed to its round and owner.
Status seed_commitment_of(const RoundParameters& p, uint32_t device, const Secret& seed, Key32* out) {
  uint8_t ids[12];
  store_le64(ids, p.round_id);
  store_le32(ids + 8, device);
  return sha256_of({{reinterpret_cast<const uint8_t*>(kCommitmentLabel), sizeof kCommitmentLabel - 1},
                    {ids, sizeof ids},
                    {p.round_nonce.data(), p.round_nonce.size()},
                    {seed.data(), seed.size()}},
                   out);
}

// acc[i] = acc[i] +- PRG(seed, nonce)[i] mod 2^bits, in blocks.
Status apply_stream(Span<uint32_t> acc, const Key32& seed, const uint8_t nonce[kAeadNonceBytes],
                    uint32_t bits, bool subtract) {
  MaskStream stream;
  EDGEFL_RETURN_IF_ERROR(stream.start(seed, nonce, bits));
  const uint32_t mask = word_mask(bits);
  uint32_t block[1024];
  for (size_t at = 0; at < acc.size(); at += 1024) {
    const size_t count = std::min<size_t>(1024, acc.size() - at);
    EDGEFL_RETURN_IF_ERROR(stream.next(block, count));
    uint32_t* out = acc.data() + at;
    if (subtract) {
      for (size_t i = 0; i < count; ++i) out[i] = (out[i] - block[i]) & mask;
    } else {
      for (size_t i = 0; i < count; ++i) out[i] = (out[i] + block[i]) & mask;
    }
  }
  return Status::kOk;
}

bool sorted_unique(const std::vector<uint32_t>& v) {
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] <= v[i - 1]) return false;
  }
  return true;
}

}  // namespace

Status check_round_parameters(const RoundParameters& p) {
  EDGEFL_RETURN_IF_ERROR(check_graph_parameters(p.graph));
  if (p.modulus_bits < 1 || p.modulus_bits > 32 || p.words < 1 || p.words > kMaxWords) {
    return Status::kUnsafeConfiguration;
  }
  return Status::kOk;
}

Status modulus_bits_for(uint32_t clients, uint32_t max_magnitude, bool is_signed, uint32_t* bits) {
  if (bits == nullptr || clients == 0) return Status::kInvalidArgument;
  // The sums lie in [-n M, n M] (2 n M + 1 values) or [0, n M] (n M + 1 values).
  const uint64_t extent = uint64_t(clients) * max_magnitude;
  const uint64_t values = is_signed ? 2 * extent + 1 : extent + 1;
  uint32_t m = 1;
  while (m < 64 && (uint64_t(1) << m) < values) ++m;
  if (m > 32) return Status::kUnsafeConfiguration;
  *bits = m;
  return Status::kOk;
}

int64_t centered(uint32_t word, uint32_t bits) {
  const uint64_t modulus = uint64_t(1) << bits;
  return word >= modulus / 2 ? int64_t(word) - int64_t(modulus) : int64_t(word);
}

uint32_t to_word(int64_t value, uint32_t bits) {
  return uint32_t(uint64_t(value)) & word_mask(bits);
}

// --- device ---------------------------------------------------------------------------------

SecAggClient::~SecAggClient() {
  wipe();
}

void SecAggClient::wipe() {
  mbedtls_platform_zeroize(&cipher_keys_, sizeof cipher_keys_);
  mbedtls_platform_zeroize(&mask_keys_, sizeof mask_keys_);
  mbedtls_platform_zeroize(self_seed_.data(), self_seed_.size());
  for (Neighbour& n : neighbours_) mbedtls_platform_zeroize(&n, sizeof n);
}

SecAggClient::Neighbour* SecAggClient::find(uint32_t device) {
  const auto it = std::lower_bound(neighbours_.begin(), neighbours_.end(), device,
                                   [](const Neighbour& n, uint32_t d) { return n.device < d; });
  return it != neighbours_.end() && it->device == device ? &*it : nullptr;
}

Status SecAggClient::start(const RoundParameters& p, uint32_t self, AdvertisedKeys* out) {
  if (phase_ != Phase::kIdle) return Status::kProtocolError;
  EDGEFL_RETURN_IF_ERROR(check_round_parameters(p));
  if (self >= p.graph.clients || out == nullptr) return Status::kInvalidArgument;
  EDGEFL_RETURN_IF_ERROR(crypto_init());
  EDGEFL_RETURN_IF_ERROR(graph_.build(p.graph, p.graph_seed));
  Status status = x25519_generate(&cipher_keys_);
  if (status == Status::kOk) status = x25519_generate(&mask_keys_);
  if (status != Status::kOk) {
    wipe();
    return status;
  }
  params_ = p;
  self_ = self;
  out->device = self;
  out->cipher_public = cipher_keys_.public_key;
  out->mask_public = mask_keys_.public_key;
  phase_ = Phase::kAdvertised;
  return Status::kOk;
}

Status SecAggClient::share(Span<const AdvertisedKeys> keys, std::vector<SealedShares>* out,
                           Key32* seed_commitment) {
  if (phase_ != Phase::kAdvertised || out == nullptr || seed_commitment == nullptr)
    return Status::kProtocolError;
  std::vector<Neighbour> neighbours;
  neighbours.reserve(keys.size());
  for (const AdvertisedKeys& k : keys) {
    if (!graph_.adjacent(self_, k.device)) return Status::kProtocolError;
    if (k.cipher_public == cipher_keys_.public_key || k.mask_public == mask_keys_.public_key ||
        k.cipher_public == k.mask_public || k.cipher_public == mask_keys_.public_key ||
        k.mask_public == cipher_keys_.public_key) {
      return Status::kKeyReuse;
    }
    Neighbour n;
    n.device = k.device;
    n.cipher_public = k.cipher_public;
    n.mask_public = k.mask_public;
    neighbours.push_back(n);
  }
  std::sort(neighbours.begin(), neighbours.end(),
            [](const Neighbour& a, const Neighbour& b) { return a.device < b.device; });
  for (size_t i = 1; i < neighbours.size(); ++i) {
    if (neighbours[i].device == neighbours[i - 1].device) return Status::kProtocolError;
  }
  for (size_t i = 0; i < neighbours.size(); ++i) {
    for (size_t j = 0; j < neighbours.size(); ++j) {
      const Neighbour &a = neighbours[i], &b = neighbours[j];
      if ((i != j && (a.cipher_public == b.cipher_public || a.mask_public == b.mask_public)) ||
          a.cipher_public == b.mask_public) {
        return Status::kKeyReuse;
      }
    }
  }
  if (neighbours.size() < params_.graph.threshold) return Status::kTooFewSurvivors;

  std::vector<uint32_t> holders(neighbours.size());
  for (size_t i = 0; i < neighbours.size(); ++i) holders[i] = neighbours[i].device + 1;
  std::vector<Share> seed_shares(neighbours.size()), key_shares(neighbours.size());
  Secret seed{}, mask_secret{};
  memcpy(mask_secret.data(), mask_keys_.secret.data(), 32);
  Status status = crypto_random_bytes(seed.data(), seed.size());
  Key32 commitment{};
  if (status == Status::kOk) status = seed_commitment_of(params_, self_, seed, &commitment);
  if (status == Status::kOk) {
    status = shamir_split(seed, params_.graph.threshold, {holders.data(), holders.size()}, crypto_random(),
                          {seed_shares.data(), seed_shares.size()});
  }
  if (status == Status::kOk) {
    status = shamir_split(mask_secret, params_.graph.threshold, {holders.data(), holders.size()},
                          crypto_random(), {key_shares.data(), key_shares.size()});
  }
  std::vector<SealedShares> sealed(neighbours.size());
  for (size_t i = 0; i < neighbours.size() && status == Status::kOk; ++i) {
    const uint32_t to = neighbours[i].device;
    Key32& key = neighbours[i].share_key;
    status =
        pair_key(params_, kShareKeyLabel, cipher_keys_.secret, neighbours[i].cipher_public, self_, to, &key);
    if (status != Status::kOk) break;
    uint8_t plain[kSharesPlaintextBytes], nonce[kAeadNonceBytes], aad[kAadBytes];
    store_le32(plain, self_);
    store_le32(plain + 4, to);
    shamir_share_to_bytes(seed_shares[i], plain + 8);
    shamir_share_to_bytes(key_shares[i], plain + 8 + kShareBytes);
    share_nonce(self_, to, nonce);
    share_aad(params_, self_, to, aad);
    sealed[i].from = self_;
    sealed[i].to = to;
    status = aead_seal(key, nonce, {aad, sizeof aad}, {plain, sizeof plain},
                       {sealed[i].sealed.data(), sealed[i].sealed.size()});
    mbedtls_platform_zeroize(plain, sizeof plain);
  }
  mbedtls_platform_zeroize(mask_secret.data(), mask_secret.size());
  mbedtls_platform_zeroize(seed_shares.data(), seed_shares.size() * sizeof(Share));
  mbedtls_platform_zeroize(key_shares.data(), key_shares.size() * sizeof(Share));
  if (status != Status::kOk) {
    mbedtls_platform_zeroize(seed.data(), seed.size());
    for (Neighbour& n : neighbours) mbedtls_platform_zeroize(&n, sizeof n);
    return status;
  }
  self_seed_ = seed;
  mbedtls_platform_zeroize(seed.data(), seed.size());
  neighbours_ = std::move(neighbours);
  *out = std::move(sealed);
  *seed_commitment = commitment;
  phase_ = Phase::kShared;
  return Status::kOk;
}

Status SecAggClient::mask(Span<const SealedShares> received, Span<const uint32_t> input,
                          Span<uint32_t> masked) {
  if (phase_ != Phase::kShared) return Status::kProtocolError;
  if (input.size() != params_.words || masked.size() != params_.words) return Status::kDimensionMismatch;
  const uint32_t limit = word_mask(params_.modulus_bits);
  for (size_t i = 0; i < input.size(); ++i) {
    if (input[i] > limit) return Status::kValueOutOfRange;
  }
  // Open everything first: a refused message changes nothing.
  struct Opened {
    Neighbour* neighbour;
    Share seed_share, key_share;
  };
  std::vector<Opened> opened;
  opened.reserve(received.size());
  Status status = Status::kOk;
  for (const SealedShares& s : received) {
    Neighbour* n = find(s.from);
    if (n == nullptr || s.to != self_) {
      status = Status::kProtocolError;
      break;
    }
    for (const Opened& o : opened) {
      if (o.neighbour == n) status = Status::kProtocolError;
    }
    if (status != Status::kOk) break;
    uint8_t plain[kSharesPlaintextBytes], nonce[kAeadNonceBytes], aad[kAadBytes];
    share_nonce(s.from, self_, nonce);
    share_aad(params_, s.from, self_, aad);
    status = aead_open(n->share_key, nonce, {aad, sizeof aad}, {s.sealed.data(), s.sealed.size()},
                       {plain, sizeof plain});
    Opened o{n, {}, {}};
    if (status == Status::kOk && (load_le32(plain) != s.from || load_le32(plain + 4) != self_)) {
      status = Status::kAuthenticationFailed;
    }
    if (status == Status::kOk) status = shamir_share_from_bytes(plain + 8, &o.seed_share);
    if (status == Status::kOk) status = shamir_share_from_bytes(plain + 8 + kShareBytes, &o.key_share);
    if (status == Status::kOk && (o.seed_share.x != self_ + 1 || o.key_share.x != self_ + 1)) {
      status = Status::kBadShare;
    }
    mbedtls_platform_zeroize(plain, sizeof plain);
    if (status != Status::kOk) break;
    opened.push_back(o);
  }
  if (status == Status::kOk && opened.size() < params_.graph.threshold) status = Status::kTooFewSurvivors;
  if (status != Status::kOk) {
    mbedtls_platform_zeroize(opened.data(), opened.size() * sizeof(Opened));
    return status;
  }

  const uint32_t bits = params_.modulus_bits;
  memcpy(masked.data(), input.data(), input.size() * 4);
  status = apply_stream(masked, self_seed_, kSelfMaskNonce, bits, /*subtract=*/false);
  for (const Opened& o : opened) {
    if (status != Status::kOk) break;
    Key32 seed;
    status = pair_key(params_, kPairMaskLabel, mask_keys_.secret, o.neighbour->mask_public, self_,
                      o.neighbour->device, &seed);
    if (status == Status::kOk) {
      status = apply_stream(masked, seed, kPairMaskNonce, bits, /*subtract=*/self_ > o.neighbour->device);
    }
    mbedtls_platform_zeroize(seed.data(), seed.size());
  }
  if (status != Status::kOk) {
    mbedtls_platform_zeroize(masked.data(), masked.size() * 4);
    mbedtls_platform_zeroize(opened.data(), opened.size() * sizeof(Opened));
    return status;
  }
  for (const Opened& o : opened) {
    o.neighbour->shared = true;
    o.neighbour->seed_share = o.seed_share;
    o.neighbour->key_share = o.key_share;
  }
  mbedtls_platform_zeroize(opened.data(), opened.size() * sizeof(Opened));
  // The mask key is no longer needed by this device; its shares are with the neighbours.
  mbedtls_platform_zeroize(&mask_keys_.secret, sizeof mask_keys_.secret);
  phase_ = Phase::kMasked;
  return Status::kOk;
}

Status SecAggClient::unmask(const UnmaskRequest& request, std::vector<RevealedShare>* out) {
  if (phase_ == Phase::kDone) return Status::kSecAggRefused;
  if (phase_ != Phase::kMasked || out == nullptr) return Status::kProtocolError;
  std::vector<uint32_t> survivors = request.survivors, dropped = request.dropped;
  std::sort(survivors.begin(), survivors.end());
  std::sort(dropped.begin(), dropped.end());
  if (!sorted_unique(survivors) || !sorted_unique(dropped)) return Status::kSecAggRefused;
  for (uint32_t v : survivors) {
    if (std::binary_search(dropped.begin(), dropped.end(), v)) return Status::kSecAggRefused;
  }
  for (const std::vector<uint32_t>* list : {&survivors, &dropped}) {
    for (uint32_t v : *list) {
      const Neighbour* n = find(v);
      if (n == nullptr || !n->shared) return Status::kSecAggRefused;
    }
  }
  if (survivors.size() < params_.graph.threshold) return Status::kTooFewSurvivors;
  std::vector<RevealedShare> revealed;
  revealed.reserve(survivors.size() + dropped.size());
  for (uint32_t v : survivors) revealed.push_back({v, SecretKind::kSelfMaskSeed, find(v)->seed_share});
  for (uint32_t v : dropped) revealed.push_back({v, SecretKind::kMaskKey, find(v)->key_share});
  *out = std::move(revealed);
  wipe();  // one answer per round: nothing left to reveal
  phase_ = Phase::kDone;
  return Status::kOk;
}

// --- server ---------------------------------------------------------------------------------

size_t SecAggServer::count(Flag flag) const {
  return size_t(std::count_if(flags_.begin(), flags_.end(), [flag](uint8_t f) { return (f & flag) != 0; }));
}

Status SecAggServer::start(const RoundParameters& p) {
  EDGEFL_RETURN_IF_ERROR(check_round_parameters(p));
  EDGEFL_RETURN_IF_ERROR(crypto_init());
  HararyGraph graph;
  EDGEFL_RETURN_IF_ERROR(graph.build(p.graph, p.graph_seed));
  params_ = p;
  graph_ = std::move(graph);
  flags_.assign(p.graph.clients, 0);
  keys_.assign(p.graph.clients, AdvertisedKeys{});
  inbox_.assign(p.graph.clients, {});
  seed_shares_.assign(p.graph.clients, {});
  key_shares_.assign(p.graph.clients, {});
  commitments_.assign(p.graph.clients, Key32{});
  sum_.assign(p.words, 0);
  phase_ = Phase::kKeys;
  return Status::kOk;
}

Status SecAggServer::add_keys(const AdvertisedKeys& keys) {
  if (phase_ != Phase::kKeys || keys.device >= params_.graph.clients || has(keys.device, kAdvertised)) {
    return Status::kProtocolError;
  }
  if (keys.cipher_public == keys.mask_public) return Status::kKeyReuse;
  for (uint32_t d = 0; d < params_.graph.clients; ++d) {
    if (!has(d, kAdvertised)) continue;
    const AdvertisedKeys& k = keys_[d];
    if (k.cipher_public == keys.cipher_public || k.cipher_public == keys.mask_public ||
        k.mask_public == keys.cipher_public || k.mask_public == keys.mask_public) {
      return Status::kKeyReuse;
    }
  }
  keys_[keys.device] = keys;
  flags_[keys.device] |= kAdvertised;
  return Status::kOk;
}

Status SecAggServer::end_keys() {
  if (phase_ != Phase::kKeys) return Status::kProtocolError;
  if (advertised() < size_t(params_.graph.threshold) + 1) {
    phase_ = Phase::kDone;
    return Status::kTooFewSurvivors;
  }
  phase_ = Phase::kShares;
  return Status::kOk;
}

std::vector<AdvertisedKeys> SecAggServer::keys_for(uint32_t device) const {
  std::vector<AdvertisedKeys> out;
  if (phase_ < Phase::kShares || device >= params_.graph.clients || !has(device, kAdvertised)) return out;
  for (uint32_t v : graph_.neighbours(device)) {
    if (has(v, kAdvertised)) out.push_back(keys_[v]);
  }
  return out;
}

Status SecAggServer::add_shares(uint32_t device, const Key32& seed_commitment,
                                Span<const SealedShares> shares) {
  if (phase_ != Phase::kShares || device >= params_.graph.clients || !has(device, kAdvertised) ||
      has(device, kShared)) {
    return Status::kProtocolError;
  }
  std::vector<uint32_t> expected;
  for (uint32_t v : graph_.neighbours(device)) {
    if (has(v, kAdvertised)) expected.push_back(v);
  }
  if (shares.size() != expected.size()) return Status::kInvalidMessage;
  std::vector<uint32_t> to;
  to.reserve(shares.size());
  for (const SealedShares& s : shares) {
    if (s.from != device) return Status::kInvalidMessage;
    to.push_back(s.to);
  }
  std::sort(to.begin(), to.end());
  if (to != expected) return Status::kInvalidMessage;  // missing, extra, repeated or misaddressed
  for (const SealedShares& s : shares) inbox_[s.to].push_back(s);
  commitments_[device] = seed_commitment;
  flags_[device] |= kShared;
  return Status::kOk;
}

Status SecAggServer::end_shares() {
  if (phase_ != Phase::kShares) return Status::kProtocolError;
  if (shared() < size_t(params_.graph.threshold) + 1) {
    phase_ = Phase::kDone;
    return Status::kTooFewSurvivors;
  }
  phase_ = Phase::kMasked;
  return Status::kOk;
}

std::vector<SealedShares> SecAggServer::shares_for(uint32_t device) const {
  std::vector<SealedShares> out;
  if (phase_ < Phase::kMasked || device >= params_.graph.clients || !has(device, kShared)) return out;
  for (const SealedShares& s : inbox_[device]) {
    if (has(s.from, kShared)) out.push_back(s);
  }
  return out;
}

Status SecAggServer::add_masked(uint32_t device, Span<const uint32_t> words) {
  if (phase_ != Phase::kMasked || device >= params_.graph.clients || !has(device, kShared) ||
      has(device, kMasked)) {
    return Status::kProtocolError;
  }
  if (words.size() != params_.words) return Status::kDimensionMismatch;
  const uint32_t mask = word_mask(params_.modulus_bits);
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] > mask) return Status::kInvalidMessage;
  }
  for (size_t i = 0; i < words.size(); ++i) sum_[i] = (sum_[i] + words[i]) & mask;
  flags_[device] |= kMasked;
  return Status::kOk;
}

Status SecAggServer::end_masked() {
  if (phase_ != Phase::kMasked) return Status::kProtocolError;
  if (masked() == 0) {
    phase_ = Phase::kDone;
    return Status::kTooFewSurvivors;
  }
  // A device's secret is in the sum when it masked (its seed) or when it shared and a neighbour
  // masked (its mask key, in that neighbour's pairwise masks); its shares sit with its
  // neighbours, and only the survivors among them will be asked for one.
  for (uint32_t u = 0; u < params_.graph.clients; ++u) {
    if (!has(u, kShared)) continue;
    uint32_t holders = 0;
    for (uint32_t v : graph_.neighbours(u)) holders += has(v, kMasked) ? 1 : 0;
    if (holders == 0 && !has(u, kMasked)) continue;  // dropped, and none of its masks is in the sum
    if (holders < params_.graph.threshold) {
      phase_ = Phase::kDone;
      return Status::kTooFewSurvivors;
    }
  }
  phase_ = Phase::kUnmask;
  return Status::kOk;
}

UnmaskRequest SecAggServer::unmask_request_for(uint32_t device) const {
  UnmaskRequest request;
  if (phase_ != Phase::kUnmask || device >= params_.graph.clients || !has(device, kMasked)) return request;
  for (uint32_t v : graph_.neighbours(device)) {
    if (!has(v, kShared)) continue;
    (has(v, kMasked) ? request.survivors : request.dropped).push_back(v);
  }
  return request;
}

Status SecAggServer::add_unmask(uint32_t device, Span<const RevealedShare> shares) {
  if (phase_ != Phase::kUnmask || device >= params_.graph.clients || !has(device, kMasked) ||
      has(device, kAnswered)) {
    return Status::kProtocolError;
  }
  std::vector<uint32_t> owners;
  for (const RevealedShare& r : shares) {
    if (r.owner >= params_.graph.clients || !graph_.adjacent(device, r.owner) || !has(r.owner, kShared) ||
        r.share.x != device + 1) {
      return Status::kInvalidMessage;
    }
    const SecretKind asked = has(r.owner, kMasked) ? SecretKind::kSelfMaskSeed : SecretKind::kMaskKey;
    if (r.kind != asked) return Status::kInvalidMessage;
    for (uint32_t y : r.share.y) {
      if (y >= kFieldPrime) return Status::kInvalidMessage;
    }
    owners.push_back(r.owner);
  }
  std::sort(owners.begin(), owners.end());
  if (!sorted_unique(owners)) return Status::kInvalidMessage;
  for (const RevealedShare& r : shares) {
    (r.kind == SecretKind::kSelfMaskSeed ? seed_shares_ : key_shares_)[r.owner].push_back(r.share);
  }
  flags_[device] |= kAnswered;
  return Status::kOk;
}

Status SecAggServer::finish(Span<uint32_t> sum, std::vector<uint32_t>* contributors) {
  if (phase_ != Phase::kUnmask || contributors == nullptr) return Status::kProtocolError;
  if (sum.size() != params_.words) return Status::kDimensionMismatch;
  const uint32_t n = params_.graph.clients, t = params_.graph.threshold, bits = params_.modulus_bits;
  phase_ = Phase::kDone;
  wrong_share_holders_.clear();
  std::vector<uint8_t> caught(n, 0);  // holders of a share found off its polynomial
  uint64_t decode_work = 0;           // m^3 summed over the decodes of this call
  // The secret of `shares` such that `check` accepts it: from the shares as they are (without
  // those of holders caught before, while t + 1 others are left to check them), else decoded
  // from the first t + 2e shares, caught holders last, for e = 1, 2, 4, ... kMaxCorrectedShares,
  // until one checks or the work budget is spent.
  auto recover = [&](std::vector<Share>* shares, const std::function<Status(const Secret&)>& check,
                     Secret* secret) -> Status {
    // Caught holders' shares last, the order otherwise kept (by hand: std::stable_partition's
    // temporary buffer would pull a libstdc++ data symbol into this non-PIC library, which the
    // shared C API links).
    std::vector<Share> reordered;
    reordered.reserve(shares->size());
    size_t trusted = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (const Share& share : *shares) {
        if ((caught[share.x - 1] != 0) == (pass == 1)) reordered.push_back(share);
      }
      if (pass == 0) trusted = reordered.size();
    }
    *shares = std::move(reordered);
    const size_t first_try = trusted >= size_t{t} + 1 ? trusted : shares->size();
    Status status = shamir_reconstruct({shares->data(), first_try}, t, secret);
    if (status == Status::kOk) status = check(*secret);
    if (status != Status::kBadShare) return status;
    for (uint32_t e = 1;; e *= 2) {
      const size_t m = std::min<size_t>(shares->size(), size_t{t} + 2 * size_t{e});
      if (m < size_t{t} + 2) break;  // no share to spare: nothing can be corrected
      decode_work += uint64_t(m) * m * m;
      if (decode_work > decode_work_cap(t)) break;
      std::vector<uint8_t> wrong(m, 0);
      status = shamir_decode({shares->data(), m}, t, secret, {wrong.data(), m});
      if (status == Status::kOk) status = check(*secret);
      if (status == Status::kOk) {
        // Who to name: the shares of all s off the polynomial through the first t the decode
        // found right, if they are few enough to be the wrong ones.
        std::vector<Share> ordered;
        ordered.reserve(shares->size());
        for (int pass = 0; pass < 2; ++pass) {
          for (size_t i = 0; i < m; ++i) {
            if ((wrong[i] != 0) == (pass == 1)) ordered.push_back((*shares)[i]);
          }
        }
        ordered.insert(ordered.end(), shares->begin() + long(m), shares->end());
        std::vector<uint8_t> off(ordered.size(), 0);
        size_t off_count = 0;
        if (shamir_off_polynomial({ordered.data(), ordered.size()}, t, {off.data(), off.size()}) ==
            Status::kOk) {
          for (uint8_t flag : off) off_count += flag;
          if (off_count <= (ordered.size() - t) / 2) {
            for (size_t i = 0; i < ordered.size(); ++i) {
              if (off[i] != 0) caught[ordered[i].x - 1] = 1;
            }
          }
        }
        return Status::kOk;
      }
      if (status != Status::kBadShare) return status;
      if (m == shares->size() || e >= kMaxCorrectedShares) break;
    }
    secret->fill(0);
    return Status::kBadShare;
  };
  std::vector<uint32_t> acc = std::move(sum_);
  Span<uint32_t> acc_span(acc.data(), acc.size());
  for (uint32_t u = 0; u < n; ++u) {
    if (!has(u, kMasked)) continue;
    Secret seed;
    Status status = recover(
        &seed_shares_[u],
        [&](const Secret& candidate) {
          Key32 commitment{};
          const Status s = seed_commitment_of(params_, u, candidate, &commitment);
          if (s != Status::kOk) return s;
          return commitment == commitments_[u] ? Status::kOk : Status::kBadShare;
        },
        &seed);
    if (status == Status::kOk) status = apply_stream(acc_span, seed, kSelfMaskNonce, bits, /*subtract=*/true);
    mbedtls_platform_zeroize(seed.data(), seed.size());
    EDGEFL_RETURN_IF_ERROR(status);
  }
  for (uint32_t v = 0; v < n; ++v) {
    if (!has(v, kShared) || has(v, kMasked)) continue;
    std::vector<uint32_t> holders;  // survivors that masked with v
    for (uint32_t u : graph_.neighbours(v)) {
      if (has(u, kMasked)) holders.push_back(u);
    }
    if (holders.empty()) continue;
    Secret secret;
    Status status = recover(
        &key_shares_[v],
        [&](const Secret& candidate) {
          Key32 key{}, public_key{};
          memcpy(key.data(), candidate.data(), 32);
          Status s = x25519_public_key(key, &public_key);
          mbedtls_platform_zeroize(key.data(), key.size());
          if (s != Status::kOk) return s;
          return public_key == keys_[v].mask_public ? Status::kOk : Status::kBadShare;
        },
        &secret);
    Key32 key{};
    memcpy(key.data(), secret.data(), 32);
    for (uint32_t u : holders) {
      if (status != Status::kOk) break;
      Key32 seed;
      status = pair_key(params_, kPairMaskLabel, key, keys_[u].mask_public, v, u, &seed);
      // u added +PRG when u < v and -PRG otherwise: take back what it added.
      if (status == Status::kOk)
        status = apply_stream(acc_span, seed, kPairMaskNonce, bits, /*subtract=*/u < v);
      mbedtls_platform_zeroize(seed.data(), seed.size());
    }
    mbedtls_platform_zeroize(secret.data(), secret.size());
    mbedtls_platform_zeroize(key.data(), key.size());
    EDGEFL_RETURN_IF_ERROR(status);
  }
  for (uint32_t d = 0; d < n; ++d) {
    if (caught[d] != 0) wrong_share_holders_.push_back(d);
  }
  memcpy(sum.data(), acc.data(), acc.size() * 4);
  contributors->clear();
  for (uint32_t u = 0; u < n; ++u) {
    if (has(u, kMasked)) contributors->push_back(u);
  }
  return Status::kOk;
}

size_t packed_words_bytes(uint32_t words, uint32_t bits) {
  return size_t((uint64_t(words) * bits + 7) / 8);
}

Status pack_words(Span<const uint32_t> words, uint32_t bits, Span<uint8_t> out) {
  if (bits < 1 || bits > 32) return Status::kInvalidArgument;
  const size_t need = packed_words_bytes(uint32_t(words.size()), bits);
  if (words.size() > kMaxWords || out.size() < need) return Status::kBufferTooSmall;
  const uint64_t limit = uint64_t(1) << bits;
  for (uint32_t w : words) {
    if (w >= limit) return Status::kValueOutOfRange;
  }
  uint64_t acc = 0;
  uint32_t held = 0;
  size_t at = 0;
  for (uint32_t w : words) {
    acc |= uint64_t(w) << held;
    held += bits;
    while (held >= 8) {
      out[at++] = uint8_t(acc);
      acc >>= 8;
      held -= 8;
    }
  }
  if (held > 0) out[at++] = uint8_t(acc);
  return Status::kOk;
}

Status unpack_words(Span<const uint8_t> bytes, uint32_t bits, Span<uint32_t> words) {
  if (bits < 1 || bits > 32) return Status::kInvalidArgument;
  if (words.size() > kMaxWords || bytes.size() != packed_words_bytes(uint32_t(words.size()), bits)) {
    return Status::kSizeMismatch;
  }
  const uint64_t mask = bits == 32 ? 0xFFFFFFFFull : (uint64_t(1) << bits) - 1;
  uint64_t acc = 0;
  uint32_t held = 0;
  size_t at = 0;
  for (uint32_t& w : words) {
    while (held < bits) {
      acc |= uint64_t(bytes[at++]) << held;
      held += 8;
    }
    w = uint32_t(acc & mask);
    acc >>= bits;
    held -= bits;
  }
  return acc == 0 ? Status::kOk : Status::kInvalidMessage;  // the last byte's unused bits
}

}  // namespace secagg
}  // namespace edgefl
