// Internal: the byte layout of an encoded update (format versions 1 and 2), and its header codec.
//
// Every encoding is a fixed 52-byte header followed by the index region and the value region.
// All integers are little-endian; floats are IEEE binary32, little-endian.
//
//  offset size field
//   0      4   magic "EFLU" (0x45 0x46 0x4C 0x55)
//   4      1   format version: 2 (kBlockRiceFormatVersion) when the index coding is block Rice,
//              else 1 (kFormatVersion); version 2 adds that coding and nothing else, so every
//              other encoding is the same bytes as before it
//   5      1   sparsifier      (SparsifierKind)
//   6      1   value coder     (ValueCoderKind)
//   7      1   index coding    (IndexCoding; kNone for dense and random-k)
//   8      4   n               dimension, 0 <= n <= EDGEFL_MAX_DIMENSION
//  12      4   nnz             coordinates carried, <= n (== n when dense)
//  16      1   bits            code width: 32 fp32, 16 fp16/bf16, 1..32 uniform, 1..4 hadamard,
//                              1+ceil(log2(s+1)) qsgd, 2 terngrad, 1 sign
//  17      1   flags           bit0 stochastic, bit1 shared-scale, bit2 random-k unscaled,
//                              bit3 entropy-coded value region (uniform blocked), bit4 sign-magnitude
//                              uniform codes, bit5 random-k in permutation order, bit6 the
//                              rANS stream has 32 lanes (with bit3); others 0
//  18      2   levels          qsgd s; 0 otherwise
//  20      4   block           coordinates per scale / bucket; 0 for fp32/fp16/bf16 and shared-scale
//  24      4   param (f32)     shared step (uniform, shared-scale) or threshold; 0 otherwise
//  28      8   seed            random-k selection and Hadamard signs; informational otherwise
//  36      4   contributions   encodings summed into this one, >= 1
//  40      4   index bytes     size of the index region
//  44      4   value bytes     size of the value region
//  48      4   checksum        CRC32C of bytes [0, 48) followed by the payload
//  52          index region, then value region
//
// Index region: Elias-Fano (lower bits, L = floor(log2(n/nnz)), k*L bits LSB-first, padded to a
// byte; then the upper bits, unary, nnz + (n >> L) bits), adaptive Rice or block Rice (see
// index_coding.h).
//
// Value region, one group per block of `block` carried values (the last may be short):
//   fp32/fp16/bf16 : the values, no blocks.
//   uniform + ans  : (flag bit3) every block's f32 min and f32 step, then the rANS table and
//                    stream of all codes (values.h, entropy/rans.h); smaller than the plain form.
//   uniform + sm   : (flag bit4) as uniform, with min and step over |x|; a code's top bit is the
//                    sign: value = +-(min + (code & (2^(bits-1) - 1)) * step).
//   uniform        : f32 min, f32 step, then ceil(count * bits / 8) bytes of codes (LSB-first);
//                    value = min + code * step. Shared-scale: no per-block data; codes are
//                    two's-complement `bits`-wide integers for the whole region; value = code*step.
//   qsgd           : f32 ||bucket||_2 / s, then ceil(count * bits / 8) bytes: per code, the level
//                    in bits-1 low bits and the sign in the top bit.
//   terngrad       : f32 max|x|, then ceil(count / 5) bytes, 5 base-3 digits per byte (<= 242).
//   sign           : f32 mean|x|, then ceil(count / 8) bytes, bit set = negative.
//   hadamard       : blocks are padded to a power of two P; f32 scale, then ceil(P * bits / 8)
//                    bytes of codes (Lloyd-Max centroid indices).
//
// Sketch codecs use the header fields their own way and have no index region:
//   skc (9)  : bits 8; block = buckets (2..256); levels = rows | groups << 4; param = MinMaxSketch
//              columns per key; nnz = keys carried; value region as in sketch/skc.h.
//   cs (10)  : sparsifier none; bits 32; levels = rows; block = columns; param = step; nnz = the
//              heavy hitters decoded; value region = rows x columns int32 cells (count_sketch.h).
#ifndef EDGEFL_SRC_CODEC_FORMAT_H_
#define EDGEFL_SRC_CODEC_FORMAT_H_

#include <stddef.h>
#include <stdint.h>

#include "edgefl/codec.h"

namespace edgefl {
namespace format {

constexpr uint8_t kFormatVersion = 1;
constexpr uint8_t kBlockRiceFormatVersion = 2;

// The version an encoding with this index coding is written with.
inline uint8_t format_version_for(IndexCoding coding) {
  return coding == IndexCoding::kBlockRice ? kBlockRiceFormatVersion : kFormatVersion;
}
constexpr uint8_t kMagic[4] = {'E', 'F', 'L', 'U'};
constexpr size_t kHeaderBytes = kEncodedHeaderBytes;
constexpr size_t kChecksumOffset = 48;

constexpr uint8_t kFlagStochastic = 1u << 0;
constexpr uint8_t kFlagSharedScale = 1u << 1;
constexpr uint8_t kFlagRandkUnscaled = 1u << 2;
constexpr uint8_t kFlagEntropyCoded = 1u << 3;
constexpr uint8_t kFlagSignMagnitude = 1u << 4;
// Random-k indices from select::PermutedIndexStream (O(k), in permutation order); without it,
// from select::RandomIndexStream (Algorithm S, ascending), as encoders wrote before the flag.
constexpr uint8_t kFlagRandkPermuted = 1u << 5;
// The value region's rANS stream interleaves entropy::kRansWideLanes states; without it
// entropy::kRansLanes, as encoders wrote before the flag (and still do for short streams).
constexpr uint8_t kFlagRansWide = 1u << 6;
constexpr uint8_t kKnownFlags = kFlagStochastic | kFlagSharedScale | kFlagRandkUnscaled | kFlagEntropyCoded |
                                kFlagSignMagnitude | kFlagRandkPermuted | kFlagRansWide;

// Writes the header for `info` (checksum field left 0) into `out` (kHeaderBytes bytes).
void write_header(const EncodedInfo& info, uint8_t* out);

// Parses and range-checks the header of `bytes` (no checksum, no payload). Fills `info`.
Status read_header(Span<const uint8_t> bytes, EncodedInfo* info);

// CRC32C over header (with the checksum field as stored) [0, 48) and the payload.
uint32_t compute_checksum(const uint8_t* encoding, size_t total_bytes);

// Writes the header for `info` and then its checksum over the info.total_bytes of `out` (whose
// payload is already in place).
void seal(const EncodedInfo& info, uint8_t* out);
// seal() for an encoder that checksummed its payload while writing it: payload_crc is
// crc32c_update(0, payload, info.total_bytes - kHeaderBytes). Same bytes as seal().
void seal_with_payload_crc(const EncodedInfo& info, uint8_t* out, uint32_t payload_crc);

}  // namespace format
}  // namespace edgefl

#endif  // EDGEFL_SRC_CODEC_FORMAT_H_
