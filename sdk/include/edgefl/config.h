// edgefl/config.h: compile-time limits and features of the SDK.
//
// To change a default, define it in a header of your own and point EDGEFL_CONFIG_FILE at it
// (e.g. -DEDGEFL_CONFIG_FILE='"my_edgefl_config.h"'); every option below is only set if unset.
#ifndef EDGEFL_CONFIG_H_
#define EDGEFL_CONFIG_H_

#if defined(EDGEFL_CONFIG_FILE)
#include EDGEFL_CONFIG_FILE
#endif

// Largest update dimension (number of float32 coordinates) an encoder accepts and a decoder
// believes. Encodings that claim more are rejected before anything is read.
#ifndef EDGEFL_MAX_DIMENSION
#define EDGEFL_MAX_DIMENSION (1u << 30)
#endif

// Largest quantization block / QSGD bucket, in coordinates. The encoder's workspace holds one
// block of floats when it quantizes the values of a sparsified update.
#ifndef EDGEFL_MAX_BLOCK
#define EDGEFL_MAX_BLOCK 65536u
#endif

// Define EDGEFL_STRIP_ERROR_STRINGS to compile out status messages (codes remain).

// Lookup tables of the portable CRC32C (the checksum of every encoding, where the CPU has no CRC
// instruction): 8 (slicing-by-8: 8 KiB of read-only data) or 1 (one 1 KiB table, a few times
// slower). The checksums are the same either way. Default: 1 when compiling for size (-Os, e.g.
// the Cortex-M presets), else 8.
#ifndef EDGEFL_CRC32C_TABLES
#if defined(__OPTIMIZE_SIZE__)
#define EDGEFL_CRC32C_TABLES 1
#else
#define EDGEFL_CRC32C_TABLES 8
#endif
#endif

// Codec families in this build: 1 (default) or 0. A family compiled out is refused by name
// (parse_codec_spec() and encode(): kInvalidSpec; inspect() and the decoders: kUnknownCodec) and
// none of its code is linked; the Cortex-M size table in the README has a row per switch. The
// minimal set a small device needs (fp32/fp16/bf16, q1-q8, top-k, random-k, threshold, sparq,
// QSGD, TernGrad, sign) is always in.
//   EDGEFL_WITH_SKC           SKCompress (skc): sketch/skc, the quantile sketch, Huffman tables
//   EDGEFL_WITH_COUNT_SKETCH  Count Sketch (cs)
//   EDGEFL_WITH_HADAMARD      randomized Hadamard rotation + Lloyd-Max levels (hq1-hq4)
#ifndef EDGEFL_WITH_SKC
#define EDGEFL_WITH_SKC 1
#endif
#ifndef EDGEFL_WITH_COUNT_SKETCH
#define EDGEFL_WITH_COUNT_SKETCH 1
#endif
#ifndef EDGEFL_WITH_HADAMARD
#define EDGEFL_WITH_HADAMARD 1
#endif

static_assert(EDGEFL_MAX_DIMENSION >= 1 && EDGEFL_MAX_DIMENSION <= (1u << 31),
              "EDGEFL_MAX_DIMENSION must be in [1, 2^31]");
static_assert(EDGEFL_MAX_BLOCK >= 256 && EDGEFL_MAX_BLOCK <= (1u << 24),
              "EDGEFL_MAX_BLOCK must be in [256, 2^24]");
static_assert(EDGEFL_CRC32C_TABLES == 1 || EDGEFL_CRC32C_TABLES == 8, "EDGEFL_CRC32C_TABLES must be 1 or 8");

#endif  // EDGEFL_CONFIG_H_
