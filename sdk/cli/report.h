// report.h: the end-to-end comparison report of `edgefl sim --compare`: a Markdown table and two
// SVG plots (test accuracy against cumulative uplink bytes and against simulated time).
#ifndef EDGEFL_CLI_REPORT_H_
#define EDGEFL_CLI_REPORT_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "sim.h"

namespace edgefl {
namespace cli {

// One run of --compare: its label ("UPLINK" or "UPLINK@DOWNLINK"), seed and rounds.
struct CodecRun {
  std::string codec;
  uint64_t seed = 0;
  std::vector<RoundRecord> records;
};

struct ReportSettings {
  double target_acc = 0;    // <= 0: the baseline's final accuracy - 0.005
  std::string description;  // the setup, one line
};

// What the table says about one run, relative to the baseline (runs[0]).
// Test accuracy of a federated run moves by about 1 pp from round to round, so single evaluations
// decide nothing: the final accuracy is the mean of the last kFinalWindow evaluations, and the
// target counts as reached at the first round where the mean of the last kTargetWindow
// evaluations (fewer at the start) is at or above it.
constexpr size_t kFinalWindow = 10;
constexpr size_t kTargetWindow = 5;

struct RunSummary {
  double final_acc = 0, best_acc = 0;
  double total_uplink_bytes = 0, total_downlink_bytes = 0, uplink_bytes_per_round = 0, total_sim_s = 0;
  size_t rounds = 0;                // rounds run
  bool reached = false;             // the target accuracy was reached (trailing mean, see above)
  size_t rounds_to_target = 0;      // the round at which it was reached
  double bytes_to_target = 0;       // cumulative uplink bytes at that round
  double down_bytes_to_target = 0;  // cumulative downlink bytes at that round
  double time_to_target = 0;        // simulated seconds at that round
};

RunSummary summarize(const std::vector<RoundRecord>& records, double target_acc);

// Writes report.md, accuracy_vs_uplink.svg and accuracy_vs_time.svg into `dir` and prints the
// table on `out`. `runs` holds, for each seed in turn, the baseline first and then the other
// codecs in the same order; each run is compared with its own seed's baseline (target: that
// baseline's final accuracy - 0.5 pp unless settings.target_acc is set), and with several seeds
// the table gives the mean and the range over seeds. False (with *error) if a file cannot be
// written.
bool write_report(const std::string& dir, const std::vector<CodecRun>& runs, const ReportSettings& settings,
                  std::ostream& out, std::string* error);

// Reads a JSONL file written by `edgefl sim --json` back into records (the fields the report
// uses). False with *error if it cannot be read or a line lacks a field.
bool read_jsonl(const std::string& path, std::vector<RoundRecord>* records, std::string* error);

// A codec spec as a file name ("topk:0.01+q4" -> "topk_0.01_q4").
std::string sanitize_file_name(const std::string& text);

// mkdir -p. False on failure.
bool make_directories(const std::string& path);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_REPORT_H_
