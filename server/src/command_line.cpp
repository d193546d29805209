// command_line.cpp: edgefl-server's command line (command_line.h). `edgefl-server --help` lists
// the options.
#include "command_line.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "edgefl/data.h"
#include "log.h"
#include "postgres_storage.h"
#include "server.h"

namespace {

const char kUsage[] =
    "usage: edgefl-server --state-dir DIR --ca FILE --cert FILE --key FILE [options]\n"
    "\n"
    "Runs federated rounds for devices that authenticate with client certificates issued by the CA\n"
    "(`edgefl certs` makes a development PKI). State (rounds, the ledger of accepted updates, the open\n"
    "round's payloads, model versions) lives in DIR/state.db (SQLite, WAL, full sync), or in the\n"
    "PostgreSQL database --state names; models are DIR/model-vNNNNNN.safetensors and\n"
    "DIR/global.safetensors. A restart resumes the open round.\n"
    "\n"
    "state:\n"
    "  --state-dir DIR         model files, the lock file and (without --state) state.db; required\n"
    "  --state URL             postgresql://[user@]host[:port]/db[?...]: rounds, ledger and settings in\n"
    "                          PostgreSQL (synchronous_commit on; a server with fsync off is refused)\n"
    "  --aggregator-id NAME    several aggregators, one round: this server's name among those sharing\n"
    "                          the --state database and the --state-dir directory (a shared file\n"
    "                          system); the one holding the database's lease coordinates the rounds\n"
    "  --coordinator-lease S   a coordinator that stops renewing is replaced after S seconds (10)\n"
    "  --partial-sum-wait S    after a seal the coordinator waits up to S seconds for the others'\n"
    "                          partial sums, then decodes the missing ones' updates (0.5; 0 = decode)\n"
    "\n"
    "network:\n"
    "  --listen HOST:PORT      device listener (127.0.0.1:7443; port 0 = any free port)\n"
    "  --metrics HOST:PORT     /metrics (Prometheus) and /healthz listener (off)\n"
    "  --port-file FILE        write '<port> <metrics port>' once listening\n"
    "  --ca FILE --cert FILE --key FILE   PEM: the device CA, the server certificate and key\n"
    "  --crl FILE              PEM CRL of revoked device certificates\n"
    "  --deny FILE             revoked device ids, one per line\n"
    "                          (both read again on SIGHUP and when the files change)\n"
    "  --allow-stale-crl       accept an expired, not yet valid or foreign-signed CRL (a warning)\n"
    "  --idle-timeout S        close a connection idle this long (60); --handshake-timeout S (10)\n"
    "  --max-connections N     (1024); beyond it devices are told to come back (RetryLater ServerBusy)\n"
    "  --max-connections-per-device N   (4)\n"
    "  --max-handshakes N      TLS handshakes at once (128); more connections wait in the backlog\n"
    "  --insecure-plaintext-for-tests   no TLS at all; device ids are made up. Tests only.\n"
    "rounds:\n"
    "  --model SPEC            built-in model (cnn); --codec SPEC uplink codec devices use (sparq:0.1;\n"
    "                          `edgefl encode --help` lists every codec)\n"
    "  --initial-model FILE    start from this .safetensors file (F32/F16/BF16 tensors, any names and\n"
    "                          shapes): its tensors define the model unless --model names a built-in\n"
    "                          one it must match; its __metadata__ goes into every global.safetensors\n"
    "  --downlink-codec SPEC   codec of the patches that bring devices to the new model; the whole\n"
    "                          model goes as bf16 when that is smaller (sparq:0.02)\n"
    "  --optimizer SPEC        fedavg | fedavgm | fedadam[:lr=...] (fedavg)\n"
    "  --aggregation RULE      mean (weighted by samples, streaming) | median | trimmed-mean[:beta=B]\n"
    "                          (unweighted, coordinate-wise, robust to crafted updates; they hold\n"
    "                          the round's K decoded updates in memory at commit: 4 K n bytes) (mean)\n"
    "  --secure-aggregation on|off   SecAgg+ rounds: the server learns only the sum of the devices'\n"
    "                          integer codes (the codec must be q<b>:shared=STEP, alone or after\n"
    "                          randk); devices train, then advertise keys, share, mask, unmask (off)\n"
    "  --secagg-dropout F      fraction of devices the graph tolerates losing (0.3)\n"
    "  --secagg-phase S        seconds for each phase after the keys (30)\n"
    "  --secagg-cell-bound B   Count Sketch codecs (cs): devices clip each cell to +-B (2047)\n"
    "  --dp-clip C --dp-noise Z --dp-delta D   distributed DP in secure rounds: devices clip their\n"
    "                          update to L2 norm C and add discrete Gaussian noise, Z x the\n"
    "                          sensitivity over the cohort; epsilon at D is logged (off, 0, 1e-5)\n"
    "  --rounds R              rounds to run, then exit (0 = until stopped) (0)\n"
    "  --cohort K              accepted updates that complete a round (4)\n"
    "  --over-selection F      offers per round = ceil(K x F) (1.3)\n"
    "  --min-quorum Q          updates needed to commit at the deadline (K)\n"
    "  --selection-probability P   chance a check-in gets a task while offers remain (1)\n"
    "  --deadline S            reporting deadline per round, seconds (120)\n"
    "  --retry-after MS --retry-window MS   pace steering for devices turned away (1000, 2000)\n"
    "  --chunk BYTES           largest model or upload chunk (65536)\n"
    "  --max-update-norm X     reject an update whose L2 norm is above X; 0 = F x max(1, ||model||) (0)\n"
    "  --update-norm-factor F  F of the automatic bound (1)\n"
    "  --offer-lease S         an offer lapses after S seconds without a message from its device\n"
    "                          (deadline / 2)\n"
    "  --lr X --epochs E --batch B --momentum M --max-steps S   devices' local training\n"
    "                          (0.02, 2, 32, 0.9, 0)\n"
    "  --seed S                initial model and training seeds (1)\n"
    "  --eval [DIR]            evaluate each new model on the Fashion-MNIST test set (built-in models\n"
    "                          with 784 inputs and 10 classes; any other model is refused at start)\n"
    "  --eval-samples N        (10000)\n"
    "output:\n"
    "  --summary FILE          per-round summary as JSON lines\n"
    "  --progress              one line per round on stdout (accuracy, bytes, time)\n"
    "  --drain MS              after the last round, answer 'draining' until no device has said Hello\n"
    "                          for MS, and every come-back time handed out has passed (3000)\n"
    "  --log-level L           debug | info | warn | error (info)\n";

bool split_host_port(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  char* end = nullptr;
  const unsigned long p = std::strtoul(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p > 65535 || colon + 1 == text.size()) return false;
  *host = text.substr(0, colon);
  *port = static_cast<uint16_t>(p);
  return !host->empty();
}

bool to_u32(const std::string& s, uint32_t* out) {
  if (s.empty() || s[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || v > 0xFFFFFFFFull) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

bool to_double(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0';
}

// The options that take a value, by group: each sets `a` from `v` and returns true, or returns
// false when `a` is not one of its options. *ok: the value was valid.
bool set_network_option(const std::string& a, const std::string& v, edgefl::server::ServerOptions* o,
                        bool* ok) {
  uint32_t u = 0;
  if (a == "--listen") {
    *ok = split_host_port(v, &o->listen_host, &o->port);
  } else if (a == "--metrics") {
    *ok = split_host_port(v, &o->metrics_host, &o->metrics_port);
  } else if (a == "--port-file") {
    o->port_file = v;
  } else if (a == "--ca") {
    o->tls.ca_file = v;
  } else if (a == "--cert") {
    o->tls.cert_file = v;
  } else if (a == "--key") {
    o->tls.key_file = v;
  } else if (a == "--crl") {
    o->tls.crl_file = v;
  } else if (a == "--deny") {
    o->tls.deny_file = v;
  } else if (a == "--idle-timeout") {
    *ok = to_u32(v, &u) && u > 0 && u <= 86400;
    o->idle_timeout_ms = u * 1000;
  } else if (a == "--handshake-timeout") {
    *ok = to_u32(v, &u) && u > 0 && u <= 3600;
    o->handshake_timeout_ms = u * 1000;
  } else if (a == "--max-connections") {
    *ok = to_u32(v, &o->max_connections) && o->max_connections > 0;
  } else if (a == "--max-handshakes") {
    *ok = to_u32(v, &o->max_handshakes) && o->max_handshakes > 0;
  } else if (a == "--max-connections-per-device") {
    *ok = to_u32(v, &o->max_connections_per_device) && o->max_connections_per_device > 0;
  } else {
    return false;
  }
  return true;
}

bool set_round_option(const std::string& a, const std::string& v, edgefl::server::RoundOptions* r, bool* ok) {
  double d = 0;
  if (a == "--state-dir") {
    r->state_dir = v;
  } else if (a == "--aggregator-id") {
    r->aggregator_id = v;
  } else if (a == "--coordinator-lease") {
    *ok = to_double(v, &d) && d >= 0.1 && d <= 3600;
    r->coordinator_lease_ms = static_cast<uint32_t>(d * 1000);
  } else if (a == "--partial-sum-wait") {
    *ok = to_double(v, &d) && d >= 0 && d <= 60;
    r->partial_sum_wait_ms = static_cast<uint32_t>(d * 1000);
  } else if (a == "--model") {
    r->model_spec = v;
    r->model_spec_given = true;
  } else if (a == "--initial-model") {
    r->initial_model = v;
  } else if (a == "--codec") {
    r->uplink_codec = v;
  } else if (a == "--downlink-codec") {
    r->downlink_codec = v;
  } else if (a == "--optimizer") {
    r->optimizer = v;
  } else if (a == "--aggregation") {
    r->aggregation = v;
  } else if (a == "--secure-aggregation") {
    *ok = v == "on" || v == "off";
    r->secure_aggregation.enabled = v == "on";
  } else if (a == "--secagg-dropout") {
    *ok = to_double(v, &r->secure_aggregation.dropout) && r->secure_aggregation.dropout >= 0 &&
          r->secure_aggregation.dropout < 0.9;
  } else if (a == "--secagg-cell-bound") {
    *ok = to_u32(v, &r->secure_aggregation.cell_bound) && r->secure_aggregation.cell_bound >= 1 &&
          r->secure_aggregation.cell_bound <= (1u << 24);
  } else if (a == "--secagg-phase") {
    *ok = to_double(v, &d) && d > 0 && d <= 86400;
    r->secure_aggregation.phase_ms = static_cast<uint32_t>(d * 1000);
  } else if (a == "--dp-clip") {
    *ok = to_double(v, &r->secure_aggregation.dp_clip) && r->secure_aggregation.dp_clip >= 0;
  } else if (a == "--dp-noise") {
    *ok = to_double(v, &r->secure_aggregation.dp_noise) && r->secure_aggregation.dp_noise >= 0;
  } else if (a == "--dp-delta") {
    *ok = to_double(v, &r->secure_aggregation.dp_delta) && r->secure_aggregation.dp_delta > 0 &&
          r->secure_aggregation.dp_delta < 1;
  } else if (a == "--rounds") {
    *ok = to_u32(v, &r->rounds);
  } else if (a == "--cohort") {
    *ok = to_u32(v, &r->cohort) && r->cohort > 0;
  } else if (a == "--over-selection") {
    *ok = to_double(v, &r->over_selection);
  } else if (a == "--selection-probability") {
    *ok = to_double(v, &r->selection_probability);
  } else if (a == "--min-quorum") {
    *ok = to_u32(v, &r->min_quorum);
  } else if (a == "--deadline") {
    *ok = to_double(v, &d) && d > 0 && d <= 7 * 86400;
    r->deadline_ms = static_cast<uint32_t>(d * 1000);
  } else if (a == "--retry-after") {
    *ok = to_u32(v, &r->retry_after_ms) && r->retry_after_ms > 0;
  } else if (a == "--retry-window") {
    *ok = to_u32(v, &r->retry_window_ms);
  } else if (a == "--chunk") {
    *ok = to_u32(v, &r->max_chunk_bytes);
  } else if (a == "--max-update-norm") {
    *ok = to_double(v, &r->max_update_norm) && r->max_update_norm >= 0;
  } else if (a == "--update-norm-factor") {
    *ok = to_double(v, &r->update_norm_factor) && r->update_norm_factor > 0;
  } else if (a == "--offer-lease") {
    *ok = to_double(v, &d) && d > 0 && d <= 7 * 86400;
    r->offer_lease_ms = static_cast<uint32_t>(d * 1000);
  } else if (a == "--eval-samples") {
    *ok = to_u32(v, &r->eval_samples) && r->eval_samples > 0;
  } else {
    return false;
  }
  return true;
}

bool set_training_option(const std::string& a, const std::string& v, edgefl::server::RoundOptions* r,
                         bool* ok) {
  uint32_t u = 0;
  double d = 0;
  if (a == "--lr") {
    *ok = to_double(v, &d);
    r->training.learning_rate = static_cast<float>(d);
  } else if (a == "--epochs") {
    *ok = to_u32(v, &r->training.local_epochs);
  } else if (a == "--batch") {
    *ok = to_u32(v, &r->training.batch_size);
  } else if (a == "--momentum") {
    *ok = to_double(v, &d);
    r->training.momentum = static_cast<float>(d);
  } else if (a == "--max-steps") {
    *ok = to_u32(v, &r->training.max_steps);
  } else if (a == "--seed") {
    *ok = to_u32(v, &u);
    r->seed = u;
  } else {
    return false;
  }
  return true;
}

bool set_output_option(const std::string& a, const std::string& v, edgefl::server::ServerOptions* o,
                       bool* ok) {
  if (a == "--summary") {
    o->summary_file = v;
  } else if (a == "--state") {
    o->state_url = v;
  } else if (a == "--drain") {
    *ok = to_u32(v, &o->drain_ms);
  } else if (a == "--log-level") {
    edgefl::server::LogLevel level;
    *ok = edgefl::server::parse_log_level(v, &level);
    if (*ok) edgefl::server::set_log_level(level);
  } else {
    return false;
  }
  return true;
}

}  // namespace

namespace edgefl::server {

int server_main(const std::vector<std::string>& args, const ServerCustomization& custom) {
  ServerOptions o;
  o.rounds.training.learning_rate = 0.02f;
  o.rounds.training.local_epochs = 2;
  const std::string name = custom.program.empty() ? "edgefl-server" : custom.program;
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name.c_str(), message.c_str());
    return 2;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      if (!custom.extra_usage.empty()) std::fputs(custom.extra_usage.c_str(), stdout);
      return 0;
    } else if (a == "--progress") {
      o.progress = true;
    } else if (a == "--insecure-plaintext-for-tests") {
      o.insecure_plaintext_for_tests = true;
    } else if (a == "--allow-stale-crl") {
      o.tls.allow_stale_crl = true;
    } else if (a == "--eval") {
      o.rounds.eval_data_dir = edgefl::fashion_mnist_dir();
      if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) o.rounds.eval_data_dir = args[++i];
    } else {
      if (i + 1 >= args.size()) return fail("unknown option or missing value: " + a);
      const std::string& v = args[++i];
      bool ok = true;
      if (!set_network_option(a, v, &o, &ok) && !set_round_option(a, v, &o.rounds, &ok) &&
          !set_training_option(a, v, &o.rounds, &ok) && !set_output_option(a, v, &o, &ok)) {
        return fail("unknown option " + a);
      }
      if (!ok) return fail("bad value for " + a + ": '" + v + "'");
    }
  }
  if (o.rounds.state_dir.empty()) return fail("--state-dir is required");
  if (!o.rounds.aggregator_id.empty() && o.state_url.empty())
    return fail("--aggregator-id needs --state postgresql://... (the database the aggregators share)");
  if (!o.state_url.empty()) {
    if (!edgefl::server::is_postgres_url(o.state_url))
      return fail("--state takes a postgresql:// URL (SQLite is the default: --state-dir alone)");
    if (!edgefl::server::postgres_storage_available())
      return fail("--state: this edgefl-server was built without PostgreSQL (libpq-dev)");
  }
  // An initial model defines the model unless --model names one.
  if (!o.rounds.initial_model.empty() && !o.rounds.model_spec_given) o.rounds.model_spec.clear();
  if (!o.insecure_plaintext_for_tests &&
      (o.tls.ca_file.empty() || o.tls.cert_file.empty() || o.tls.key_file.empty())) {
    return fail(
        "--ca, --cert and --key are required (mutual TLS); `edgefl certs --out DIR` makes a development set");
  }
  if (::mkdir(o.rounds.state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail("cannot create " + o.rounds.state_dir + ": " + std::strerror(errno));
  }
  if (custom.evaluator) {
    if (!o.rounds.eval_data_dir.empty())
      return fail("--eval and " + custom.evaluator_name + " exclude each other");
    o.rounds.evaluator = custom.evaluator;
  }
  return run_server(o);
}

}  // namespace edgefl::server
