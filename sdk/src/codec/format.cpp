#include "codec/format.h"

#include <string.h>

#include "codec/codec_internal.h"
#include "codec/count_sketch_codec.h"
#include "codec/index_coding.h"
#include "codec/skc_codec.h"
#include "codec/values.h"
#include "core/bitio.h"
#include "core/crc32c.h"
#include "sketch/skc.h"

namespace edgefl {
namespace format {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "edgefl encodings are little-endian; big-endian hosts need byte swaps in values.h");

void write_header(const EncodedInfo& info, uint8_t* out) {
  memcpy(out, kMagic, 4);
  out[4] = format_version_for(info.index_coding);
  out[5] = uint8_t(info.sparsifier);
  out[6] = uint8_t(info.values);
  out[7] = uint8_t(info.index_coding);
  store_le32(out + 8, info.n);
  store_le32(out + 12, info.nnz);
  out[16] = info.bits;
  out[17] =
      uint8_t((info.stochastic ? kFlagStochastic : 0) | (info.shared_scale ? kFlagSharedScale : 0) |
              (info.randk_unscaled ? kFlagRandkUnscaled : 0) | (info.entropy_coded ? kFlagEntropyCoded : 0) |
              (info.sign_magnitude ? kFlagSignMagnitude : 0) |
              (info.randk_permuted ? kFlagRandkPermuted : 0) | (info.rans_wide ? kFlagRansWide : 0));
  store_le16(out + 18, info.levels);
  store_le32(out + 20, info.block);
  memcpy(out + 24, &info.param, 4);
  store_le64(out + 28, info.seed);
  store_le32(out + 36, info.contributions);
  store_le32(out + 40, uint32_t(info.index_bytes));
  store_le32(out + 44, uint32_t(info.value_bytes));
  store_le32(out + 48, 0);
}

void seal(const EncodedInfo& info, uint8_t* out) {
  write_header(info, out);
  store_le32(out + kChecksumOffset, compute_checksum(out, info.total_bytes));
}

void seal_with_payload_crc(const EncodedInfo& info, uint8_t* out, uint32_t payload_crc) {
  write_header(info, out);
  const uint32_t head = crc32c_update(0, out, kChecksumOffset);
  store_le32(out + kChecksumOffset, crc32c_combine(head, payload_crc, info.total_bytes - kHeaderBytes));
}

uint32_t compute_checksum(const uint8_t* encoding, size_t total_bytes) {
  const uint32_t crc = crc32c_update(0, encoding, kChecksumOffset);
  return crc32c_update(crc, encoding + kHeaderBytes, total_bytes - kHeaderBytes);
}

namespace {

// skc and cs: their own parameter fields (format.h).
Status check_sketch_parameters(const EncodedInfo& h) {
  if (h.nnz > h.n || h.index_coding != IndexCoding::kNone || h.contributions == 0 || h.randk_unscaled ||
      h.shared_scale) {
    return Status::kBadParameters;
  }
#if EDGEFL_WITH_SKC
  if (h.values == ValueCoderKind::kSkCompress) return codec_internal::check_skc_header(h);
#endif
#if EDGEFL_WITH_COUNT_SKETCH
  if (h.values == ValueCoderKind::kCountSketch) return codec_internal::check_count_sketch_header(h);
#endif
  return Status::kUnknownCodec;  // read_header() refuses a family left out before this
}

Status check_parameters(const EncodedInfo& h) {
  if (h.values == ValueCoderKind::kSkCompress || h.values == ValueCoderKind::kCountSketch) {
    return check_sketch_parameters(h);
  }
  // Sparsifier and index coding.
  const bool dense = h.sparsifier == SparsifierKind::kNone;
  if (dense && h.nnz != h.n) return Status::kBadParameters;
  if (h.nnz > h.n) return Status::kBadParameters;
  if (dense || h.sparsifier == SparsifierKind::kRandomK) {
    if (h.index_coding != IndexCoding::kNone) return Status::kBadParameters;
  } else if (h.index_coding != IndexCoding::kEliasFano && h.index_coding != IndexCoding::kRice &&
             h.index_coding != IndexCoding::kBlockRice) {
    return Status::kBadParameters;
  }
  if ((h.randk_unscaled || h.randk_permuted) && h.sparsifier != SparsifierKind::kRandomK) {
    return Status::kBadParameters;
  }
  if (h.rans_wide && !h.entropy_coded) return Status::kBadParameters;
  if (h.contributions == 0) return Status::kBadParameters;
  // Value coder.
  const bool uniform = h.values == ValueCoderKind::kUniform;
  if (h.shared_scale && !uniform) return Status::kBadParameters;
  auto block_ok = [&] { return h.block >= 1 && h.block <= EDGEFL_MAX_BLOCK; };
  switch (h.values) {
    case ValueCoderKind::kFp32:
      if (h.bits != 32 || h.block != 0) return Status::kBadParameters;
      break;
    case ValueCoderKind::kFp16:
    case ValueCoderKind::kBf16:
      if (h.bits != 16 || h.block != 0) return Status::kBadParameters;
      break;
    case ValueCoderKind::kUniform:
      if (h.shared_scale) {
        if (h.bits < 2 || h.bits > 32 || h.block != 0) return Status::kBadParameters;
        if (!(h.param > 0.0f && h.param <= values::kMaxScale / 2147483648.0f)) return Status::kBadParameters;
      } else if ((h.bits != 1 && h.bits != 2 && h.bits != 4 && h.bits != 8) || !block_ok()) {
        return Status::kBadParameters;
      }
      break;
    case ValueCoderKind::kQsgd:
      if (h.levels < 1 || h.levels > 32767 || h.bits != 1 + ceil_log2(uint64_t(h.levels) + 1) ||
          !block_ok()) {
        return Status::kBadParameters;
      }
      break;
    case ValueCoderKind::kTernGrad:
      if (h.bits != 2 || !block_ok()) return Status::kBadParameters;
      break;
    case ValueCoderKind::kScaledSign:
      if (h.bits != 1 || !block_ok()) return Status::kBadParameters;
      break;
    case ValueCoderKind::kHadamard:
      if (h.bits < 1 || h.bits > 4 || h.block < 16 || h.block > values::kMaxHadamardBlock ||
          (h.block & (h.block - 1)) != 0) {
        return Status::kBadParameters;
      }
      break;
    case ValueCoderKind::kSkCompress:
    case ValueCoderKind::kCountSketch: break;  // check_sketch_parameters()
  }
  if (h.values != ValueCoderKind::kQsgd && h.levels != 0) return Status::kBadParameters;
  if (h.contributions > 1 && !is_summable(h)) return Status::kBadParameters;
  return Status::kOk;
}

}  // namespace

Status read_header(Span<const uint8_t> bytes, EncodedInfo* info) {
  if (bytes.size() < kHeaderBytes) return Status::kTruncated;
  const uint8_t* p = bytes.data();
  if (memcmp(p, kMagic, 4) != 0) return Status::kBadMagic;
  if (p[4] != kFormatVersion && p[4] != kBlockRiceFormatVersion) return Status::kUnsupportedVersion;
  if (p[5] > uint8_t(SparsifierKind::kRandomK) || p[6] < uint8_t(ValueCoderKind::kFp32) ||
      p[6] > uint8_t(ValueCoderKind::kCountSketch) || p[7] > uint8_t(IndexCoding::kBlockRice) ||
      !codec_internal::codec_family_compiled(ValueCoderKind(p[6]))) {  // edgefl/config.h
    return Status::kUnknownCodec;
  }
  EncodedInfo h;
  h.version = p[4];
  h.sparsifier = SparsifierKind(p[5]);
  h.values = ValueCoderKind(p[6]);
  h.index_coding = IndexCoding(p[7]);
  // Block Rice exactly when version 2: one header for one encoding.
  if (p[4] != format_version_for(h.index_coding)) return Status::kBadParameters;
  h.n = load_le32(p + 8);
  h.nnz = load_le32(p + 12);
  h.bits = p[16];
  const uint8_t flags = p[17];
  if ((flags & ~kKnownFlags) != 0) return Status::kBadParameters;
  h.stochastic = (flags & kFlagStochastic) != 0;
  h.shared_scale = (flags & kFlagSharedScale) != 0;
  h.randk_unscaled = (flags & kFlagRandkUnscaled) != 0;
  h.entropy_coded = (flags & kFlagEntropyCoded) != 0;
  h.sign_magnitude = (flags & kFlagSignMagnitude) != 0;
  h.randk_permuted = (flags & kFlagRandkPermuted) != 0;
  h.rans_wide = (flags & kFlagRansWide) != 0;
  if (h.sign_magnitude && (p[6] != uint8_t(ValueCoderKind::kUniform) || h.shared_scale || p[16] < 2)) {
    return Status::kBadParameters;
  }
  h.levels = load_le16(p + 18);
  h.block = load_le32(p + 20);
  memcpy(&h.param, p + 24, 4);
  h.seed = load_le64(p + 28);
  h.contributions = load_le32(p + 36);
  h.index_bytes = load_le32(p + 40);
  h.value_bytes = load_le32(p + 44);
  h.checksum = load_le32(p + 48);
  h.header_bytes = kHeaderBytes;
  if (h.n > EDGEFL_MAX_DIMENSION) return Status::kDimensionTooLarge;
  if (!(h.param - h.param == 0.0f)) return Status::kBadParameters;  // NaN or Inf
  const bool sketch = h.values == ValueCoderKind::kSkCompress || h.values == ValueCoderKind::kCountSketch;
  if (!sketch && (h.sparsifier == SparsifierKind::kThreshold ? !(h.param > 0.0f)
                                                             : (!h.shared_scale && h.param != 0.0f))) {
    return Status::kBadParameters;
  }
  EDGEFL_RETURN_IF_ERROR(check_parameters(h));
  if (sketch) {
    if (h.index_bytes != 0) return Status::kSizeMismatch;
    if (h.values == ValueCoderKind::kCountSketch) {
      if (h.value_bytes != uint64_t(h.levels) * h.block * 4) return Status::kSizeMismatch;
    } else {
#if EDGEFL_WITH_SKC
      const uint64_t bound = skc::region_bound(skc::params_from_header(h), h.nnz);
      if (h.value_bytes < 13 || h.value_bytes > bound) return Status::kSizeMismatch;
#endif
    }
    h.total_bytes = kHeaderBytes + h.value_bytes;
    if (bytes.size() < h.total_bytes) return Status::kTruncated;
    if (bytes.size() > h.total_bytes) return Status::kSizeMismatch;
    *info = h;
    return Status::kOk;
  }
  // Sizes implied by the parameters.
  uint64_t expected_index = 0;
  if (h.index_coding == IndexCoding::kEliasFano) {
    expected_index = index_coding::ef_bytes(h.n, h.nnz);
    if (h.index_bytes != expected_index) return Status::kSizeMismatch;
  } else if (h.index_coding == IndexCoding::kRice) {
    if (h.index_bytes > index_coding::rice_bound_bytes(h.n, h.nnz) || (h.nnz > 0 && h.index_bytes == 0)) {
      return Status::kSizeMismatch;
    }
  } else if (h.index_coding == IndexCoding::kBlockRice) {
    // At least the length prefix and a byte of each part.
    if (h.index_bytes > index_coding::block_rice_bound_bytes(h.n, h.nnz) ||
        (h.nnz > 0 ? h.index_bytes < 3 : h.index_bytes != 0)) {
      return Status::kSizeMismatch;
    }
  } else if (h.index_bytes != 0) {
    return Status::kSizeMismatch;
  }
  values::Params vp;
  vp.kind = h.values;
  vp.bits = h.bits;
  vp.block = h.block;
  vp.shared = h.shared_scale;
  if (h.entropy_coded) {
    // Smaller than the plain region, and at least the scales, the table and the states.
    const bool bf16 = h.values == ValueCoderKind::kBf16;
    if ((!bf16 && (h.values != ValueCoderKind::kUniform || h.bits > 8)) || h.nnz == 0)
      return Status::kBadParameters;
    const uint64_t floor =
        values::entropy_prefix_bytes(vp, h.nnz) + entropy::rans_table_min_bytes(values::entropy_symbols(vp)) +
        entropy::rans_state_bytes(h.rans_wide ? entropy::kRansWideLanes : entropy::kRansLanes);
    if (h.value_bytes >= values::region_bytes(vp, h.nnz) || h.value_bytes < floor)
      return Status::kSizeMismatch;
  } else if (h.value_bytes != values::region_bytes(vp, h.nnz)) {
    return Status::kSizeMismatch;
  }
  h.total_bytes = kHeaderBytes + h.index_bytes + h.value_bytes;
  if (bytes.size() < h.total_bytes) return Status::kTruncated;
  if (bytes.size() > h.total_bytes) return Status::kSizeMismatch;
  *info = h;
  return Status::kOk;
}

}  // namespace format
}  // namespace edgefl
