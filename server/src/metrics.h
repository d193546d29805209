// server/src/metrics.h: the server's counters and gauges, rendered in the Prometheus text
// exposition format (version 0.0.4) for GET /metrics. Counters are atomics: any thread may bump
// them; render() may run concurrently.
#ifndef EDGEFL_SERVER_METRICS_H_
#define EDGEFL_SERVER_METRICS_H_

#include <stdint.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace edgefl::server {

struct Metrics {
  // Connections and authentication.
  std::atomic<uint64_t> connections_total{0};
  std::atomic<int64_t> connections_open{0};
  std::atomic<int64_t> connections_open_peak{0};  // the most open at once since the start
  std::atomic<uint64_t> handshakes_ok{0};
  std::atomic<uint64_t> handshakes_failed{0};
  std::atomic<uint64_t> connections_abandoned{0};  // closed by the device before it was accepted
  std::atomic<uint64_t> connections_timed_out{0};  // closed by the idle timeout after the handshake
  std::atomic<uint64_t> devices_unauthorized{0};   // valid chain, but revoked or bad device id
  std::atomic<uint64_t> frames_rejected{0};        // malformed, oversize, unexpected
  std::atomic<uint64_t> handshake_us_total{0};     // server CPU+wait time in handshakes, microseconds
  // Rounds.
  std::atomic<uint64_t> round_id{0};
  std::atomic<uint64_t> model_version{0};
  std::atomic<uint64_t> rounds_committed{0};
  std::atomic<uint64_t> rounds_abandoned{0};
  std::atomic<uint64_t> offers{0};
  std::atomic<uint64_t> retry_later{0};
  std::atomic<uint64_t> offers_expired{0};  // offers whose lease ran out before an upload
  std::atomic<uint64_t> close_failures{0};  // round closes that failed (I/O) and were retried
  std::atomic<uint64_t> server_busy{0};     // connections answered RetryLater ServerBusy at the cap
  // The durable write of accepted updates (Storage::record_update, until its commit returned).
  std::atomic<uint64_t> ledger_writes{0};
  std::atomic<uint64_t> ledger_write_us_total{0};  // microseconds
  // Updates by disposition.
  std::atomic<uint64_t> updates_accepted{0};
  std::atomic<uint64_t> updates_duplicate{0};
  std::atomic<uint64_t> updates_straggler{0};
  std::atomic<uint64_t> updates_late{0};
  std::atomic<uint64_t> updates_rejected{0};
  // Bytes of wire frames (TLS overhead excluded).
  std::atomic<uint64_t> upload_bytes{0};    // UploadChunk data received
  std::atomic<uint64_t> download_bytes{0};  // ModelChunk data sent
  // Last evaluation on the test set (x 1e6, integer so that it can be atomic); -1: none.
  std::atomic<int64_t> test_accuracy_micros{-1};

  // Upload-to-ack latency (from UploadStart to the Ack of an accepted update), seconds.
  void observe_upload_latency(double seconds);
  // q in [0, 1] over the retained observations (the last 4096); NaN if none.
  double upload_latency_quantile(double q) const;

  std::string render() const;

 private:
  mutable std::mutex latency_mutex_;
  std::vector<double> latencies_;  // ring of the last kLatencyWindow observations
  size_t latency_next_ = 0;
  uint64_t latency_count_ = 0;
  double latency_sum_ = 0;
};

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_METRICS_H_
