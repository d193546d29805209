// edgefl sim on the real Fashion-MNIST data (installed by platforms/deps/setup.sh): a tiny MLP
// federation learns, accounts its bytes exactly, is deterministic whatever the thread timing,
// and the comparison report carries what it claims.
#include <doctest/doctest.h>
#include <math.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "edgefl/codec.h"
#include "edgefl/model.h"
#include "report.h"
#include "round/downlink.h"
#include "sim.h"
#if defined(EDGEFL_CLI_HAVE_SECAGG)
#include "secure_round.h"
#endif

namespace {

edgefl::cli::SimConfig tiny_config() {
  edgefl::cli::SimConfig c;
  c.model = "mlp:784-32-10";
  c.clients = 20;
  c.per_round = 4;
  c.rounds = 4;
  c.partition = "dirichlet:0.5";
  c.eval_samples = 2000;
  c.quiet = true;
  c.threads = 2;
  return c;
}

std::vector<edgefl::cli::RoundRecord> run(const edgefl::cli::SimConfig& c) {
  std::vector<edgefl::cli::RoundRecord> records;
  std::ostringstream log;
  const int code = edgefl::cli::run_sim(c, &records, log);
  INFO("sim log: ", log.str());
  REQUIRE(code == 0);
  REQUIRE(records.size() == c.rounds);
  return records;
}

}  // namespace

TEST_SUITE("sim") {
  TEST_CASE("a small federation learns Fashion-MNIST well above chance") {
    edgefl::cli::SimConfig c = tiny_config();
    c.rounds = 6;
    c.downlink = "full";  // the training itself; patched downloads lag in the first rounds (below)
    const auto records = run(c);
    CHECK(records.back().evaluated);
    CHECK(records.back().test_acc > 0.5);  // chance is 0.1
    CHECK(records.back().test_loss < records.front().test_loss);
  }

  TEST_CASE("uplink bytes are the clients' encodings, all-in") {
    edgefl::cli::SimConfig c = tiny_config();
    c.codec = "bf16";
    c.downlink = "full";
    const auto records = run(c);
    edgefl::ModelSpec model;
    REQUIRE(edgefl::parse_model_spec(c.model.c_str(), &model) == edgefl::Status::kOk);
    const size_t n = edgefl::parameter_count(model);
    // bf16: 2 bytes per parameter plus the header, per client.
    const uint64_t per_client = 2 * n + edgefl::kEncodedHeaderBytes;
    uint64_t cum = 0;
    for (const auto& r : records) {
      CHECK(r.uplink_bytes == per_client * c.per_round);
      // --downlink full: the whole model in bf16 every round, with its stream length prefix.
      CHECK(r.downlink_bytes == (per_client + edgefl::kStreamPrefixBytes) * c.per_round);
      cum += r.uplink_bytes;
      CHECK(r.cum_uplink_bytes == cum);
      CHECK(r.sim_time_s > 0);
    }
    // The link model: every round lasts at least the RTT plus one client's transfers.
    const double transfer = double(per_client) * 8 / 1e6 + double(per_client) * 8 / 10e6 + 0.05;
    CHECK(records.front().round_sim_s >= transfer);
  }

  TEST_CASE("the same seed gives the same rounds whatever the thread count") {
    edgefl::cli::SimConfig c = tiny_config();
    c.codec = "topk:0.05+q4";  // error feedback on (biased codec)
    c.threads = 1;
    const auto a = run(c);
    c.threads = 3;
    const auto b = run(c);
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].test_acc == b[i].test_acc);
      CHECK(a[i].uplink_bytes == b[i].uplink_bytes);
    }
    c.seed = 2;
    const auto d = run(c);
    CHECK(d.back().test_acc != a.back().test_acc);
  }

  TEST_CASE("patched downloads: nothing in round 1, then the patches since a client's version, capped") {
    edgefl::cli::SimConfig c = tiny_config();
    c.codec = "sparq:0.1";
    c.downlink = "full";
    const auto full = run(c);
    c.downlink = "sparq:0.05";
    const auto patched = run(c);
    edgefl::ModelSpec model;
    REQUIRE(edgefl::parse_model_spec(c.model.c_str(), &model) == edgefl::Status::kOk);
    const uint64_t whole = 2 * edgefl::parameter_count(model) + edgefl::kEncodedHeaderBytes + 4;
    REQUIRE(patched.size() == full.size());
    CHECK(patched[0].downlink_bytes == 0);  // every client builds version 1 from the seed
    for (size_t i = 1; i < patched.size(); ++i) {
      CHECK(patched[i].downlink_bytes > 0);
      CHECK(patched[i].downlink_bytes <= whole * c.per_round);
      CHECK(full[i].downlink_bytes == whole * c.per_round);
    }
    CHECK(patched.back().cum_downlink_bytes * 4 < full.back().cum_downlink_bytes);
    CHECK(patched.back().test_acc > 0.5);  // the clients still learn from the patched public model
    c.downlink = "q3";
    std::vector<edgefl::cli::RoundRecord> none;
    std::ostringstream log;
    CHECK(edgefl::cli::run_sim(c, &none, log) != 0);  // not a codec
    CHECK(log.str().find("invalid --downlink 'q3'") != std::string::npos);
  }

  TEST_CASE("--compare: per-run options and downlinks, several seeds, a run reused from its JSONL") {
    edgefl::cli::SimConfig c = tiny_config();
    c.model = "mlp:784-8-10";
    c.rounds = 2;
    c.eval_samples = 200;
    edgefl::cli::CompareOptions o;
    o.report_dir = "sim_test_compare";
    REQUIRE(edgefl::cli::make_directories(o.report_dir));
    std::ostringstream out, err;
    o.codecs = {"bf16", "q4 --seed 3"};
    CHECK(edgefl::cli::run_compare(c, o, out, err) == 2);  // checked before anything runs
    CHECK(err.str().find("--seed is the same for every run") != std::string::npos);
    std::ifstream none(o.report_dir + "/bf16.jsonl");
    CHECK_FALSE(none.good());
    o.codecs = {"bf16", "sparq:0.1@sparq:0.05 --epochs 2", "q8 --rounds 3"};
    o.seeds = {1, 2};
    REQUIRE(edgefl::cli::run_compare(c, o, out, err) == 0);
    std::vector<edgefl::cli::RoundRecord> r;
    std::string error;
    REQUIRE(
        edgefl::cli::read_jsonl(o.report_dir + "/sparq_0.1_sparq_0.05_--epochs_2-seed2.jsonl", &r, &error));
    REQUIRE(r.size() == 2);
    CHECK(r[0].downlink_bytes == 0);  // patches: version 1 comes from the seed
    CHECK(r[1].downlink_bytes > 0);
    // A run's own --rounds: it runs longer than the baseline, and the table says so.
    REQUIRE(edgefl::cli::read_jsonl(o.report_dir + "/q8_--rounds_3-seed1.jsonl", &r, &error));
    CHECK(r.size() == 3);
    CHECK(out.str().find("| `bf16` | 2 [2, 2] |") != std::string::npos);
    CHECK(out.str().find("| `q8 --rounds 3` | 3 [3, 3] |") != std::string::npos);
    // Reused: the same report from the JSONL files, nothing trained again.
    o.reuse = true;
    std::ostringstream out2, err2;
    c.quiet = false;
    REQUIRE(edgefl::cli::run_compare(c, o, out2, err2) == 0);
    CHECK(err2.str().find("--compare run") == std::string::npos);
    CHECK(out2.str() == out.str().substr(out.str().size() - out2.str().size()));
  }

  TEST_CASE("a compressed codec sends fewer bytes than bf16 for the same rounds") {
    edgefl::cli::SimConfig c = tiny_config();
    c.codec = "bf16";
    const auto base = run(c);
    c.codec = "topk:0.05+q4";
    const auto sparse = run(c);
    CHECK(sparse.back().cum_uplink_bytes * 8 < base.back().cum_uplink_bytes);
  }

  TEST_CASE("the report states bytes and time to target as ratios to the baseline") {
    edgefl::cli::CodecRun a, b;
    a.codec = "bf16";
    b.codec = "q4";
    for (size_t r = 1; r <= 8; ++r) {
      edgefl::cli::RoundRecord x;
      x.round = r;
      x.evaluated = true;
      // 0.6 0.7 0.8 0.9 0.9 0.9 0.9 0.9: the trailing mean of 5 first reaches 0.8 at round 6
      // (0.84); the final accuracy is the mean of all 8 (fewer than 10): 0.825.
      x.test_acc = std::min(0.5 + 0.1 * double(r), 0.9);
      x.cum_uplink_bytes = 1000 * r;
      x.cum_downlink_bytes = 1000 * r;
      x.sim_time_s = 10.0 * double(r);
      a.records.push_back(x);
      x.cum_uplink_bytes = 250 * r;    // a quarter of the bytes up
      x.cum_downlink_bytes = 100 * r;  // a tenth down
      x.sim_time_s = 5.0 * double(r);
      b.records.push_back(x);
    }
    const auto s = edgefl::cli::summarize(b.records, 0.8);
    CHECK(s.reached);
    CHECK(s.rounds == 8);
    CHECK(s.rounds_to_target == 6);
    CHECK(s.bytes_to_target == doctest::Approx(1500));
    CHECK(s.time_to_target == doctest::Approx(30));
    CHECK(s.final_acc == doctest::Approx(0.825));
    const std::string dir = "sim_test_report";
    REQUIRE(edgefl::cli::make_directories(dir));
    edgefl::cli::ReportSettings settings;
    settings.target_acc = 0.8;
    settings.description = "unit test";
    std::ostringstream out;
    std::string error;
    REQUIRE(edgefl::cli::write_report(dir, {a, b}, settings, out, &error));
    std::ifstream md(dir + "/report.md");
    std::stringstream text;
    text << md.rdbuf();
    // At round 6: up 1500 of 6000 bytes, down 600 of 6000, total 2100 of 12000, 30 of 60 s.
    CHECK(text.str().find("| `q4` | 8 | 0.8250 | 0.00 | 6 | 0.00 MB | 0.2500 | 0.00 MB | 0.1000 | 0.00 MB | "
                          "0.1750 | 30.0 s | 0.500 |") != std::string::npos);
    // Two seeds: the mean and the range of each column.
    edgefl::cli::CodecRun a2 = a, b2 = b;
    a.seed = b.seed = 1;
    a2.seed = b2.seed = 2;
    for (auto& x : b2.records) x.cum_uplink_bytes /= 2;  // seed 2: an eighth of the bytes up
    REQUIRE(edgefl::cli::write_report(dir, {a, b, a2, b2}, settings, out, &error));
    std::ifstream md2(dir + "/report.md");
    std::stringstream text2;
    text2 << md2.rdbuf();
    CHECK(text2.str().find("| `q4` | 8 [8, 8] | 0.8250 [0.8250, 0.8250] | 0.00 [0.00, 0.00] | 6 [6, 6] | "
                           "0.00 [0.00, 0.00] MB | 0.1875 [0.1250, 0.2500] | ") != std::string::npos);
    // Total: (2100 and 1350 bytes) / 12000.
    CHECK(text2.str().find("| 0.1437 [0.1125, 0.1750] |") != std::string::npos);
    CHECK(text2.str().find("seeds 1, 2") != std::string::npos);
    CHECK_FALSE(edgefl::cli::write_report(dir, {a, b, a2}, settings, out, &error));  // a seed short
    std::ifstream svg(dir + "/accuracy_vs_uplink.svg");
    std::string first;
    std::getline(svg, first);
    CHECK(first.rfind("<svg", 0) == 0);
    CHECK(edgefl::cli::summarize(b.records, 0.95).reached == false);
  }
}

TEST_SUITE("sim") {
  TEST_CASE("the real update for bench is a trained update, deterministic") {
    // bench uses "cnn" at round 5; a small MLP at round 2 checks the same path in a fraction of
    // the time (the suite also runs under ASan).
    std::vector<float> a, b;
    std::string error;
    REQUIRE(edgefl::cli::make_real_update("mlp:784-16-10", 2, &a, &error));
    REQUIRE(edgefl::cli::make_real_update("mlp:784-16-10", 2, &b, &error));
    edgefl::ModelSpec model;
    REQUIRE(edgefl::parse_model_spec("mlp:784-16-10", &model) == edgefl::Status::kOk);
    REQUIRE(a.size() == edgefl::parameter_count(model));
    CHECK(a == b);
    double sq = 0;
    for (float v : a) sq += double(v) * v;
    CHECK(sq > 0);  // a real, non-zero update
  }
}

#if defined(EDGEFL_CLI_HAVE_SECAGG)
TEST_SUITE("sim") {
  TEST_CASE("secure rounds: the unmasked sum is the sum of the codes of the devices that stayed") {
    const size_t k = 12, words = 777;
    std::vector<std::vector<int32_t>> codes(k, std::vector<int32_t>(words));
    uint32_t x = 1;
    for (auto& c : codes) {
      for (int32_t& v : c) {
        x = x * 1664525u + 1013904223u;
        v = int32_t(x >> 24) - 128;  // [-128, 127]
      }
    }
    std::vector<bool> dropped(k, false);
    dropped[3] = dropped[8] = true;
    const edgefl::cli::SecureRoundResult r = edgefl::cli::run_secure_round(5, 42, codes, 128, dropped, 0.2);
    REQUIRE(r.error.empty());
    CHECK(r.contributors == std::vector<size_t>{0, 1, 2, 4, 5, 6, 7, 9, 10, 11});
    CHECK(r.modulus_bits == 12);  // 2 x 12 x 128 + 1 values
    for (size_t i = 0; i < words; ++i) {
      int64_t sum = 0;
      for (size_t d = 0; d < k; ++d) sum += dropped[d] ? 0 : codes[d][i];
      REQUIRE(r.summed_codes[i] == sum);
    }
    // the masked vector at m bits per word dominates a device's upload; the protocol adds a fixed
    // ~1 kB of frames (advertisement, UploadStart, chunk headers, Commit) and ~200 bytes per neighbour
    for (size_t d = 0; d < k; ++d) {
      if (dropped[d]) continue;
      CHECK(r.uplink_bytes[d] >= (words * 12 + 7) / 8);
      CHECK(r.uplink_bytes[d] < (words * 12 + 7) / 8 + 1024 + 200 * r.degree);
    }
  }

  TEST_CASE("--secure-aggregation: a federation learns, the server sees only sums, bytes follow m") {
    edgefl::cli::SimConfig c = tiny_config();
    c.rounds = 5;
    c.per_round = 6;
    c.downlink = "full";
    c.codec = "q4:shared=0.002,clip";
    c.secure_aggregation = true;
    c.secagg_dropout = 0.17;  // one of six drops before masking, every round
    const auto records = run(c);
    edgefl::ModelSpec model;
    REQUIRE(edgefl::parse_model_spec(c.model.c_str(), &model) == edgefl::Status::kOk);
    const size_t n = edgefl::parameter_count(model);
    for (const auto& r : records) {
      CHECK(r.contributors == 5);
      CHECK(r.secagg_modulus_bits == 7);  // q4 codes in [-7, 7], 6 devices: 2 x 6 x 7 + 1 = 85 values
      // five masked vectors of n words at 7 bits, plus keys, shares and unmasking
      CHECK(r.uplink_bytes >= 5 * (n * 7 / 8));
      CHECK(r.uplink_bytes < 5 * (n * 7 / 8) + 6 * 2000);
      CHECK(r.secagg_client_s > 0);
      CHECK(r.secagg_server_s > 0);
    }
    CHECK(records.back().test_acc > 0.4);  // chance is 0.1
    // distributed DP on top: epsilon grows with every round, the modulus makes room for the noise
    c.dp_clip = 0.5;
    c.dp_noise = 1.0;
    c.rounds = 3;
    const auto noisy = run(c);
    double previous = 0;
    for (const auto& r : noisy) {
      CHECK(r.dp_epsilon > previous);
      previous = r.dp_epsilon;
      CHECK(r.dp_noise_variance > 0);
      CHECK(r.secagg_modulus_bits > 7);
    }
    c.dp_clip = c.dp_noise = 0;
    c.rounds = 5;
    // a codec without integer codes is refused up front
    c.codec = "q4";
    std::vector<edgefl::cli::RoundRecord> none;
    std::ostringstream log;
    CHECK(edgefl::cli::run_sim(c, &none, log) == 1);
    CHECK(log.str().find("integer codes") != std::string::npos);
  }
}
#endif
