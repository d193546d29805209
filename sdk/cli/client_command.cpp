#include "client_command.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edgefl/client.h"
#include "edgefl/data.h"
#include "edgefl/dataset_trainer.h"

namespace edgefl {
namespace cli {
namespace {

const char kUsage[] =
    "usage: edgefl client --ca FILE --cert FILE --key FILE [options]\n"
    "\n"
    "One device: connects to edgefl-server over mutual TLS, trains the offered model on its shard of\n"
    "Fashion-MNIST, uploads the update with the server's codec and prints one line per round.\n"
    "\n"
    "  --server HOST:PORT     (127.0.0.1:7443)\n"
    "  --server-name NAME     name the server certificate must carry (localhost)\n"
    "  --ca FILE --cert FILE --key FILE    PEM: CA, this device's certificate (CN = device id), key\n"
    "  --data DIR             Fashion-MNIST directory (the installed dataset)\n"
    "  --shard I/N            this device trains on part I of N (0-based) of the training set (0/1)\n"
    "  --partition SPEC       how the N parts are drawn: iid | dirichlet:ALPHA | shards:K (dirichlet:0.5)\n"
    "  --partition-seed S     the same on every device of a federation (1)\n"
    "  --rounds R             stop after R accepted rounds; 0 = until the server drains (0)\n"
    "  --stay                 when the server drains, come back as it asks instead of exiting\n"
    "  --give-up-after S      exit after S seconds without an accepted round (0 = never) (0)\n"
    "  --budget BYTES         memory budget; a round that needs more is refused (64 MiB)\n"
    "  --chunk BYTES          upload chunk size (65536)\n"
    "  --ef fp32|bf16|none    error-feedback residual for codecs that need it (fp32)\n"
    "  --timeout MS           per-message timeout (30000)\n"
    "  --seed S               jitter and upload ids (from the OS)\n"
    "  --drop-after-chunks C  test: drop the connection once after C upload chunks (resume check)\n"
    "  --quiet                only the round lines and errors (no progress: connecting, waiting, training)\n"
    "  --insecure-plaintext-for-tests   no TLS (only against a server started the same way)\n"
    "\n"
    "Progress goes to stderr, one line each: connection attempts and their failures, how long the\n"
    "device waits and why (the server's retry window, backoff), each task, training and upload;\n"
    "a round line per round on stdout, including updates the server did not count.\n"
    "\n"
    "exit status: 0 the rounds were done (or the server drained), 1 a failure (printed),\n"
    "             2 a bad command line, 3 refused by the server (certificate, revocation, TLS),\n"
    "             4 gave up: no round accepted within --give-up-after.\n";

bool to_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

}  // namespace

namespace {

// What `edgefl client` was asked to do.
struct ClientArgs {
  ClientOptions options;
  bool stay = false;
  std::string data_dir = fashion_mnist_dir();
  std::string partition_text = "dirichlet:0.5";
  uint64_t shard = 0, shards = 1, partition_seed = 1, rounds = 0;
  bool quiet = false;
};

// -1: go on; else the exit code (0 after --help, 2 on a bad option).
int parse_client_args(int argc, const char* const* argv, ClientArgs* args, std::ostream& out,
                      std::ostream& err) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      out << kUsage;
      return 0;
    }
    if (a == "--insecure-plaintext-for-tests") {
      args->options.insecure_plaintext_for_tests = true;
      continue;
    }
    if (a == "--stay") {
      args->stay = true;
      continue;
    }
    if (a == "--quiet") {
      args->quiet = true;
      continue;
    }
    if (i + 1 >= argc) {
      err << "edgefl client: " << a << " needs a value (see --help)\n";
      return 2;
    }
    const std::string v = argv[++i];
    uint64_t u = 0;
    bool ok = true;
    if (a == "--server") {
      const size_t colon = v.rfind(':');
      ok = colon != std::string::npos && colon > 0 && to_u64(v.substr(colon + 1), &u) && u > 0 && u < 65536;
      args->options.host = v.substr(0, colon);
      args->options.port = static_cast<uint16_t>(u);
    } else if (a == "--server-name") {
      args->options.server_name = v;
    } else if (a == "--ca") {
      args->options.ca_file = v;
    } else if (a == "--cert") {
      args->options.cert_file = v;
    } else if (a == "--key") {
      args->options.key_file = v;
    } else if (a == "--data") {
      args->data_dir = v;
    } else if (a == "--shard") {
      const size_t slash = v.find('/');
      ok = slash != std::string::npos && to_u64(v.substr(0, slash), &args->shard) &&
           to_u64(v.substr(slash + 1), &args->shards) && args->shards > 0 && args->shard < args->shards;
    } else if (a == "--partition") {
      args->partition_text = v;
    } else if (a == "--partition-seed") {
      ok = to_u64(v, &args->partition_seed);
    } else if (a == "--rounds") {
      ok = to_u64(v, &args->rounds) && args->rounds <= 1000000;
    } else if (a == "--give-up-after") {
      ok = to_u64(v, &u) && u <= 30ull * 86400;
      args->options.give_up_after_ms = u * 1000;
    } else if (a == "--budget") {
      ok = to_u64(v, &args->options.memory_budget_bytes) && args->options.memory_budget_bytes > 0;
    } else if (a == "--chunk") {
      ok = to_u64(v, &u) && u > 0 && u <= (1u << 20);
      args->options.upload_chunk_bytes = static_cast<uint32_t>(u);
    } else if (a == "--ef") {
      ok = v == "fp32" || v == "bf16" || v == "none";
      args->options.error_feedback = v != "none";
      args->options.residual_precision = v == "bf16" ? ResidualPrecision::kBf16 : ResidualPrecision::kFp32;
    } else if (a == "--timeout") {
      ok = to_u64(v, &u) && u > 0 && u <= 3600000;
      args->options.io_timeout_ms = static_cast<uint32_t>(u);
    } else if (a == "--seed") {
      ok = to_u64(v, &args->options.seed);
    } else if (a == "--drop-after-chunks") {
      ok = to_u64(v, &u) && u <= 1000000;
      args->options.test_disconnect_after_chunks = static_cast<uint32_t>(u);
    } else {
      err << "edgefl client: unknown option " << a << " (see --help)\n";
      return 2;
    }
    if (!ok) {
      err << "edgefl client: bad value for " << a << ": '" << v << "'\n";
      return 2;
    }
  }
  // Every transient condition is retried (edgefl/client.h); the command's own limits are the
  // rounds, --give-up-after, and (without --stay) the server draining.
  ClientOptions& o = args->options;
  o.stop_when_draining = !args->stay;
  if (!o.insecure_plaintext_for_tests && (o.ca_file.empty() || o.cert_file.empty() || o.key_file.empty())) {
    err << "edgefl client: --ca, --cert and --key are required (`edgefl certs` makes a development set)\n";
    return 2;
  }
  return -1;
}

// The device's shard of Fashion-MNIST, alone (as a real device would hold only its own data).
// -1: loaded; else the exit code.
int load_shard(const ClientArgs& args, Dataset* local, std::ostream& err) {
  std::string error;
  Dataset train;
  if (!load_fashion_mnist(args.data_dir, true, &train, &error)) {
    err << "edgefl client: " << error << "\n";
    return 1;
  }
  const uint64_t shard = args.shard, shards = args.shards;
  PartitionSpec partition_spec;
  if (!parse_partition_spec(args.partition_text, &partition_spec, &error)) {
    err << "edgefl client: --partition: " << error << "\n";
    return 2;
  }
  std::vector<std::vector<uint32_t>> parts =
      partition(train.labels, shards, partition_spec, args.partition_seed, &error);
  if (parts.size() != shards) {
    err << "edgefl client: partition: " << error << "\n";
    return 1;
  }
  // The device keeps only its shard (as a real device would hold only its own data).
  local->rows = train.rows;
  local->cols = train.cols;
  local->num_classes = train.num_classes;
  local->normalization = train.normalization;
  local->count = parts[shard].size();
  local->inputs.reserve(local->count * train.dim());
  local->labels.reserve(local->count);
  for (uint32_t index : parts[shard]) {
    local->inputs.insert(local->inputs.end(), train.input(index), train.input(index) + train.dim());
    local->labels.push_back(train.labels[index]);
  }
  train = Dataset{};
  return -1;
}

void print_round(std::ostream& out, const RoundResult& r) {
  if (r.outcome == RoundOutcome::kServerDraining) {
    out << "edgefl client: the server is draining; done\n";
    out.flush();
    return;
  }
  if (r.outcome == RoundOutcome::kStraggler || r.outcome == RoundOutcome::kLate ||
      r.outcome == RoundOutcome::kRejected) {
    const std::string why =
        r.outcome == RoundOutcome::kStraggler ? "the round closed with its quorum while this device trained"
        : r.outcome == RoundOutcome::kLate    ? "it arrived after the round's deadline"
                                              : "the server rejected it (" + r.reject_reason + ")";
    out << "round " << r.round_id << " (model v" << r.model_version << "): " << round_outcome_name(r.outcome)
        << ": the update (" << r.update_bytes << " B, " << r.samples << " samples) was discarded: " << why
        << "; the next round starts from the new model\n";
    out.flush();
    return;
  }
  if (r.outcome == RoundOutcome::kAbandoned) {
    out << "round " << r.round_id << " (model v" << r.model_version
        << "): abandoned: the secure round ended without a model that counts this device's update ("
        << r.update_bytes << " B, " << r.samples
        << " samples); with error feedback the next update carries it\n";
    out.flush();
    return;
  }
  char line[768];
  std::snprintf(line, sizeof line,
                "round %llu (model v%llu): %s; %u samples, loss %.4f, train %.2f s; update %llu B (%s)%s; "
                "model %llu B; wire up %llu B down %llu B; wait %.1f s; total %.2f s; "
                "heap peak %.1f kB (TLS %.1f kB; plan: %s)\n",
                static_cast<unsigned long long>(r.round_id), static_cast<unsigned long long>(r.model_version),
                round_outcome_name(r.outcome), r.samples, double(r.train_loss), r.train_seconds,
                static_cast<unsigned long long>(r.update_bytes), r.codec.c_str(),
                r.resumed_at ? (", resumed at " + std::to_string(r.resumed_at)).c_str() : "",
                static_cast<unsigned long long>(r.model_bytes),
                static_cast<unsigned long long>(r.wire_bytes_up),
                static_cast<unsigned long long>(r.wire_bytes_down), r.wait_seconds, r.total_seconds,
                double(r.heap_peak_bytes) / 1e3, double(r.heap_tls_bytes) / 1e3, r.memory.describe().c_str());
  out << line;
  out.flush();
}

}  // namespace

int run_client_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  ClientArgs args;
  int code = parse_client_args(argc, argv, &args, out, err);
  if (code >= 0) return code;
  Dataset local;
  code = load_shard(args, &local, err);
  if (code >= 0) return code;
  std::vector<uint32_t> all(local.count);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  DatasetTrainer trainer(&local, std::move(all));
  if (trainer.sample_count() == 0) {
    err << "edgefl client: shard " << args.shard << "/" << args.shards << " holds no samples\n";
    return 1;
  }
  ClientOptions& o = args.options;
  // Without TLS the server has no certificate to name this device by: it takes the Hello's SDK
  // version string instead (test mode only).
  if (o.insecure_plaintext_for_tests) o.sdk_version = "shard-" + std::to_string(args.shard);
  o.heap_probe = [] {
    const struct mallinfo2 m = mallinfo2();  // glibc: arena bytes in use + mmapped blocks
    return static_cast<size_t>(m.uordblks + m.hblkhd);
  };
  if (!args.quiet) {
    o.log = [&err](LogLevel level, const std::string& message) {
      if (level == LogLevel::kDebug) return;
      const std::time_t now = std::time(nullptr);
      char stamp[16];
      std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&now));
      err << "edgefl client: " << stamp << " " << message << "\n";
      err.flush();
    };
  }
  Client client(o);
  std::string error;
  if (client.init(&error) != Status::kOk) {
    err << "edgefl client: " << error << "\n";
    return 1;
  }
  const Status s = client.participate(
      trainer, static_cast<uint32_t>(args.rounds), [&](const RoundResult& r) { print_round(out, r); },
      &error);
  if (s != Status::kOk) {
    err << "edgefl client: " << status_name(s) << ": " << error << "\n";
    if (s == Status::kUnauthorized || s == Status::kTlsHandshakeFailed) return 3;
    // participate() ends a run of transient failures only at --give-up-after, and says so.
    if (o.give_up_after_ms != 0 && error.rfind("no round accepted in", 0) == 0) return 4;
    return 1;
  }
  return 0;
}

namespace {

// A stand-in for training: a seeded Gaussian-ish update of the task's size, scaled small.
class SyntheticTrainer final : public LocalTrainer {
 public:
  explicit SyntheticTrainer(uint64_t seed) : state_(seed) {}
  size_t memory_bytes(const RoundTask&) const override { return 0; }
  Status prepare(const RoundTask&) override { return Status::kOk; }
  Status fit(Span<const float> global, Span<float> delta, uint32_t* samples, float* loss) override {
    (void)global;
    for (size_t i = 0; i < delta.size(); ++i) {
      state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
      const double u = double(state_ >> 11) * 0x1.0p-53;
      delta[i] = static_cast<float>((u - 0.5) * 1e-3);
    }
    *samples = 100;
    *loss = 0;
    return Status::kOk;
  }

 private:
  uint64_t state_;
};

const char kSwarmUsage[] =
    "usage: edgefl swarm --pki DIR --devices N [--server HOST:PORT] [--rounds R] [--first I]\n"
    "                    [--ramp PER_SECOND]\n"
    "\n"
    "N devices as threads of one process (device-<first> .. from DIR/devices, made by `edgefl certs`),\n"
    "each with its own mutual-TLS connection, uploading seeded random updates: a load test of\n"
    "edgefl-server. Prints per-device outcomes and the client-side round times (median, p99).\n"
    "--ramp R starts R devices a second (device i after i / R s); without it, all start at once.\n";

}  // namespace

int run_swarm_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  std::string pki, host = "127.0.0.1";
  uint64_t devices = 0, rounds = 1, first = 1, port = 7443;
  double ramp = 0;  // devices started per second; 0: all at once
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      out << kSwarmUsage;
      return 0;
    }
    if (i + 1 >= argc) {
      err << "edgefl swarm: " << a << " needs a value\n" << kSwarmUsage;
      return 2;
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--pki") {
      pki = v;
    } else if (a == "--devices") {
      ok = to_u64(v, &devices) && devices > 0 && devices <= 99999;
    } else if (a == "--rounds") {
      ok = to_u64(v, &rounds) && rounds > 0;
    } else if (a == "--first") {
      ok = to_u64(v, &first) && first > 0;
    } else if (a == "--ramp") {
      char* end = nullptr;
      ramp = std::strtod(v.c_str(), &end);
      ok = end != v.c_str() && *end == '\0' && ramp > 0 && ramp <= 1e6;
    } else if (a == "--server") {
      const size_t colon = v.rfind(':');
      ok = colon != std::string::npos && colon > 0 && to_u64(v.substr(colon + 1), &port) && port > 0 &&
           port < 65536;
      host = v.substr(0, colon);
    } else {
      err << "edgefl swarm: unknown option " << a << "\n" << kSwarmUsage;
      return 2;
    }
    if (!ok) {
      err << "edgefl swarm: bad value for " << a << ": '" << v << "'\n";
      return 2;
    }
  }
  if (pki.empty() || devices == 0) {
    err << "edgefl swarm: --pki and --devices are required\n" << kSwarmUsage;
    return 2;
  }
  std::mutex mutex;
  std::vector<double> seconds;
  std::vector<std::string> failures;
  std::atomic<uint64_t> accepted{0}, other{0};
  std::vector<std::thread> threads;
  const auto started = std::chrono::steady_clock::now();
  for (uint64_t d = 0; d < devices; ++d) {
    threads.emplace_back([&, d] {
      if (ramp > 0) {  // device d starts d / ramp seconds in: arrivals at a steady rate
        std::this_thread::sleep_until(started + std::chrono::microseconds(int64_t(double(d) * 1e6 / ramp)));
      }
      char id[32];
      std::snprintf(id, sizeof id, "device-%04llu", static_cast<unsigned long long>(first + d));
      ClientOptions o;
      o.host = host;
      o.port = static_cast<uint16_t>(port);
      o.ca_file = pki + "/ca.crt";
      o.cert_file = pki + "/devices/" + id + ".crt";
      o.key_file = pki + "/devices/" + id + ".key";
      o.seed = first + d;
      o.io_timeout_ms = 120000;
      o.connect_timeout_ms = 60000;
      o.stop_when_draining = true;  // the load run ends with the server's rounds
      SyntheticTrainer trainer(first + d);
      Client client(o);
      std::string error;
      Status s = client.init(&error);
      if (s == Status::kOk) {
        s = client.participate(
            trainer, static_cast<uint32_t>(rounds),
            [&](const RoundResult& r) {
              std::lock_guard<std::mutex> lock(mutex);
              if (r.outcome == RoundOutcome::kAccepted) {
                ++accepted;
                seconds.push_back(r.total_seconds);
              } else {
                ++other;
              }
            },
            &error);
      }
      if (s != Status::kOk) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back(std::string(id) + ": " + status_name(s) + ": " + error);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::sort(seconds.begin(), seconds.end());
  auto q = [&](double p) {
    return seconds.empty()
               ? 0.0
               : seconds[std::min(seconds.size() - 1, size_t(p * double(seconds.size() - 1) + 0.5))];
  };
  char line[256];
  std::snprintf(line, sizeof line,
                "swarm: %llu devices, %llu updates accepted, %llu other outcomes, %zu failures in %.2f s; "
                "client round time median %.3f s, p99 %.3f s\n",
                static_cast<unsigned long long>(devices), static_cast<unsigned long long>(accepted.load()),
                static_cast<unsigned long long>(other.load()), failures.size(), wall, q(0.5), q(0.99));
  out << line;
  for (const auto& f : failures) err << "  " << f << "\n";
  return failures.empty() ? 0 : 1;
}

}  // namespace cli
}  // namespace edgefl
