// server/src/log.h: one structured line per event, in logfmt (key=value, space separated),
// written whole to stderr (one write per line, so lines from threads never interleave):
//
//   ts=2026-11-22T16:30:01.123Z level=info event=update_accepted round=3 device=device-0002 bytes=5312
//
// Values with spaces, quotes or '=' are quoted with Go-style escapes. Thread-safe.
#ifndef EDGEFL_SERVER_LOG_H_
#define EDGEFL_SERVER_LOG_H_

#include <stdint.h>

#include <string>
#include <string_view>

namespace edgefl::server {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

class LogLine {
 public:
  LogLine(LogLevel level, std::string_view event);
  ~LogLine();  // writes the line
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  LogLine& kv(std::string_view key, std::string_view value);
  LogLine& kv(std::string_view key, const char* value) { return kv(key, std::string_view(value)); }
  LogLine& kv(std::string_view key, const std::string& value) { return kv(key, std::string_view(value)); }
  LogLine& kv(std::string_view key, int64_t value);
  LogLine& kv(std::string_view key, uint64_t value);
  LogLine& kv(std::string_view key, int value) { return kv(key, static_cast<int64_t>(value)); }
  LogLine& kv(std::string_view key, unsigned value) { return kv(key, static_cast<uint64_t>(value)); }
  LogLine& kv(std::string_view key, double value);

 private:
  std::string line_;
  bool enabled_;
};

inline LogLine log_info(std::string_view event) {
  return LogLine(LogLevel::kInfo, event);
}
inline LogLine log_warn(std::string_view event) {
  return LogLine(LogLevel::kWarn, event);
}
inline LogLine log_error(std::string_view event) {
  return LogLine(LogLevel::kError, event);
}
inline LogLine log_debug(std::string_view event) {
  return LogLine(LogLevel::kDebug, event);
}

// Lines below `level` are dropped (default kInfo).
void set_log_level(LogLevel level);
bool parse_log_level(std::string_view text, LogLevel* level);

// Milliseconds since the Unix epoch (system clock).
int64_t unix_ms_now();

}  // namespace edgefl::server

#endif  // EDGEFL_SERVER_LOG_H_
