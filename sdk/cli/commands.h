// commands.h: the subcommands of the `edgefl` tool, callable from tests without a process.
//
// Every run_* function reports errors on `err` (one line each, prefixed "edgefl <cmd>: ") and
// returns an exit code: kExitOk, kExitFailure (bad input, codec error, I/O error) or kExitUsage
// (bad command line). None of them throws on malformed files; they are meant to be safe on any
// bytes (the encodings are verified by edgefl::inspect / edgefl::decode, .npy by parse_npy).
#ifndef EDGEFL_CLI_COMMANDS_H_
#define EDGEFL_CLI_COMMANDS_H_

#include <stddef.h>
#include <stdint.h>

#include <iosfwd>
#include <string>
#include <vector>

#include "edgefl/codec.h"

namespace edgefl {
namespace cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// The tool's version ("0.1.0").
const char* cli_version();

// The codec spec grammar, every codec and option, with examples that parse: the text every
// command that takes a codec prints in its --help (and the README's "Codec specs" block).
extern const char kCodecSpecHelp[];

// A codec spec that parse_codec_spec() accepts and that encodes to this encoding's format (the
// same sparsifier, index coding, value coder, bits, block, levels and flags; k = nnz, since a
// fraction is not kept in the header), e.g. "topk:k=1000,approx,idx=rice+q4:block=256,sm,ans".
std::string spec_of_encoding(const EncodedInfo& info);

// Reads an encoding from `path` and verifies it with edgefl::inspect (header + checksum). Fails
// when the file holds bytes beyond info->total_bytes. *error names the file and the reason.
bool load_encoding(const std::string& path, std::vector<uint8_t>* bytes, EncodedInfo* info,
                   std::string* error);

// Why encodings like `info` cannot be added without decoding ("" when is_summable(info)).
std::string not_summable_reason(const EncodedInfo& info);

// edgefl encode --codec SPEC [--seed N] IN.npy OUT.efl
int run_encode(const std::string& spec, uint64_t seed, const std::string& in_npy, const std::string& out_efl,
               std::ostream& err);

// edgefl decode IN.efl OUT.npy
int run_decode(const std::string& in_efl, const std::string& out_npy, std::ostream& err);

// edgefl inspect [--json] IN.efl (the report goes to `out`)
int run_inspect(const std::string& in_efl, bool json, std::ostream& out, std::ostream& err);

// edgefl add A.efl B.efl OUT.efl
int run_add(const std::string& a_efl, const std::string& b_efl, const std::string& out_efl,
            std::ostream& err);

// The whole command line (argv[0] is the program name). Dispatches to the functions above and
// to run_bench (bench.h).
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_COMMANDS_H_
