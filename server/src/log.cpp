#include "log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace edgefl::server {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

bool needs_quotes(std::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}
}  // namespace

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}

bool parse_log_level(std::string_view text, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (text == level_name(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

LogLine::LogLine(LogLevel level, std::string_view event)
    : enabled_(static_cast<int>(level) >= g_level.load()) {
  if (!enabled_) return;
  const int64_t ms = unix_ms_now();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char ts[96];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000));
  line_.reserve(160);
  line_ += "ts=";
  line_ += ts;
  line_ += " level=";
  line_ += level_name(level);
  line_ += " event=";
  line_ += event;
}

LogLine::~LogLine() {
  if (!enabled_) return;
  line_ += '\n';
  size_t done = 0;
  while (done < line_.size()) {
    const ssize_t n = ::write(2, line_.data() + done, line_.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

LogLine& LogLine::kv(std::string_view key, std::string_view value) {
  if (!enabled_) return *this;
  line_ += ' ';
  line_ += key;
  line_ += '=';
  if (!needs_quotes(value)) {
    line_ += value;
    return *this;
  }
  line_ += '"';
  for (char c : value) {
    switch (c) {
      case '"': line_ += "\\\""; break;
      case '\\': line_ += "\\\\"; break;
      case '\n': line_ += "\\n"; break;
      case '\t': line_ += "\\t"; break;
      case '\r': line_ += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          line_ += hex;
        } else {
          line_ += c;
        }
    }
  }
  line_ += '"';
  return *this;
}

LogLine& LogLine::kv(std::string_view key, int64_t value) {
  return kv(key, std::string_view(std::to_string(value)));
}
LogLine& LogLine::kv(std::string_view key, uint64_t value) {
  return kv(key, std::string_view(std::to_string(value)));
}
LogLine& LogLine::kv(std::string_view key, double value) {
  char text[40];
  if (std::isfinite(value)) {
    std::snprintf(text, sizeof text, "%.6g", value);
  } else {
    std::snprintf(text, sizeof text, "%s", std::isnan(value) ? "NaN" : (value > 0 ? "+Inf" : "-Inf"));
  }
  return kv(key, std::string_view(text));
}

}  // namespace edgefl::server
