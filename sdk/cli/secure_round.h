// One SecAgg+ round in one process, for `edgefl sim --secure-aggregation`: every device of the
// round runs edgefl::secagg::SecAggClient over its update's integer codes
// (edgefl::read_integer_codes), the server runs SecAggServer, and the message sizes each would
// put on the wire are counted.
//
// Bytes per device are the frames edgefl::Client and edgefl-server exchange (edgefl/wire.h,
// encoded): SecAggAdvertise / SecAggKeys, SecAggShares / SecAggInbox, the masked vector's
// UploadStart, chunks and Commit / Ack, SecAggUnmaskRequest / SecAggUnmaskResponse / SecAggStatus.
// Not counted: the polls while a phase is open (their number depends on timing, 40-60 bytes each)
// and the round's TaskOffer and model download (the simulator counts those as for every round).
#ifndef EDGEFL_CLI_SECURE_ROUND_H_
#define EDGEFL_CLI_SECURE_ROUND_H_

#include <stddef.h>
#include <stdint.h>

#include <ostream>
#include <string>
#include <vector>

namespace edgefl {
namespace cli {

struct SecureRoundResult {
  std::string error;                     // empty on success
  std::vector<int32_t> summed_codes;     // the unmasked sum of the contributors' codes
  std::vector<size_t> contributors;      // device slots whose vectors are in the sum
  std::vector<uint64_t> uplink_bytes;    // per slot: keys, shares, masked vector, unmask answer
  std::vector<uint64_t> downlink_bytes;  // per slot: neighbours' keys, shares, unmask request
  std::vector<double> client_s;          // per slot: CPU seconds of the device's SecAgg steps
  double server_s = 0;                   // CPU seconds of the server's SecAgg steps
  uint32_t modulus_bits = 0, degree = 0, threshold = 0;
};

// `codes[slot]`: each device's codes (the same length for all), |code| <= max_code. Devices with
// dropped[slot] leave after sharing their keys, before sending their masked vector (the costly
// case: the server recovers their pair masks). The graph tolerates `dropout_rate` (>= the
// fraction that drops) and 5% adversarial devices against a curious server. noise_variance > 0:
// the codes carry discrete Gaussian noise of that variance (secagg/dp.h) and the modulus leaves
// room for the sum of the noises.
SecureRoundResult run_secure_round(uint64_t round_id, uint64_t seed,
                                   const std::vector<std::vector<int32_t>>& codes, uint32_t max_code,
                                   const std::vector<bool>& dropped, double dropout_rate,
                                   uint64_t noise_variance = 0);

// `edgefl secagg-bench`: whole rounds at several cohort sizes, CPU and bytes per device.
extern const char kSecaggBenchUsage[];
int run_secagg_bench_command(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_SECURE_ROUND_H_
