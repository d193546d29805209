#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace edgefl::server {
namespace {
constexpr size_t kLatencyWindow = 4096;

void add(std::string* out, const char* name, const char* type, const char* help, double value) {
  char line[96];
  *out += "# HELP ";
  *out += name;
  *out += ' ';
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += ' ';
  *out += type;
  *out += '\n';
  *out += name;
  if (std::isnan(value)) {
    *out += " NaN\n";
    return;
  }
  std::snprintf(line, sizeof line, " %.17g\n", value);
  *out += line;
}
}  // namespace

void Metrics::observe_upload_latency(double seconds) {
  std::lock_guard<std::mutex> lock(latency_mutex_);
  if (latencies_.size() < kLatencyWindow) {
    latencies_.push_back(seconds);
  } else {
    latencies_[latency_next_] = seconds;
  }
  latency_next_ = (latency_next_ + 1) % kLatencyWindow;
  ++latency_count_;
  latency_sum_ += seconds;
}

double Metrics::upload_latency_quantile(double q) const {
  std::vector<double> copy;
  {
    std::lock_guard<std::mutex> lock(latency_mutex_);
    copy = latencies_;
  }
  if (copy.empty()) return NAN;
  std::sort(copy.begin(), copy.end());
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(copy.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, copy.size() - 1);
  return copy[lo] + (copy[hi] - copy[lo]) * (rank - static_cast<double>(lo));
}

std::string Metrics::render() const {
  std::string out;
  out.reserve(4096);
  auto c = [&](const char* name, const char* help, const auto& v) {
    add(&out, name, "counter", help, static_cast<double>(v.load()));
  };
  auto g = [&](const char* name, const char* help, double v) { add(&out, name, "gauge", help, v); };
  c("edgefl_connections_total", "TCP connections accepted.", connections_total);
  g("edgefl_connections_open", "Connections currently open.", static_cast<double>(connections_open.load()));
  g("edgefl_connections_open_peak", "The most connections open at once since the start.",
    static_cast<double>(connections_open_peak.load()));
  c("edgefl_tls_handshakes_total", "Completed TLS handshakes.", handshakes_ok);
  c("edgefl_connections_abandoned_total",
    "Connections their device closed while they waited in the backlog (dropped without a handshake).",
    connections_abandoned);
  c("edgefl_connections_timed_out_total",
    "Connections closed by the idle timeout after the handshake: no message, or one not received whole "
    "in time.",
    connections_timed_out);
  c("edgefl_tls_handshake_failures_total", "Failed TLS handshakes (untrusted, expired, no certificate).",
    handshakes_failed);
  add(&out, "edgefl_tls_handshake_seconds_total", "counter", "Time spent in completed TLS handshakes.",
      static_cast<double>(handshake_us_total.load()) / 1e6);
  c("edgefl_devices_unauthorized_total", "Devices refused after the handshake (revoked, invalid id).",
    devices_unauthorized);
  c("edgefl_frames_rejected_total", "Frames rejected (malformed, oversize, unexpected).", frames_rejected);
  g("edgefl_round_id", "The current (or last) round id.", static_cast<double>(round_id.load()));
  g("edgefl_model_version", "The global model version.", static_cast<double>(model_version.load()));
  c("edgefl_rounds_committed_total", "Rounds that produced a new model.", rounds_committed);
  c("edgefl_ledger_writes_total", "Updates written to the ledger (durable before their ack).", ledger_writes);
  add(&out, "edgefl_ledger_write_seconds_total", "counter",
      "Time spent writing updates to the ledger, until the commit was durable.",
      static_cast<double>(ledger_write_us_total.load()) / 1e6);
  c("edgefl_rounds_abandoned_total", "Rounds that ended at their deadline without a quorum.",
    rounds_abandoned);
  c("edgefl_task_offers_total", "Task offers sent.", offers);
  c("edgefl_retry_later_total", "Come-back-later answers sent.", retry_later);
  c("edgefl_offers_expired_total", "Offers whose lease ran out before the device uploaded.", offers_expired);
  c("edgefl_round_close_failures_total", "Round closes that failed on I/O and were retried.", close_failures);
  c("edgefl_server_busy_total", "Connections answered RetryLater(ServerBusy) at the connection cap.",
    server_busy);
  c("edgefl_updates_accepted_total", "Updates accepted (durable before their ack).", updates_accepted);
  c("edgefl_updates_duplicate_total", "Updates acked as duplicates.", updates_duplicate);
  c("edgefl_updates_straggler_total", "Updates that arrived after the round closed with its quorum.",
    updates_straggler);
  c("edgefl_updates_late_total", "Updates that arrived after the deadline.", updates_late);
  c("edgefl_updates_rejected_total",
    "Updates rejected (digest, size, codec, bounds, or another update of a counted device).",
    updates_rejected);
  c("edgefl_upload_bytes_total", "Update bytes received.", upload_bytes);
  c("edgefl_download_bytes_total", "Model bytes sent.", download_bytes);
  const int64_t acc = test_accuracy_micros.load();
  g("edgefl_test_accuracy", "Accuracy of the global model on the test set (NaN: not evaluated).",
    acc < 0 ? NAN : static_cast<double>(acc) / 1e6);
  // The upload-to-ack latency as a summary.
  uint64_t count;
  double sum;
  {
    std::lock_guard<std::mutex> lock(latency_mutex_);
    count = latency_count_;
    sum = latency_sum_;
  }
  out +=
      "# HELP edgefl_upload_to_ack_seconds From UploadStart to the Ack of an accepted update (last 4096).\n";
  out += "# TYPE edgefl_upload_to_ack_seconds summary\n";
  char line[128];
  for (double q : {0.5, 0.9, 0.99}) {
    const double v = upload_latency_quantile(q);
    if (std::isnan(v)) {
      std::snprintf(line, sizeof line, "edgefl_upload_to_ack_seconds{quantile=\"%g\"} NaN\n", q);
    } else {
      std::snprintf(line, sizeof line, "edgefl_upload_to_ack_seconds{quantile=\"%g\"} %.9g\n", q, v);
    }
    out += line;
  }
  std::snprintf(line, sizeof line,
                "edgefl_upload_to_ack_seconds_sum %.9g\nedgefl_upload_to_ack_seconds_count %llu\n", sum,
                static_cast<unsigned long long>(count));
  out += line;
  return out;
}

}  // namespace edgefl::server
