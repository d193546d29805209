// sim.h: `edgefl sim`, federated training of N simulated clients in one process, measured end to
// end (accuracy, bytes and simulated time), and `edgefl sim --compare`, the same seeds for several
// codecs with a report against the 16-bit baseline (Han et al., "Beyond Throughput and Compression
// Ratios", HotNets 2024: compare end to end, and against bf16, never fp32).
#ifndef EDGEFL_CLI_SIM_H_
#define EDGEFL_CLI_SIM_H_

#include <stddef.h>
#include <stdint.h>

#include <iosfwd>
#include <string>
#include <vector>

#include "edgefl/trainer.h"

namespace edgefl {
namespace cli {

struct SimConfig {
  size_t clients = 100;   // N simulated devices
  size_t per_round = 10;  // K sampled each round (without replacement)
  size_t rounds = 50;
  std::string model = "cnn";                // edgefl/model.h spec
  std::string partition = "dirichlet:0.5";  // iid | dirichlet:ALPHA | shards:K
  std::string codec = "bf16";               // uplink codec spec
  // full: the whole bf16 model every round (the 16-bit baseline); else the codec of the patches
  // that move the clients' public model towards the server model (round/downlink.h). The default
  // is edgefl-server's.
  std::string downlink = "sparq:0.02";
  std::string error_feedback = "auto";      // none | fp32 | bf16 | auto (fp32 for biased codecs)
  std::string server_optimizer = "fedavg";  // edgefl/aggregate.h spec
  uint64_t seed = 1;
  TrainConfig train;         // local training (seed is derived per client and round)
  double uplink_mbps = 1.0;  // link model: Mbit/s up, Mbit/s down, round trip
  double downlink_mbps = 10.0;
  double rtt_ms = 50.0;
  double compute_scale = 1.0;    // device compute time = measured time x this
  size_t threads = 0;            // 0 = the number of cores
  size_t eval_every = 1;         // evaluate on the test set every this many rounds (and the last)
  size_t eval_samples = 0;       // 0 = the whole test set
  std::string data_dir;          // "" = $EDGEFL_FASHION_MNIST_DIR or the Debian package's
  std::string json_path;         // one JSON line per round ("" = none)
  std::string save_update_path;  // write the first client's update of capture_round as .npy
  std::vector<float>* capture_update = nullptr;  // or keep it here
  size_t capture_round = 1;
  bool quiet = false;  // no progress lines
  // SecAgg+ over the codec's integer codes (a summable shared-scale codec: q<b>:shared=STEP, dense
  // or after randk): the server sees only the sum of each round's codes and averages uniformly.
  bool secure_aggregation = false;
  double secagg_dropout = 0.0;        // fraction of each round's devices that drop before masking
  uint32_t secagg_cell_bound = 2047;  // Count Sketch inputs (cs): each device clips its cells to +-this
  // Distributed DP (secure aggregation only; secagg/dp.h): each device clips its update to L2 <=
  // dp_clip and adds discrete Gaussian noise to its codes, of variance (dp_noise x sensitivity)^2
  // / per_round in code units, so that the sum carries dp_noise x sensitivity; 0 = off.
  double dp_clip = 0.0, dp_noise = 0.0, dp_delta = 1e-5;
};

// One round, as written to the JSON lines. Times in seconds; bytes all-in (headers included).
struct RoundRecord {
  size_t round = 0;
  bool evaluated = false;
  double test_acc = 0, test_loss = 0;
  double train_loss = 0, train_acc = 0;  // sample-weighted over the round's clients
  uint64_t uplink_bytes = 0, downlink_bytes = 0, cum_uplink_bytes = 0, cum_downlink_bytes = 0;
  double train_s = 0, encode_s = 0, decode_s = 0;  // summed over the round's clients (CPU seconds)
  double wall_s = 0;                               // real time of the round on this machine
  double round_sim_s = 0, sim_time_s = 0;          // simulated: this round, and since the start
  uint64_t samples = 0;
  // --secure-aggregation: the SecAgg messages' bytes (both ways, in uplink/downlink_bytes too),
  // CPU seconds of the devices' (summed) and the server's SecAgg steps, the modulus bits.
  uint64_t secagg_protocol_bytes = 0;
  double secagg_client_s = 0, secagg_server_s = 0;
  uint32_t secagg_modulus_bits = 0;
  double dp_epsilon = 0;           // at dp_delta, all rounds so far (RDP composition)
  uint64_t dp_noise_variance = 0;  // per device, in code units
  size_t contributors = 0;
};

// A real model update for `edgefl bench`: the raw (uncompressed) update of the first client in
// round `round` of a bf16 FedAvg run of `model` on Fashion-MNIST (100 clients, Dirichlet 0.5).
bool make_real_update(const std::string& model, size_t round, std::vector<float>* update, std::string* error);

// Runs one simulation; fills `records` (one per round). Progress on `err` unless quiet.
int run_sim(const SimConfig& config, std::vector<RoundRecord>* records, std::ostream& err);

// What `edgefl sim --compare` runs: each entry of `codecs` ("UPLINK[@DOWNLINK][ --option value
// ...]": the codecs, then options of that run only, e.g. --epochs 4) once per seed. The first
// entry is the baseline, normally bf16: without '@' its downlink is "full" (bf16 both ways);
// the other entries without '@' take the configuration's downlink.
struct CompareOptions {
  std::vector<std::string> codecs;
  std::vector<uint64_t> seeds;  // empty: the SimConfig's seed
  std::string report_dir = "sim-report";
  double target_acc = 0;  // <= 0: each seed's baseline final accuracy - 0.005
  bool reuse = false;     // take a run from its JSONL in report_dir when it has every round
};

// Runs the comparison with the same seeds for every codec and writes report.md, the plots
// (accuracy against uplink bytes, against bytes both ways, against simulated time) and one JSONL
// per run into options.report_dir.
int run_compare(const SimConfig& base, const CompareOptions& options, std::ostream& out, std::ostream& err);

// One line describing the setup of a run (model, clients, partition, link, ...).
std::string describe(const SimConfig& config);

// The command line of `edgefl sim` (argv[0] = "edgefl", argv[1] = "sim").
int run_sim_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_SIM_H_
