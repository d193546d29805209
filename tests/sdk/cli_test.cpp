// Tests of the edgefl command-line tool (sdk/cli/commands.h, sdk/cli/bench.h), run in-process.
#include "commands.h"

#include <doctest/doctest.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "edgefl/codec.h"
#include "file_io.h"
#include "npy.h"

namespace {

namespace cli = edgefl::cli;

// A fresh directory under $TMPDIR, removed with its files at the end of the test case.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "edgefl_cli_test_XXXXXX").string();
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<float> test_vector(size_t n) {
  return cli::make_bench1m(n, 7);
}

void write_npy(const std::string& path, const std::vector<float>& v) {
  std::string error;
  REQUIRE_MESSAGE(cli::write_npy_f32_file(path, v.data(), v.size(), &error), error);
}

std::vector<float> read_npy(const std::string& path) {
  cli::NpyArray array;
  std::string error;
  REQUIRE_MESSAGE(cli::read_npy_file(path, &array, &error), error);
  return array.values;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::vector<uint8_t> bytes;
  std::string error;
  REQUIRE_MESSAGE(cli::read_file_bytes(path, size_t{1} << 30, &bytes, &error), error);
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::string error;
  REQUIRE_MESSAGE(cli::write_file_bytes(path, bytes.data(), bytes.size(), &error), error);
}

double vnmse(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(x[i]) * x[i];
  }
  return num / den;
}

int encode_file(const std::string& spec, uint64_t seed, const std::string& in, const std::string& out,
                std::string* err_text = nullptr) {
  std::ostringstream err;
  const int rc = cli::run_encode(spec, seed, in, out, err);
  if (err_text != nullptr) *err_text = err.str();
  if (rc != 0 && err_text == nullptr) MESSAGE("encode " << spec << ": " << err.str());
  return rc;
}

int run(const std::vector<std::string>& args, std::string* out_text = nullptr,
        std::string* err_text = nullptr) {
  std::vector<const char*> argv = {"edgefl"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int rc = cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  if (out_text != nullptr) *out_text = out.str();
  if (err_text != nullptr) *err_text = err.str();
  return rc;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("--version, --help and usage errors") {
    std::string out, err;
    CHECK(run({"--version"}, &out) == 0);
    CHECK(out == "edgefl 0.1.0\n");
    CHECK(run({"--help"}, &out) == 0);
    CHECK(contains(out, "encode"));
    for (const char* cmd : {"encode", "decode", "inspect", "add", "bench"}) {
      CAPTURE(cmd);
      CHECK(run({cmd, "--help"}, &out) == 0);
      CHECK(contains(out, std::string("usage: edgefl ") + cmd));
    }
    CHECK(run({}, &out, &err) == cli::kExitUsage);
    CHECK(run({"frobnicate"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"encode", "in.npy", "out.efl"}, &out, &err) == cli::kExitUsage);  // no --codec
    CHECK(contains(err, "--codec"));
    CHECK(run({"encode", "--codec", "q8", "--seed", "-3", "a", "b"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"encode", "--codec", "q8", "--codec", "q4", "a", "b"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"decode", "only-one"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"inspect", "--bogus", "x.efl"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"add", "a", "b"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"bench", "--reps", "0"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"bench", "--no-bench1m"}, &out, &err) == cli::kExitUsage);
    CHECK(run({"bench", "--codecs", ";;"}, &out, &err) == cli::kExitUsage);
  }

  TEST_CASE("every command that takes a codec lists every codec and option in --help") {
    std::string out;
    for (std::vector<std::string> cmd : {std::vector<std::string>{"encode", "--help"}, {"bench", "--help"}}) {
      CAPTURE(cmd[0]);
      REQUIRE(run(cmd, &out) == 0);
      for (const char* word :
           {"sparq:", "skc", "cs ", "topk:", "randk:", "thresh:", ",sm", ",ans", "shared=", ",clip", "hq1",
            "qsgd", "tern", "sign", "idx=ef|rice|blockrice|auto", "unscaled"}) {
        CAPTURE(word);
        CHECK(contains(out, word));
      }
    }
    // The examples in the help all parse.
    const std::string help = cli::kCodecSpecHelp;
    const size_t at = help.find("examples:");
    REQUIRE(at != std::string::npos);
    std::istringstream examples(help.substr(at + 9));
    std::string spec;
    int count = 0;
    while (examples >> spec) {
      CAPTURE(spec);
      edgefl::CodecSpec parsed;
      CHECK(edgefl::parse_codec_spec(spec.c_str(), &parsed) == edgefl::Status::kOk);
      ++count;
    }
    CHECK(count >= 15);
  }

  TEST_CASE("inspect names a spec that encodes to the same format, and every flag") {
    std::vector<float> update(20000);
    uint64_t x = 7;
    for (float& v : update) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      v = float(int64_t(x >> 40) - (1 << 23)) * 1e-9f;
    }
    for (const char* text : {"sparq:0.1", "q8:shared=0.001,clip", "cs:0.1", "topk:0.1+skc", "skc",
                             "randk:0.1,unscaled+q8", "thresh:0.004+fp16", "qsgd:s=15", "hq3", "tern", "sign",
                             "q4:block=64,det", "topk:0.05,idx=ef+bf16", "q2:sm,ans", "fp32"}) {
      CAPTURE(text);
      auto encode_with = [&](const std::string& spec_text, edgefl::EncodedInfo* info) {
        edgefl::CodecSpec spec;
        REQUIRE(edgefl::parse_codec_spec(spec_text.c_str(), &spec) == edgefl::Status::kOk);
        std::vector<uint8_t> ws(edgefl::workspace_size(spec, update.size()));
        std::vector<uint8_t> out(edgefl::encoded_bound(spec, update.size()));
        size_t written = 0;
        REQUIRE(edgefl::encode(spec, {update.data(), update.size()}, 1, {ws.data(), ws.size()},
                               {out.data(), out.size()}, &written) == edgefl::Status::kOk);
        REQUIRE(edgefl::inspect({out.data(), written}, info) == edgefl::Status::kOk);
      };
      edgefl::EncodedInfo first, again;
      encode_with(text, &first);
      const std::string canonical = cli::spec_of_encoding(first);
      CAPTURE(canonical);
      encode_with(canonical, &again);
      CHECK(again.sparsifier == first.sparsifier);
      CHECK(again.values == first.values);
      CHECK(again.index_coding == first.index_coding);
      CHECK(again.bits == first.bits);
      CHECK(again.block == first.block);
      CHECK(again.levels == first.levels);
      CHECK(again.stochastic == first.stochastic);
      CHECK(again.shared_scale == first.shared_scale);
      CHECK(again.randk_unscaled == first.randk_unscaled);
      CHECK(again.sign_magnitude == first.sign_magnitude);
      CHECK(again.param == first.param);
    }
  }

  TEST_CASE("encode, inspect and decode round-trip through files") {
    TempDir dir;
    const std::vector<float> x = test_vector(5000);
    write_npy(dir.file("x.npy"), x);

    std::string err;
    REQUIRE(encode_file("fp32", 1, dir.file("x.npy"), dir.file("fp32.efl"), &err) == 0);
    CHECK(contains(err, "n=5000"));
    CHECK(contains(err, "bits/coord="));
    std::ostringstream out, err_stream;
    REQUIRE(cli::run_decode(dir.file("fp32.efl"), dir.file("fp32.npy"), err_stream) == 0);
    CHECK(read_npy(dir.file("fp32.npy")) == x);

    for (const std::string spec :
         {"q8", "q4:block=64", "fp16", "bf16", "hq4", "qsgd", "topk:0.1+q8", "randk:0.5+q8"}) {
      CAPTURE(spec);
      REQUIRE(encode_file(spec, 3, dir.file("x.npy"), dir.file("x.efl")) == 0);
      std::ostringstream text, json, e;
      CHECK(cli::run_inspect(dir.file("x.efl"), false, text, e) == 0);
      CHECK(contains(text.str(), "n               5000"));
      CHECK(contains(text.str(), "checksum"));
      CHECK(cli::run_inspect(dir.file("x.efl"), true, json, e) == 0);
      CHECK(contains(json.str(), "\"n\": 5000"));
      CHECK(contains(json.str(), "\"bits_per_coord\": "));
      CHECK(json.str().find('\n') == json.str().size() - 1);  // one line
      REQUIRE(cli::run_decode(dir.file("x.efl"), dir.file("y.npy"), e) == 0);
      const std::vector<float> y = read_npy(dir.file("y.npy"));
      REQUIRE(y.size() == x.size());
      CHECK(vnmse(x, y) < 2.0);  // random-k at 50% has vNMSE n/k - 1 = 1; QSGD's default is ~1.2
    }
    REQUIRE(encode_file("q8", 3, dir.file("x.npy"), dir.file("q8.efl")) == 0);
    std::ostringstream e;
    REQUIRE(cli::run_decode(dir.file("q8.efl"), dir.file("q8.npy"), e) == 0);
    CHECK(vnmse(x, read_npy(dir.file("q8.npy"))) < 1e-3);
  }

  TEST_CASE("the command line reaches the same functions") {
    TempDir dir;
    write_npy(dir.file("x.npy"), test_vector(1000));
    std::string out, err;
    CHECK(run({"encode", "--codec=q4", "--seed", "0x10", dir.file("x.npy"), dir.file("x.efl")}, &out, &err) ==
          0);
    CHECK(run({"inspect", "--json", dir.file("x.efl")}, &out, &err) == 0);
    CHECK(contains(out, "\"seed\": 16"));
    CHECK(run({"decode", dir.file("x.efl"), dir.file("y.npy")}, &out, &err) == 0);
    CHECK(read_npy(dir.file("y.npy")).size() == 1000);
  }

  TEST_CASE("float16 input is encoded") {
    TempDir dir;
    // 3 float16 values: 1.0, 2^-24 (subnormal), -2.0.
    const std::string header = "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }";
    std::vector<uint8_t> bytes = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(header.size() + 1), 0};
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.push_back('\n');
    for (uint16_t h : {0x3C00, 0x0001, 0xC000}) {
      bytes.push_back(static_cast<uint8_t>(h));
      bytes.push_back(static_cast<uint8_t>(h >> 8));
    }
    write_bytes(dir.file("h.npy"), bytes);
    REQUIRE(encode_file("fp32", 1, dir.file("h.npy"), dir.file("h.efl")) == 0);
    std::ostringstream e;
    REQUIRE(cli::run_decode(dir.file("h.efl"), dir.file("h_out.npy"), e) == 0);
    CHECK(read_npy(dir.file("h_out.npy")) == std::vector<float>{1.0f, 5.9604644775390625e-08f, -2.0f});
  }

  TEST_CASE("encode failures exit non-zero with a reason") {
    TempDir dir;
    write_npy(dir.file("x.npy"), test_vector(100));
    std::string err;
    CHECK(encode_file("q7", 1, dir.file("x.npy"), dir.file("x.efl"), &err) == cli::kExitFailure);
    CHECK(contains(err, "invalid codec spec"));
    CHECK(encode_file("q8", 1, dir.file("missing.npy"), dir.file("x.efl"), &err) == cli::kExitFailure);
    CHECK(contains(err, "missing.npy"));
    write_bytes(dir.file("garbage.npy"), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    CHECK(encode_file("q8", 1, dir.file("garbage.npy"), dir.file("x.efl"), &err) == cli::kExitFailure);
    CHECK(contains(err, "magic"));
    std::vector<float> bad = test_vector(100);
    bad[42] = NAN;
    write_npy(dir.file("nan.npy"), bad);
    CHECK(encode_file("q8", 1, dir.file("nan.npy"), dir.file("x.efl"), &err) == cli::kExitFailure);
    CHECK(contains(err, "flat index 42"));
    CHECK(encode_file("q8", 1, dir.file("x.npy"), dir.file("no-such-dir/x.efl"), &err) == cli::kExitFailure);
  }

  TEST_CASE("corrupted encodings give a non-zero exit and never crash") {
    TempDir dir;
    write_npy(dir.file("x.npy"), test_vector(700));
    for (const std::string spec :
         {"q4", "topk:0.05+q4", "topk:0.05,idx=rice+fp16", "randk:0.1+q8", "hq2", "tern", "sign"}) {
      CAPTURE(spec);
      REQUIRE(encode_file(spec, 5, dir.file("x.npy"), dir.file("good.efl")) == 0);
      const std::vector<uint8_t> good = read_bytes(dir.file("good.efl"));
      std::ostringstream sink;

      // Every truncation.
      for (size_t len = 0; len < good.size(); len += (len < 64 ? 1 : 7)) {
        write_bytes(dir.file("bad.efl"),
                    std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(len)));
        CHECK(cli::run_inspect(dir.file("bad.efl"), false, sink, sink) != 0);
        CHECK(cli::run_decode(dir.file("bad.efl"), dir.file("bad.npy"), sink) != 0);
      }
      // A trailing byte.
      std::vector<uint8_t> longer = good;
      longer.push_back(0);
      write_bytes(dir.file("bad.efl"), longer);
      CHECK(cli::run_decode(dir.file("bad.efl"), dir.file("bad.npy"), sink) != 0);
      // Every single-byte change is caught (by the header checks or by the CRC32C).
      for (size_t pos = 0; pos < good.size(); pos += (pos < 64 ? 1 : 5)) {
        std::vector<uint8_t> bad = good;
        bad[pos] ^= static_cast<uint8_t>(1u << (pos % 8));
        write_bytes(dir.file("bad.efl"), bad);
        CAPTURE(pos);
        CHECK(cli::run_decode(dir.file("bad.efl"), dir.file("bad.npy"), sink) != 0);
        CHECK(cli::run_add(dir.file("bad.efl"), dir.file("good.efl"), dir.file("sum.efl"), sink) != 0);
      }
    }
    // Arbitrary bytes and an empty file.
    uint64_t state = 12345;
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<uint8_t> bytes(static_cast<size_t>(trial) * 3);
      for (uint8_t& b : bytes) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        b = static_cast<uint8_t>(state >> 56);
      }
      if (bytes.size() >= 4) memcpy(bytes.data(), "EFLU", 4);
      write_bytes(dir.file("noise.efl"), bytes);
      std::ostringstream sink;
      CHECK(cli::run_inspect(dir.file("noise.efl"), true, sink, sink) != 0);
      CHECK(cli::run_decode(dir.file("noise.efl"), dir.file("noise.npy"), sink) != 0);
    }
    std::ostringstream sink;
    CHECK(cli::run_inspect(dir.file("does-not-exist.efl"), false, sink, sink) != 0);
    CHECK(cli::run_inspect(dir.file(""), false, sink, sink) != 0);  // a directory
  }

  TEST_CASE("add sums shared-scale encodings and explains why top-k cannot be summed") {
    TempDir dir;
    const std::vector<float> x = test_vector(3000);
    write_npy(dir.file("x.npy"), x);
    std::string resolved, error;
    REQUIRE(cli::resolve_auto_spec("q8:shared=<auto>", x.data(), x.size(), &resolved, &error));
    // Headroom for the sum: twice the step of max|x| / 127.
    edgefl::CodecSpec spec;
    REQUIRE(edgefl::parse_codec_spec(resolved.c_str(), &spec) == edgefl::Status::kOk);
    char step_text[64];
    snprintf(step_text, sizeof step_text, "%.9g", static_cast<double>(spec.shared_step * 2.0f));
    const std::string shared = std::string("q8:shared=") + step_text;

    REQUIRE(encode_file(shared, 1, dir.file("x.npy"), dir.file("a.efl")) == 0);
    REQUIRE(encode_file(shared, 2, dir.file("x.npy"), dir.file("b.efl")) == 0);
    std::ostringstream err;
    REQUIRE_MESSAGE(cli::run_add(dir.file("a.efl"), dir.file("b.efl"), dir.file("sum.efl"), err) == 0,
                    err.str());
    std::ostringstream out;
    REQUIRE(cli::run_inspect(dir.file("sum.efl"), true, out, err) == 0);
    CHECK(contains(out.str(), "\"contributions\": 2"));
    REQUIRE(cli::run_decode(dir.file("sum.efl"), dir.file("sum.npy"), err) == 0);
    std::vector<float> twice = x;
    for (float& v : twice) v *= 2.0f;
    CHECK(vnmse(twice, read_npy(dir.file("sum.npy"))) < 0.05);

    REQUIRE(encode_file("randk:0.1+fp32", 9, dir.file("x.npy"), dir.file("r1.efl")) == 0);
    REQUIRE(encode_file("randk:0.1+fp32", 9, dir.file("x.npy"), dir.file("r2.efl")) == 0);
    REQUIRE(encode_file("randk:0.1+fp32", 10, dir.file("x.npy"), dir.file("r3.efl")) == 0);
    std::ostringstream e2;
    CHECK(cli::run_add(dir.file("r1.efl"), dir.file("r2.efl"), dir.file("rsum.efl"), e2) == 0);
    std::ostringstream e3;
    CHECK(cli::run_add(dir.file("r1.efl"), dir.file("r3.efl"), dir.file("rsum.efl"), e3) ==
          cli::kExitFailure);
    CHECK(contains(e3.str(), "seed"));

    REQUIRE(encode_file("topk:0.01+q4", 1, dir.file("x.npy"), dir.file("t1.efl")) == 0);
    REQUIRE(encode_file("topk:0.01+q4", 2, dir.file("x.npy"), dir.file("t2.efl")) == 0);
    std::ostringstream e4;
    CHECK(cli::run_add(dir.file("t1.efl"), dir.file("t2.efl"), dir.file("tsum.efl"), e4) ==
          cli::kExitFailure);
    CHECK(contains(e4.str(), "top-k encodings choose their own indices"));

    REQUIRE(encode_file("q4", 1, dir.file("x.npy"), dir.file("q.efl")) == 0);
    std::ostringstream e5;
    CHECK(cli::run_add(dir.file("q.efl"), dir.file("q.efl"), dir.file("qsum.efl"), e5) == cli::kExitFailure);
    CHECK(contains(e5.str(), "per-block"));
  }

  TEST_CASE("Bench-1M is deterministic and shaped like a gradient") {
    const std::vector<float> a = cli::make_bench1m(4096), b = cli::make_bench1m(4096);
    CHECK(a == b);
    const std::vector<float> prefix = cli::make_bench1m(1000);
    CHECK(std::equal(prefix.begin(), prefix.end(), a.begin()));
    CHECK(cli::make_bench1m(4096, 43) != a);
    const std::vector<float> x = cli::make_bench1m();
    REQUIRE(x.size() == cli::kBench1MSize);
    double sum = 0, sq = 0;
    for (float v : x) {
      REQUIRE(isfinite(v));
      sum += v;
      sq += static_cast<double>(v) * v;
    }
    const double rms = sqrt(sq / static_cast<double>(x.size()));
    // E[x^2] = 1e-6 * E[s^2] = 1e-6 * e^2 for s ~ lognormal(0, 1).
    CHECK(rms > 1e-3 * 2.0);
    CHECK(rms < 1e-3 * 3.5);
    CHECK(fabs(sum / static_cast<double>(x.size())) < 1e-4);
  }

  TEST_CASE("codec lists and <auto> specs") {
    CHECK(cli::split_codec_list(" q8 ; topk:0.01,approx+q4;;fp16 ") ==
          std::vector<std::string>{"q8", "topk:0.01,approx+q4", "fp16"});
    const std::vector<std::string> defaults = cli::split_codec_list(cli::kDefaultBenchCodecs);
    CHECK(defaults.size() == 26);

    const std::vector<float> x = {0.5f, -2.0f, 1.0f, 0.25f};
    std::string resolved, error;
    REQUIRE(cli::resolve_auto_spec("q8:shared=<auto>", x.data(), x.size(), &resolved, &error));
    edgefl::CodecSpec spec;
    REQUIRE(edgefl::parse_codec_spec(resolved.c_str(), &spec) == edgefl::Status::kOk);
    CHECK(spec.shared_step > 0.0f);
    CHECK(2.0f / spec.shared_step <= 127.0f);
    CHECK(2.0f / spec.shared_step > 126.99f);

    REQUIRE(cli::resolve_auto_spec("topk:0.5+q4:shared=<auto>", x.data(), x.size(), &resolved, &error));
    CHECK(resolved.compare(0, 18, "topk:0.5+q4:shared") == 0);

    std::vector<float> big(1000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) - 500.0f;  // |x| up to 500
    REQUIRE(cli::resolve_auto_spec("thresh:<auto>+q8", big.data(), big.size(), &resolved, &error));
    CHECK(resolved == "thresh:495+q8");  // the 10 largest |x| are 500, 499, 499, ..., 495

    CHECK(cli::resolve_auto_spec("fp16", x.data(), x.size(), &resolved, &error));
    CHECK(resolved == "fp16");
    CHECK_FALSE(cli::resolve_auto_spec("qsgd:s=<auto>", x.data(), x.size(), &resolved, &error));
    const std::vector<float> zeros(10, 0.0f);
    CHECK_FALSE(cli::resolve_auto_spec("q8:shared=<auto>", zeros.data(), zeros.size(), &resolved, &error));
    CHECK_FALSE(cli::resolve_auto_spec("fp16:shared=<auto>", x.data(), x.size(), &resolved, &error));
  }

  TEST_CASE("bench --peers: BytePS's onebit, randomk and topk, their bits and errors as published") {
    const std::vector<float> x = test_vector(20000);
    const std::vector<cli::BenchResult> rows = cli::bench_byteps_peers("x", x.data(), x.size(), 2);
    REQUIRE(rows.size() == 4);
    for (const cli::BenchResult& r : rows) {
      CAPTURE(r.codec);
      CHECK(r.error.empty());
      CHECK(r.encode_gbps > 0);
      CHECK(r.decode_gbps > 0);
      CHECK(r.decode_add_gbps > 0);
      CHECK(r.memcpy_paired_gbps > 0);  // the baseline timed in the peer's own repetitions
    }
    // onebit: ceil(n / 32) words and a float; decoded to +-mean|x|, so its error is known.
    CHECK(rows[0].codec == "byteps:onebit");
    CHECK(rows[0].encoded_bytes == double((20000 + 31) / 32 * 4 + 4));
    double sum_abs = 0, energy = 0;
    for (float v : x) {
      sum_abs += std::fabs(double(v));
      energy += double(v) * v;
    }
    const float scale = float(sum_abs / double(x.size()));
    double err = 0;
    for (float v : x) {
      const double d = double(v < 0 ? -scale : scale) - v;
      err += d * d;
    }
    CHECK(rows[0].vnmse == doctest::Approx(err / energy).epsilon(1e-9));
    // randomk and topk: (u32, f32) pairs, 64 bits each; topk keeps the largest magnitudes, so its
    // error is exactly nth_element's.
    CHECK(rows[1].codec == "byteps:randomk:0.01");
    CHECK(rows[1].bits_per_nnz == 64.0);
    CHECK(rows[2].nnz == 2000.0);
    CHECK(rows[3].codec == "byteps:topk:0.01");
    const cli::BenchResult exact = cli::bench_nth_element("x", x.data(), x.size(), 0.01, 2);
    CHECK(rows[3].vnmse == doctest::Approx(exact.vnmse).epsilon(1e-9));
  }

  TEST_CASE("bench measures every codec, keeps going after a failure and writes JSON lines") {
    TempDir dir;
    write_npy(dir.file("small.npy"), test_vector(20000));
    cli::BenchOptions options;
    options.inputs = {dir.file("small.npy")};
    options.bench1m = false;
    options.real_update = false;  // only the input (the real update is covered by its own case)
    options.reps = 2;
    options.codecs = "fp32;q8;topk:0.01+q4;q8:shared=<auto>;thresh:<auto>+q8;randk:0.1+q8;nonsense";
    options.json_path = dir.file("out.jsonl");
    std::ostringstream out, err;
    CHECK(cli::run_bench(options, out, err) == cli::kExitFailure);  // "nonsense" fails
    CHECK(contains(err.str(), "nonsense"));
    CHECK(contains(out.str(), "memcpy"));
    CHECK(contains(out.str(), "nth_element:0.01"));
    CHECK(contains(out.str(), "FAILED"));

    std::ifstream json(options.json_path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(json, line);) lines.push_back(line);
    REQUIRE(lines.size() == 2 + 7);
    for (const std::string& line : lines) {
      CHECK(line.front() == '{');
      CHECK(line.back() == '}');
      CHECK(contains(line, "\"dataset\": \"small.npy\""));
    }
    CHECK(contains(lines[0], "\"codec\": \"memcpy\""));
    CHECK(contains(lines[2], "\"bits_per_nnz\": null"));  // fp32 is dense
    CHECK(contains(lines[3], "\"vnmse\": "));
    {
      // The Gaussian rate-distortion bound at q8's vNMSE, and the bits above it.
      auto number = [&](const std::string& line, const std::string& key) {
        const size_t at = line.find("\"" + key + "\": ");
        REQUIRE(at != std::string::npos);
        return std::strtod(line.c_str() + at + key.size() + 4, nullptr);
      };
      const double vnmse = number(lines[3], "vnmse");
      const double bound = number(lines[3], "gaussian_rd_bits");
      REQUIRE(vnmse > 0);
      CHECK(bound == doctest::Approx(0.5 * std::log2(1.0 / vnmse)).epsilon(1e-4));
      CHECK(number(lines[3], "rd_gap_bits") ==
            doctest::Approx(number(lines[3], "bits_per_coord") - bound).epsilon(1e-4));
      CHECK(contains(lines[2], "\"gaussian_rd_bits\": null"));  // fp32 is lossless
      // Each codec's ratio to memcpy divides by the memcpy timed in its own repetitions; the
      // baseline rows have no paired copy.
      for (size_t i = 2; i < 8; ++i) {
        CAPTURE(lines[i]);
        const double paired = number(lines[i], "memcpy_paired_gbps");
        REQUIRE(paired > 0);
        CHECK(number(lines[i], "ratio_to_memcpy") ==
              doctest::Approx(number(lines[i], "encode_gbps") / paired).epsilon(2e-3));
      }
      CHECK(contains(lines[0], "\"memcpy_paired_gbps\": null"));
      CHECK(contains(lines[1], "\"memcpy_paired_gbps\": null"));
    }
    CHECK(contains(lines[4], "\"count_error\": 0,"));  // exact top-k keeps k
    CHECK(contains(lines[5], "\"requested\": \"q8:shared=<auto>\""));
    CHECK(contains(lines[8], "\"error\": "));

    options.codecs = "fp32";
    options.json_path.clear();
    std::ostringstream out2, err2;
    CHECK(cli::run_bench(options, out2, err2) == 0);
  }

}  // TEST_SUITE
