#include "commands.h"
#include "sim.h"
#if defined(EDGEFL_CLI_HAVE_SECAGG)
#include "secure_round.h"
#endif
#if defined(EDGEFL_CLI_HAVE_NET)
#include "client_command.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <chrono>
#include <ostream>

#include "bench.h"
#include "edgefl/config.h"
#include "edgefl/status.h"
#include "file_io.h"
#include "json_writer.h"
#include "npy.h"
#if EDGEFL_CLI_HAVE_NET
#include "dev_pki.h"
#endif

#ifndef EDGEFL_CLI_VERSION
#define EDGEFL_CLI_VERSION "0.1.0"
#endif

namespace edgefl {
namespace cli {

namespace {

// The largest .efl file read: a header plus 8 bytes per coordinate at the largest dimension
// (fp32 values and 32-bit indices); inspect() checks the real size against the header. Computed
// in 64 bits and capped: 8 x 2^30 does not fit a 32-bit size_t (armhf).
constexpr uint64_t kMaxEncodingFileBytes64 = kEncodedHeaderBytes + uint64_t{8} * EDGEFL_MAX_DIMENSION;
constexpr size_t kMaxEncodingFileBytes = kMaxEncodingFileBytes64 > SIZE_MAX
                                             ? SIZE_MAX
                                             : static_cast<size_t>(kMaxEncodingFileBytes64);

constexpr uint64_t kDefaultSeed = 1;

const char kUsage[] =
    "usage: edgefl <command> [options]\n"
    "\n"
    "Compress model updates with the edgefl codecs.\n"
    "\n"
    "commands:\n"
    "  encode   --codec SPEC [--seed N] IN.npy OUT.efl   encode a float32/float16 .npy array\n"
    "  decode   IN.efl OUT.npy                          decode to a 1-D float32 .npy array\n"
    "  inspect  [--json] IN.efl                         verify an encoding and print its header\n"
    "  add      A.efl B.efl OUT.efl                     add two summable encodings without decoding\n"
    "  bench    [--input IN.npy]... [--codecs LIST]     benchmark codecs (Bench-1M and inputs)\n"
    "  sim      [--codec SPEC | --compare LIST] ...      federated training simulation on Fashion-MNIST\n"
    "  certs    --out DIR --devices N [...]             write a development PKI (CA, server, devices)\n"
    "  client   --server HOST:PORT --ca --cert --key ... one device in rounds against edgefl-server (mTLS)\n"
    "  swarm    --pki DIR --devices N ...               N devices as threads: a load test of edgefl-server\n"
    "  secagg-bench [--devices 10,100,1000] ...         SecAgg+ rounds in process: CPU and bytes per device\n"
    "\n"
    "options:\n"
    "  -h, --help      show help (also `edgefl <command> --help`)\n"
    "  -V, --version   print the version\n"
    "\n"
    "exit status: 0 success, 1 failure (bad file, codec error), 2 bad command line;\n"
    "             client also 3 (refused by the server: certificate, revocation, TLS) and\n"
    "             4 (gave up: no round accepted within --give-up-after).\n"
    "`edgefl encode --help` lists every codec and its options.\n";

const char kEncodeUsage[] =
    "usage: edgefl encode --codec SPEC [--seed N] IN.npy OUT.efl\n"
    "\n"
    "Reads a float32 ('<f4') or float16 ('<f2') .npy array of any shape (flattened in C order),\n"
    "encodes it with SPEC and writes the encoding. A summary (n, bytes, bits/coord) goes to stderr.\n"
    "\n"
    "options:\n"
    "  --codec SPEC   codec spec, e.g. fp16, bf16, q8, q4:block=64, q8:shared=0.001, hq4, qsgd:s=15,\n"
    "                 tern, sign, topk:0.01+q4, topk:k=1000,idx=rice+fp16, thresh:0.01+q8, randk:0.1+q8\n"
    "  --seed N       seed of stochastic rounding, random-k and rotations (default 1; decimal or 0x hex)\n"
    "\n";

}  // namespace

const char kCodecSpecHelp[] =
    "codec specs (edgefl/codec.h; in a list, separate specs with ';'):\n"
    "  spec       := [sparsifier '+'] values | sparsifier | sketch | alias\n"
    "  sparsifier := topk:FRACTION | topk:k=COUNT [,approx] [,sample=FRACTION] "
    "[,idx=ef|rice|blockrice|auto]\n"
    "              | thresh:ABSVALUE [,idx=ef|rice|blockrice|auto]\n"
    "              | randk:FRACTION | randk:k=COUNT [,unscaled]\n"
    "  values     := fp32 | fp16 | bf16 [:ans]                 (bf16:ans: lossless)\n"
    "              | q1 | q2 | q4 | q8 [:block=N] [,det] [,sm] [,ans]    (sm: sign-magnitude; ans: rANS)\n"
    "              | q1 | q2 | q4 | q8 :shared=STEP [,clip] [,ans]       (summable without ans; clip: "
    "saturate)\n"
    "              | hq1 | hq2 | hq3 | hq4 [:block=N]                   (N a power of two, 16..1024)\n"
    "              | qsgd [:s=LEVELS] [,bucket=N] | tern [:block=N] | sign [:block=N]\n"
    "              | skc [:bins=256] [,groups=8] [,rows=2] [,cols=0.3] [,k=128]   (SKCompress)\n"
    "  sketch     := cs [:CELLS | cells=FRACTION | cols=C] [,rows=5] [,top=FRACTION | k=COUNT] [,step=STEP]\n"
    "  alias      := sparq:FRACTION = topk:FRACTION,approx,idx=auto+q4:sm,ans   (edgefl's sparse codec)\n"
    "  examples: bf16 q8 q4:block=64,det q8:shared=0.001,clip hq4 qsgd:s=15 tern sign topk:0.01+q4:sm,ans\n"
    "            thresh:0.01+q8 randk:0.1+q8 sparq:0.1 topk:0.1+skc skc cs:0.1 cs:cols=2000,rows=3,k=100\n"
    "            bf16:ans\n";

namespace {

const char kDecodeUsage[] =
    "usage: edgefl decode IN.efl OUT.npy\n"
    "\n"
    "Verifies the encoding, decodes it and writes a 1-D float32 .npy array of its n coordinates\n"
    "(coordinates a sparse encoding does not carry are 0).\n";

const char kInspectUsage[] =
    "usage: edgefl inspect [--json] IN.efl\n"
    "\n"
    "Verifies the header and the checksum of an encoding (the payload is not decoded) and prints\n"
    "its fields, byte counts and bits per coordinate / per non-zero.\n"
    "\n"
    "options:\n"
    "  --json   print one JSON object instead of text\n";

const char kAddUsage[] =
    "usage: edgefl add A.efl B.efl OUT.efl\n"
    "\n"
    "Writes the encoding of decode(A) + decode(B) without decoding to floats. Works for encodings\n"
    "whose codes add as integers or exact floats: shared-scale uniform codes (qB:shared=STEP) and fp32\n"
    "values, dense or random-k with the same seed. Top-k, per-block-scaled and rotated codes need a\n"
    "decode and a re-encode.\n";

const char kBenchUsage[] =
    "usage: edgefl bench [--input IN.npy]... [--codecs LIST] [--reps N] [--json OUT.jsonl] [--quick]\n"
    "                    [--no-bench1m] [--no-real] [--sparse] [--kernels] [--peers]\n"
    "\n"
    "Measures every codec in LIST on Bench-1M (2^20 synthetic gradient-like floats, seed 42) and on\n"
    "each --input, with baselines memcpy and nth_element:0.01 measured in the same run. Prints a table\n"
    "on stdout; --json writes one JSON object per (dataset, codec) line.\n"
    "\n"
    "options:\n"
    "  --input IN.npy   add a dataset (float32 or float16 .npy, flattened); repeatable\n"
    "  --codecs LIST    ';'-separated specs (quote it in the shell); shared=<auto> and thresh:<auto>\n"
    "                   are computed from each dataset. Default: every codec family.\n"
    "  --reps N         repetitions (seeds 1..N); times are medians, errors means (default 7)\n"
    "  --quick          3 repetitions unless --reps is given\n"
    "  --json FILE      write JSON lines to FILE\n"
    "  --no-bench1m     only the --input datasets\n"
    "  --no-real        skip the real Fashion-MNIST CNN update (trained first, about 5 s)\n"
    "  --sparse         add Sparse-1M@1% and Sparse-1M@10% (uniform random keys, Gaussian values: the\n"
    "                   SKCompress re-simulation setting)\n"
    "  --kernels        measure skc bucketing and the entropy coders on the first dataset\n"
    "  --peers          add BytePS's onebit, randomk (1%, 10%) and topk (1%) compressors, re-implemented\n"
    "                   from their published code and measured the same way (bench_peers.cpp)\n";

struct OptionDef {
  const char* name;  // "--codec"
  bool takes_value;
  bool repeatable;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;
  bool help = false;

  bool has(const std::string& name) const {
    for (const auto& o : options) {
      if (o.first == name) return true;
    }
    return false;
  }
  std::string value(const std::string& name) const {
    for (const auto& o : options) {
      if (o.first == name) return o.second;
    }
    return std::string();
  }
  std::vector<std::string> values(const std::string& name) const {
    std::vector<std::string> v;
    for (const auto& o : options) {
      if (o.first == name) v.push_back(o.second);
    }
    return v;
  }
};

// Parses argv[first, argc): options (`--name value`, `--name=value`, flags) anywhere, `--` ends
// options, -h/--help sets `help`.
bool parse_args(int argc, const char* const* argv, int first, const std::vector<OptionDef>& defs,
                ParsedArgs* args, std::string* error) {
  bool options_done = false;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i] != nullptr ? argv[i] : "";
    if (options_done || arg.size() < 2 || arg[0] != '-') {
      args->positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      args->help = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const OptionDef* def = nullptr;
    for (const OptionDef& d : defs) {
      if (name == d.name) def = &d;
    }
    if (def == nullptr) {
      *error = "unknown option '" + name + "'";
      return false;
    }
    if (!def->repeatable && args->has(name)) {
      *error = "option '" + name + "' given twice";
      return false;
    }
    std::string value;
    if (def->takes_value) {
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < argc && argv[i + 1] != nullptr) {
        value = argv[++i];
      } else {
        *error = "option '" + name + "' needs a value";
        return false;
      }
    } else if (eq != std::string::npos) {
      *error = "option '" + name + "' takes no value";
      return false;
    }
    args->options.emplace_back(name, value);
  }
  return true;
}

bool parse_u64(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  uint64_t v = 0;
  size_t i = 0;
  unsigned base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    i = 2;
  }
  for (; i < text.size(); ++i) {
    const char c = text[i];
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      digit = static_cast<unsigned>(c - 'A' + 10);
    } else {
      return false;
    }
    if (v > (UINT64_MAX - digit) / base) return false;
    v = v * base + digit;
  }
  *out = v;
  return true;
}

bool parse_positive_int(const std::string& text, int max, int* out) {
  uint64_t v = 0;
  if (!parse_u64(text, &v) || v < 1 || v > static_cast<uint64_t>(max)) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string status_text(Status s) {
  std::string text = status_name(s);
  const char* message = status_message(s);
  if (message != nullptr && message[0] != '\0') {
    text += " (";
    text += message;
    text += ")";
  }
  return text;
}

std::string flags_text(const EncodedInfo& info) {
  std::string s;
  auto add = [&s](const char* flag) {
    if (!s.empty()) s += ",";
    s += flag;
  };
  if (info.stochastic) add("stochastic");
  if (info.shared_scale) add("shared_scale");
  if (info.randk_unscaled) add("randk_unscaled");
  if (info.randk_permuted) add("randk_permuted");
  if (info.entropy_coded) add("entropy_coded");
  if (info.rans_wide) add("rans_wide");
  if (info.sign_magnitude) add("sign_magnitude");
  return s.empty() ? "none" : s;
}

std::string hex32(uint32_t v) {
  char buf[16];
  snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string float9(double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

bool is_sparse(const EncodedInfo& info) {
  return info.sparsifier != SparsifierKind::kNone;
}

// Names the header fields in which `a` and `b` differ (for kIncompatible).
std::string describe_differences(const EncodedInfo& a, const EncodedInfo& b) {
  std::string s;
  auto diff = [&s](const char* field, const std::string& va, const std::string& vb) {
    if (va == vb) return;
    if (!s.empty()) s += ", ";
    s += std::string(field) + " " + va + " vs " + vb;
  };
  diff("n", std::to_string(a.n), std::to_string(b.n));
  diff("sparsifier", sparsifier_name(a.sparsifier), sparsifier_name(b.sparsifier));
  diff("values", value_coder_name(a.values), value_coder_name(b.values));
  diff("bits", std::to_string(a.bits), std::to_string(b.bits));
  diff("block", std::to_string(a.block), std::to_string(b.block));
  diff("levels", std::to_string(a.levels), std::to_string(b.levels));
  diff("flags", flags_text(a), flags_text(b));
  diff("param (step/threshold)", float9(a.param), float9(b.param));
  if (a.sparsifier == SparsifierKind::kRandomK || b.sparsifier == SparsifierKind::kRandomK) {
    diff("nnz", std::to_string(a.nnz), std::to_string(b.nnz));
    diff("seed", std::to_string(a.seed), std::to_string(b.seed));
  }
  return s.empty() ? "the header fields agree; the core rejected another parameter" : s;
}

void print_inspect_text(const std::string& path, const EncodedInfo& info, std::ostream& out) {
  auto row = [&out](const char* key, const std::string& value) {
    char buf[32];
    snprintf(buf, sizeof buf, "%-16s", key);
    out << buf << value << "\n";
  };
  row("file", path);
  row("spec", spec_of_encoding(info));
  row("version", std::to_string(info.version));
  row("sparsifier", sparsifier_name(info.sparsifier));
  row("values", value_coder_name(info.values));
  row("index_coding", index_coding_name(info.index_coding));
  row("n", std::to_string(info.n));
  row("nnz", std::to_string(info.nnz));
  row("bits", std::to_string(info.bits));
  row("block", std::to_string(info.block));
  row("levels", std::to_string(info.levels));
  row("flags", flags_text(info));
  row("param", float9(info.param));
  row("seed", std::to_string(info.seed));
  row("contributions", std::to_string(info.contributions));
  row("header_bytes", std::to_string(info.header_bytes));
  row("index_bytes", std::to_string(info.index_bytes));
  row("value_bytes", std::to_string(info.value_bytes));
  row("total_bytes", std::to_string(info.total_bytes));
  row("bits_per_coord",
      info.n > 0 ? fixed(static_cast<double>(info.total_bytes) * 8.0 / info.n, 4) : std::string("-"));
  if (is_sparse(info)) {
    row("bits_per_nnz",
        info.nnz > 0 ? fixed(static_cast<double>(info.total_bytes) * 8.0 / info.nnz, 4) : std::string("-"));
  }
  row("checksum", hex32(info.checksum) + " (crc32c, verified)");
}

void print_inspect_json(const std::string& path, const EncodedInfo& info, std::ostream& out) {
  JsonObjectWriter w;
  w.add_string("file", path)
      .add_string("spec", spec_of_encoding(info))
      .add_uint("version", info.version)
      .add_string("sparsifier", sparsifier_name(info.sparsifier))
      .add_string("values", value_coder_name(info.values))
      .add_string("index_coding", index_coding_name(info.index_coding))
      .add_uint("n", info.n)
      .add_uint("nnz", info.nnz)
      .add_uint("bits", info.bits)
      .add_uint("block", info.block)
      .add_uint("levels", info.levels)
      .add_string("flags", flags_text(info))
      .add_bool("stochastic", info.stochastic)
      .add_bool("shared_scale", info.shared_scale)
      .add_bool("randk_unscaled", info.randk_unscaled)
      .add_bool("randk_permuted", info.randk_permuted)
      .add_bool("entropy_coded", info.entropy_coded)
      .add_bool("rans_wide", info.rans_wide)
      .add_bool("sign_magnitude", info.sign_magnitude)
      .add_number("param", info.param)
      .add_uint("seed", info.seed)
      .add_uint("contributions", info.contributions)
      .add_uint("header_bytes", info.header_bytes)
      .add_uint("index_bytes", info.index_bytes)
      .add_uint("value_bytes", info.value_bytes)
      .add_uint("total_bytes", info.total_bytes);
  if (info.n > 0) {
    w.add_number("bits_per_coord", static_cast<double>(info.total_bytes) * 8.0 / info.n, 7);
  } else {
    w.add_null("bits_per_coord");
  }
  if (is_sparse(info) && info.nnz > 0) {
    w.add_number("bits_per_nnz", static_cast<double>(info.total_bytes) * 8.0 / info.nnz, 7);
  } else {
    w.add_null("bits_per_nnz");
  }
  w.add_string("checksum", hex32(info.checksum));
  out << w.str() << "\n";
}

int usage_error(std::ostream& err, const char* command, const std::string& message, const char* usage) {
  err << "edgefl " << command << ": " << message << "\n" << usage;
  return kExitUsage;
}

// --- edgefl certs: the development PKI (net/certs.h) ---------------------------------------------
const char kCertsUsage[] =
    "usage: edgefl certs --out DIR --devices N [--server-name NAME]... [--days D] [--ca-name NAME] "
    "[--force]\n"
    "       edgefl certs --issue-device ID --ca DIR --out-cert FILE --out-key FILE\n"
    "                    [--not-before UNIX] [--not-after UNIX | --days D] [--force]\n"
    "\n"
    "Writes a development PKI for mutual TLS: ECDSA P-256 keys, SHA-256 signatures.\n"
    "  DIR/ca.crt, DIR/ca.key              the CA (keep ca.key private: it can admit any device)\n"
    "  DIR/server.crt, DIR/server.key      edgefl-server's certificate (serverAuth; one SAN per name)\n"
    "  DIR/devices/device-NNNN.{crt,key}   one per device (clientAuth; CN = the device id)\n"
    "Key files are written with mode 0600. Existing files are kept unless --force.\n"
    "The second form issues one more device certificate from the CA in DIR (ca.crt + ca.key), e.g.\n"
    "an expired one for tests (--not-before/--not-after in seconds since 1970, UTC).\n"
    "\n"
    "options:\n"
    "  --out DIR            output directory (created if missing)\n"
    "  --devices N          number of device certificates, 0..99999 (default 0)\n"
    "  --server-name NAME   a DNS name or IP address the server answers to; repeatable\n"
    "                       (default: localhost and 127.0.0.1; the first is the subject CN)\n"
    "  --days D             validity in days from now (default 365; certificates start 1 h ago)\n"
    "  --ca-name NAME       the CA's common name (default \"edgefl development CA\")\n"
    "  --force              overwrite existing files\n"
    "  --issue-device ID    the device id ([A-Za-z0-9._-]{1,64})\n"
    "  --ca DIR             the directory holding ca.crt and ca.key\n"
    "  --out-cert FILE, --out-key FILE   where the certificate and the key go\n"
    "  --not-before UNIX    start of validity (default: now - 1 h)\n"
    "  --not-after UNIX     end of validity (default: now + --days)\n";

#if EDGEFL_CLI_HAVE_NET
// A decimal int64 with an optional leading '-'.
bool parse_i64(const std::string& text, int64_t* out) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (digits.empty() || (digits.size() > 1 && (digits[1] == 'x' || digits[1] == 'X'))) return false;
  uint64_t v = 0;
  if (!parse_u64(digits, &v) || v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}
#endif

int run_certs_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  const std::vector<OptionDef> defs = {
      {"--out", true, false},          {"--devices", true, false},    {"--server-name", true, true},
      {"--days", true, false},         {"--ca-name", true, false},    {"--force", false, false},
      {"--issue-device", true, false}, {"--ca", true, false},         {"--out-cert", true, false},
      {"--out-key", true, false},      {"--not-before", true, false}, {"--not-after", true, false}};
  ParsedArgs args;
  std::string error;
  if (!parse_args(argc, argv, 2, defs, &args, &error)) return usage_error(err, "certs", error, kCertsUsage);
  if (args.help) {
    out << kCertsUsage;
    return kExitOk;
  }
  if (!args.positional.empty()) {
    return usage_error(err, "certs", "unexpected argument '" + args.positional[0] + "'", kCertsUsage);
  }
  int days = 365;
  if (args.has("--days") && !parse_positive_int(args.value("--days"), 36500, &days)) {
    return usage_error(err, "certs", "--days needs an integer in [1, 36500]", kCertsUsage);
  }
  const bool issue = args.has("--issue-device");
  const std::vector<const char*> pki_only = {"--out", "--devices", "--server-name", "--ca-name"};
  const std::vector<const char*> issue_only = {"--ca", "--out-cert", "--out-key", "--not-before",
                                               "--not-after"};
  for (const char* name : issue ? pki_only : issue_only) {
    if (args.has(name)) {
      return usage_error(err, "certs",
                         std::string(name) + (issue ? " is not an option of --issue-device"
                                                    : " is an option of --issue-device"),
                         kCertsUsage);
    }
  }
#if EDGEFL_CLI_HAVE_NET
  if (issue) {
    for (const char* name : {"--ca", "--out-cert", "--out-key"}) {
      if (args.value(name).empty()) {
        return usage_error(err, "certs", std::string("--issue-device needs ") + name, kCertsUsage);
      }
    }
    if (args.has("--not-after") && args.has("--days")) {
      return usage_error(err, "certs", "give --not-after or --days, not both", kCertsUsage);
    }
    const int64_t now = static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    int64_t not_before = now - 3600;
    int64_t not_after = now + int64_t{86400} * days;
    if (args.has("--not-before") && !parse_i64(args.value("--not-before"), &not_before)) {
      return usage_error(err, "certs", "--not-before needs seconds since 1970 (an integer)", kCertsUsage);
    }
    if (args.has("--not-after") && !parse_i64(args.value("--not-after"), &not_after)) {
      return usage_error(err, "certs", "--not-after needs seconds since 1970 (an integer)", kCertsUsage);
    }
    const Status s = cli::issue_device_cert(args.value("--ca"), args.value("--issue-device"), not_before,
                                            not_after, args.value("--out-cert"), args.value("--out-key"),
                                            &error, args.has("--force"));
    if (s != Status::kOk) {
      err << "edgefl certs: " << error << "\n";
      return s == Status::kInvalidArgument ? kExitUsage : kExitFailure;
    }
    out << "wrote " << args.value("--out-cert") << " and " << args.value("--out-key") << " (device "
        << args.value("--issue-device") << ")\n";
    return kExitOk;
  }
  if (args.value("--out").empty()) return usage_error(err, "certs", "--out DIR is required", kCertsUsage);
  cli::DevPkiOptions options;
  options.out_dir = args.value("--out");
  if (args.has("--devices")) {
    uint64_t devices = 0;
    if (!parse_u64(args.value("--devices"), &devices) || devices > 99999) {
      return usage_error(err, "certs", "--devices needs an integer in [0, 99999]", kCertsUsage);
    }
    options.devices = static_cast<uint32_t>(devices);
  }
  if (args.has("--server-name")) options.server_names = args.values("--server-name");
  options.valid_days = static_cast<uint32_t>(days);
  if (args.has("--ca-name")) options.ca_name = args.value("--ca-name");
  options.force = args.has("--force");
  const Status s = cli::write_dev_pki(options, &error);
  if (s != Status::kOk) {
    err << "edgefl certs: " << error << "\n";
    return s == Status::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  std::string names;
  for (const std::string& name : options.server_names) names += (names.empty() ? "" : ", ") + name;
  out << "wrote " << options.out_dir << "/ca.{crt,key}, " << options.out_dir << "/server.{crt,key} (" << names
      << ")";
  if (options.devices > 0) {
    out << " and " << options.devices << " device certificate" << (options.devices == 1 ? "" : "s") << " in "
        << options.out_dir << "/devices";
  }
  out << "; valid " << options.valid_days << " days\n";
  return kExitOk;
#else
  err << "edgefl certs: this edgefl was built without TLS (configure with -DEDGEFL_BUILD_NET=ON)\n";
  return kExitFailure;
#endif
}

}  // namespace

std::string spec_of_encoding(const EncodedInfo& info) {
  auto g9 = [](double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  const std::string k = "k=" + std::to_string(info.nnz);
  const std::string idx = info.index_coding == IndexCoding::kEliasFano   ? ",idx=ef"
                          : info.index_coding == IndexCoding::kRice      ? ",idx=rice"
                          : info.index_coding == IndexCoding::kBlockRice ? ",idx=blockrice"
                                                                         : "";
  std::string sparsifier;
  switch (info.sparsifier) {
    case SparsifierKind::kNone: break;
    case SparsifierKind::kTopK: sparsifier = "topk:" + k + idx; break;
    case SparsifierKind::kTopKApprox: sparsifier = "topk:" + k + ",approx" + idx; break;
    case SparsifierKind::kThreshold: sparsifier = "thresh:" + g9(info.param) + idx; break;
    case SparsifierKind::kRandomK:
      sparsifier = "randk:" + k + (info.randk_unscaled ? ",unscaled" : "");
      break;
  }
  const std::string block = "block=" + std::to_string(info.block);
  std::string values;
  switch (info.values) {
    case ValueCoderKind::kFp32: values = "fp32"; break;
    case ValueCoderKind::kFp16: values = "fp16"; break;
    case ValueCoderKind::kBf16: values = info.entropy_coded ? "bf16:ans" : "bf16"; break;
    case ValueCoderKind::kUniform:
      values = "q" + std::to_string(info.bits) + ":";
      if (info.shared_scale) {
        values += "shared=" + g9(info.param);
      } else {
        values += block;
        if (!info.stochastic) values += ",det";
        if (info.sign_magnitude) values += ",sm";
        if (info.entropy_coded) values += ",ans";
      }
      break;
    case ValueCoderKind::kQsgd:
      values = "qsgd:s=" + std::to_string(info.levels) + ",bucket=" + std::to_string(info.block);
      break;
    case ValueCoderKind::kTernGrad: values = "tern:" + block; break;
    case ValueCoderKind::kScaledSign: values = "sign:" + block; break;
    case ValueCoderKind::kHadamard: values = "hq" + std::to_string(info.bits) + ":" + block; break;
    case ValueCoderKind::kSkCompress:
      values = "skc:bins=" + std::to_string(info.block) + ",groups=" + std::to_string(info.levels >> 4) +
               ",rows=" + std::to_string(info.levels & 15) + ",cols=" + g9(info.param);
      break;
    case ValueCoderKind::kCountSketch:
      return "cs:cols=" + std::to_string(info.block) + ",rows=" + std::to_string(info.levels) + "," + k +
             ",step=" + g9(info.param);
  }
  return sparsifier.empty() ? values : sparsifier + "+" + values;
}

const char* cli_version() {
  return EDGEFL_CLI_VERSION;
}

bool load_encoding(const std::string& path, std::vector<uint8_t>* bytes, EncodedInfo* info,
                   std::string* error) {
  if (!read_file_bytes(path, kMaxEncodingFileBytes, bytes, error)) return false;
  const Status s = inspect({bytes->data(), bytes->size()}, info);
  if (s != Status::kOk) {
    *error = path + ": not a valid edgefl encoding: " + status_text(s);
    return false;
  }
  if (info->total_bytes != bytes->size()) {
    *error = path + ": the file is " + std::to_string(bytes->size()) + " bytes but the encoding is " +
             std::to_string(info->total_bytes) + " (trailing data)";
    return false;
  }
  return true;
}

std::string not_summable_reason(const EncodedInfo& info) {
  if (is_summable(info)) return "";
  static const char kTail[] =
      "; only shared-scale integer codes (q<bits>:shared=STEP), fp32 values (dense or shared-seed "
      "random-k) and Count Sketches (cs) can be added without decoding (decode both, add, and re-encode "
      "instead)";
  std::string why;
  switch (info.sparsifier) {
    case SparsifierKind::kTopK:
    case SparsifierKind::kTopKApprox: why = "top-k encodings choose their own indices"; break;
    case SparsifierKind::kThreshold: why = "threshold encodings choose their own indices"; break;
    case SparsifierKind::kNone:
    case SparsifierKind::kRandomK: break;
  }
  if (why.empty()) {
    switch (info.values) {
      case ValueCoderKind::kUniform:
        why = info.shared_scale && info.entropy_coded
                  ? "these shared-scale codes are rANS-coded (ans): a stream, not integers in place"
              : info.shared_scale ? "these shared-scale codes are not summable"
                                  : "uniform codes with a per-block min and step do not add as integers";
        break;
      case ValueCoderKind::kFp16: why = "fp16 values would need rounding again after the sum"; break;
      case ValueCoderKind::kBf16: why = "bf16 values would need rounding again after the sum"; break;
      case ValueCoderKind::kQsgd: why = "QSGD levels are scaled by each bucket's own norm"; break;
      case ValueCoderKind::kTernGrad: why = "TernGrad codes are scaled by each block's own max |x|"; break;
      case ValueCoderKind::kScaledSign: why = "sign codes are scaled by each block's own mean |x|"; break;
      case ValueCoderKind::kHadamard:
        why = "Hadamard (hq) codes are Lloyd-Max levels of a rotated, per-block-scaled vector";
        break;
      case ValueCoderKind::kFp32: why = "these fp32 encodings are not summable"; break;
      case ValueCoderKind::kSkCompress:
        why = "SKCompress buckets, sketches and keys are chosen per update (min/max cells do not add)";
        break;
      case ValueCoderKind::kCountSketch: break;  // always summable
    }
  }
  return why + kTail;
}

int run_encode(const std::string& spec_text, uint64_t seed, const std::string& in_npy,
               const std::string& out_efl, std::ostream& err) {
  CodecSpec spec;
  Status s = parse_codec_spec(spec_text.c_str(), &spec);
  if (s != Status::kOk) {
    err << "edgefl encode: invalid codec spec '" << spec_text << "': " << status_text(s)
        << "; see `edgefl encode --help`\n";
    return kExitFailure;
  }
  NpyArray array;
  std::string error;
  if (!read_npy_file(in_npy, &array, &error)) {
    err << "edgefl encode: " << error << "\n";
    return kExitFailure;
  }
  const size_t n = array.values.size();
  const size_t ws_bytes = workspace_size(spec, n);
  const size_t cap = encoded_bound(spec, n);
  std::vector<uint8_t> workspace(ws_bytes > 0 ? ws_bytes : 1);
  std::vector<uint8_t> out(cap > 0 ? cap : 1);
  size_t written = 0;
  const auto start = std::chrono::steady_clock::now();
  s = encode(spec, {array.values.data(), n}, seed, {workspace.data(), ws_bytes}, {out.data(), cap}, &written);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (s != Status::kOk) {
    err << "edgefl encode: " << in_npy << ": " << status_text(s);
    if (s == Status::kNonFiniteInput) {
      for (size_t i = 0; i < n; ++i) {
        if (!isfinite(array.values[i])) {
          err << "; first at flat index " << i << " (" << float9(array.values[i]) << ")";
          break;
        }
      }
    }
    err << "\n";
    return kExitFailure;
  }
  if (written > cap) {
    err << "edgefl encode: internal error: " << written << " bytes written, bound " << cap << "\n";
    return kExitFailure;
  }
  if (!write_file_bytes(out_efl, out.data(), written, &error)) {
    err << "edgefl encode: " << error << "\n";
    return kExitFailure;
  }
  char canonical[256];
  format_codec_spec(spec, canonical, sizeof canonical);
  err << "edgefl encode: " << canonical << " seed=" << seed << ": n=" << n << " bytes=" << written
      << " bits/coord=" << (n > 0 ? fixed(static_cast<double>(written) * 8.0 / n, 4) : std::string("-"))
      << " (" << fixed(ms, 2) << " ms)\n";
  return kExitOk;
}

int run_decode(const std::string& in_efl, const std::string& out_npy, std::ostream& err) {
  std::vector<uint8_t> bytes;
  EncodedInfo info;
  std::string error;
  if (!load_encoding(in_efl, &bytes, &info, &error)) {
    err << "edgefl decode: " << error << "\n";
    return kExitFailure;
  }
  std::vector<float> values(info.n);
  std::vector<uint8_t> workspace(decode_fast_workspace_size(info));
  const Status s = decode({bytes.data(), bytes.size()}, {values.data(), values.size()},
                          {workspace.data(), workspace.size()});
  if (s != Status::kOk) {
    err << "edgefl decode: " << in_efl << ": " << status_text(s) << "\n";
    return kExitFailure;
  }
  if (!write_npy_f32_file(out_npy, values.data(), values.size(), &error)) {
    err << "edgefl decode: " << error << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

int run_inspect(const std::string& in_efl, bool json, std::ostream& out, std::ostream& err) {
  std::vector<uint8_t> bytes;
  EncodedInfo info;
  std::string error;
  if (!load_encoding(in_efl, &bytes, &info, &error)) {
    err << "edgefl inspect: " << error << "\n";
    return kExitFailure;
  }
  if (json) {
    print_inspect_json(in_efl, info, out);
  } else {
    print_inspect_text(in_efl, info, out);
  }
  return kExitOk;
}

int run_add(const std::string& a_efl, const std::string& b_efl, const std::string& out_efl,
            std::ostream& err) {
  std::vector<uint8_t> a, b;
  EncodedInfo a_info, b_info;
  std::string error;
  if (!load_encoding(a_efl, &a, &a_info, &error) || !load_encoding(b_efl, &b, &b_info, &error)) {
    err << "edgefl add: " << error << "\n";
    return kExitFailure;
  }
  for (const auto* side : {&a_info, &b_info}) {
    if (!is_summable(*side)) {
      err << "edgefl add: " << (side == &a_info ? a_efl : b_efl) << " (" << sparsifier_name(side->sparsifier)
          << " + " << value_coder_name(side->values)
          << ") cannot be added without decoding: " << not_summable_reason(*side) << "\n";
      return kExitFailure;
    }
  }
  const size_t cap = add_encoded_bound(a_info, b_info);
  std::vector<uint8_t> out(cap > 0 ? cap : 1);
  size_t written = 0;
  const Status s = add_encoded({a.data(), a.size()}, {b.data(), b.size()}, {out.data(), cap}, &written);
  if (s != Status::kOk) {
    err << "edgefl add: " << status_text(s);
    if (s == Status::kNotSummable) {
      err << ": " << not_summable_reason(a_info);
    } else if (s == Status::kIncompatible) {
      err << ": " << describe_differences(a_info, b_info);
    } else if (s == Status::kOverflow) {
      err << ": a summed code does not fit in 32 bits; use a larger shared step";
    }
    err << "\n";
    return kExitFailure;
  }
  if (written > cap) {
    err << "edgefl add: internal error: " << written << " bytes written, bound " << cap << "\n";
    return kExitFailure;
  }
  if (!write_file_bytes(out_efl, out.data(), written, &error)) {
    err << "edgefl add: " << error << "\n";
    return kExitFailure;
  }
  EncodedInfo sum_info;
  if (inspect({out.data(), written}, &sum_info) == Status::kOk) {
    err << "edgefl add: " << out_efl << ": n=" << sum_info.n << " bytes=" << written
        << " contributions=" << sum_info.contributions << " bits=" << unsigned{sum_info.bits} << "\n";
  } else {
    err << "edgefl add: warning: the sum written to " << out_efl << " does not inspect cleanly\n";
    return kExitFailure;
  }
  return kExitOk;
}

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (argc < 2 || argv[1] == nullptr) {
    err << kUsage;
    return kExitUsage;
  }
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    out << kUsage;
    return kExitOk;
  }
  if (command == "-V" || command == "--version" || command == "version") {
    out << "edgefl " << cli_version() << "\n";
    return kExitOk;
  }

  ParsedArgs args;
  std::string error;
  if (command == "encode") {
    if (!parse_args(argc, argv, 2, {{"--codec", true, false}, {"--seed", true, false}}, &args, &error)) {
      return usage_error(err, "encode", error, kEncodeUsage);
    }
    if (args.help) {
      out << kEncodeUsage << kCodecSpecHelp;
      return kExitOk;
    }
    if (!args.has("--codec")) return usage_error(err, "encode", "--codec SPEC is required", kEncodeUsage);
    if (args.positional.size() != 2)
      return usage_error(err, "encode", "expected IN.npy OUT.efl", kEncodeUsage);
    uint64_t seed = kDefaultSeed;
    if (args.has("--seed") && !parse_u64(args.value("--seed"), &seed)) {
      return usage_error(err, "encode", "--seed needs an unsigned 64-bit integer", kEncodeUsage);
    }
    return run_encode(args.value("--codec"), seed, args.positional[0], args.positional[1], err);
  }
  if (command == "decode") {
    if (!parse_args(argc, argv, 2, {}, &args, &error)) return usage_error(err, "decode", error, kDecodeUsage);
    if (args.help) {
      out << kDecodeUsage;
      return kExitOk;
    }
    if (args.positional.size() != 2)
      return usage_error(err, "decode", "expected IN.efl OUT.npy", kDecodeUsage);
    return run_decode(args.positional[0], args.positional[1], err);
  }
  if (command == "inspect") {
    if (!parse_args(argc, argv, 2, {{"--json", false, false}}, &args, &error)) {
      return usage_error(err, "inspect", error, kInspectUsage);
    }
    if (args.help) {
      out << kInspectUsage;
      return kExitOk;
    }
    if (args.positional.size() != 1) return usage_error(err, "inspect", "expected one IN.efl", kInspectUsage);
    return run_inspect(args.positional[0], args.has("--json"), out, err);
  }
  if (command == "add") {
    if (!parse_args(argc, argv, 2, {}, &args, &error)) return usage_error(err, "add", error, kAddUsage);
    if (args.help) {
      out << kAddUsage;
      return kExitOk;
    }
    if (args.positional.size() != 3)
      return usage_error(err, "add", "expected A.efl B.efl OUT.efl", kAddUsage);
    return run_add(args.positional[0], args.positional[1], args.positional[2], err);
  }
  if (command == "sim") return run_sim_command(argc, argv, out, err);
  if (command == "certs") return run_certs_command(argc, argv, out, err);
#if defined(EDGEFL_CLI_HAVE_NET)
  if (command == "client") return run_client_command(argc, argv, out, err);
  if (command == "swarm") return run_swarm_command(argc, argv, out, err);
#endif
#if defined(EDGEFL_CLI_HAVE_SECAGG)
  if (command == "secagg-bench") return run_secagg_bench_command(argc, argv, out, err);
#endif
  if (command == "bench") {
    const std::vector<OptionDef> defs = {{"--input", true, true},     {"--codecs", true, false},
                                         {"--reps", true, false},     {"--json", true, false},
                                         {"--quick", false, false},   {"--no-bench1m", false, false},
                                         {"--no-real", false, false}, {"--sparse", false, false},
                                         {"--kernels", false, false}, {"--peers", false, false}};
    if (!parse_args(argc, argv, 2, defs, &args, &error)) return usage_error(err, "bench", error, kBenchUsage);
    if (args.help) {
      out << kBenchUsage << "\n" << kCodecSpecHelp;
      return kExitOk;
    }
    if (!args.positional.empty()) {
      return usage_error(err, "bench", "unexpected argument '" + args.positional[0] + "' (use --input)",
                         kBenchUsage);
    }
    BenchOptions options;
    options.inputs = args.values("--input");
    options.codecs = args.value("--codecs");
    if (args.has("--codecs") && split_codec_list(options.codecs).empty()) {
      return usage_error(err, "bench", "--codecs lists no codec", kBenchUsage);
    }
    if (args.has("--reps") && !parse_positive_int(args.value("--reps"), 100000, &options.reps)) {
      return usage_error(err, "bench", "--reps needs an integer in [1, 100000]", kBenchUsage);
    }
    options.quick = args.has("--quick");
    options.bench1m = !args.has("--no-bench1m");
    options.real_update = !args.has("--no-real") && !args.has("--no-bench1m");
    options.sparse = args.has("--sparse");
    options.kernels = args.has("--kernels");
    options.peers = args.has("--peers");
    options.json_path = args.value("--json");
    if (args.has("--json") && options.json_path.empty()) {
      return usage_error(err, "bench", "--json needs a file name", kBenchUsage);
    }
    return run_bench(options, out, err);
  }
  err << "edgefl: unknown command '" << command << "'\n" << kUsage;
  return kExitUsage;
}

}  // namespace cli
}  // namespace edgefl
