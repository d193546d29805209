#include "report.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace edgefl {
namespace cli {

namespace {

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string xml_escape(const std::string& s) {
  std::string r;
  for (char ch : s) {
    switch (ch) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&quot;"; break;
      default: r += ch;
    }
  }
  return r;
}

const char* const kColors[] = {"#222222", "#d62728", "#1f77b4", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f"};

enum class PlotAxis { kUplink, kTotal, kTime };

double plot_x(const RoundRecord& rec, PlotAxis axis) {
  switch (axis) {
    case PlotAxis::kUplink: return double(rec.cum_uplink_bytes) / 1e6;
    case PlotAxis::kTotal: return double(rec.cum_uplink_bytes + rec.cum_downlink_bytes) / 1e6;
    case PlotAxis::kTime: break;
  }
  return rec.sim_time_s;
}

// A line plot with a log-scale x axis, one curve per run, a dashed target line.
std::string svg_plot(const std::vector<CodecRun>& runs, PlotAxis axis, double target,
                     const std::string& title) {
  const double width = 760, height = 460, left = 70, right = 210, top = 40, bottom = 55;
  const double pw = width - left - right, ph = height - top - bottom;
  double xmin = 1e300, xmax = 0, ymin = 1, ymax = 0;
  for (const CodecRun& r : runs) {
    for (const RoundRecord& rec : r.records) {
      if (!rec.evaluated) continue;
      const double x = plot_x(rec, axis);
      if (x <= 0) continue;
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, rec.test_acc);
      ymax = std::max(ymax, rec.test_acc);
    }
  }
  if (!(xmax > 0)) xmin = 0.1, xmax = 1;
  double lx0 = floor(log10(xmin)), lx1 = ceil(log10(xmax));
  if (lx1 <= lx0) lx1 = lx0 + 1;
  ymin = std::max(0.0, floor(ymin * 10) / 10);
  ymax = std::min(1.0, ceil(ymax * 20) / 20);
  if (ymax <= ymin) ymax = ymin + 0.1;
  auto px = [&](double x) { return left + (log10(x) - lx0) / (lx1 - lx0) * pw; };
  auto py = [&](double y) { return top + (1 - (y - ymin) / (ymax - ymin)) * ph; };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">" << xml_escape(title) << "</text>\n";
  // Grid and ticks.
  for (double e = lx0; e <= lx1 + 1e-9; e += 1) {
    for (int m = 1; m < 10; ++m) {
      const double x = m * pow(10, e);
      if (log10(x) > lx1 + 1e-9) break;
      const double X = px(x);
      s << "<line x1=\"" << X << "\" y1=\"" << top << "\" x2=\"" << X << "\" y2=\"" << top + ph
        << "\" stroke=\"" << (m == 1 ? "#bbbbbb" : "#eeeeee") << "\"/>\n";
      if (m == 1) {
        std::ostringstream label;
        label << pow(10, e);
        s << "<text x=\"" << X << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">" << label.str()
          << "</text>\n";
      }
    }
  }
  for (double y = ymin; y <= ymax + 1e-9; y += (ymax - ymin) / 5) {
    s << "<line x1=\"" << left << "\" y1=\"" << py(y) << "\" x2=\"" << left + pw << "\" y2=\"" << py(y)
      << "\" stroke=\"#eeeeee\"/>\n";
    s << "<text x=\"" << left - 8 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << fixed(y, 3)
      << "</text>\n";
  }
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#444444\"/>\n";
  s << "<text x=\"" << left + pw / 2 << "\" y=\"" << height - 12 << "\" text-anchor=\"middle\">"
    << (axis == PlotAxis::kUplink  ? "cumulative uplink (MB, log scale)"
        : axis == PlotAxis::kTotal ? "cumulative uplink + downlink (MB, log scale)"
                                   : "simulated time (s, log scale)")
    << "</text>\n";
  s << "<text transform=\"translate(18," << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">test accuracy</text>\n";
  if (target > ymin && target < ymax) {
    s << "<line x1=\"" << left << "\" y1=\"" << py(target) << "\" x2=\"" << left + pw << "\" y2=\""
      << py(target) << "\" stroke=\"#888888\" stroke-dasharray=\"5,4\"/>\n";
    s << "<text x=\"" << left + pw - 4 << "\" y=\"" << py(target) - 5
      << "\" text-anchor=\"end\" fill=\"#666666\">target " << fixed(target, 3) << "</text>\n";
  }
  // Curves and legend.
  for (size_t i = 0; i < runs.size(); ++i) {
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << (i == 0 ? 2.5 : 1.8)
      << "\" points=\"";
    for (const RoundRecord& rec : runs[i].records) {
      if (!rec.evaluated) continue;
      const double x = plot_x(rec, axis);
      if (x <= 0) continue;
      s << fixed(px(x), 1) << "," << fixed(py(std::max(ymin, rec.test_acc)), 1) << " ";
    }
    s << "\"/>\n";
    const double ly = top + 14 + 20.0 * double(i);
    s << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 36 << "\" y2=\""
      << ly << "\" stroke=\"" << color << "\" stroke-width=\"2.5\"/>\n";
    s << "<text x=\"" << left + pw + 42 << "\" y=\"" << ly + 4 << "\">" << xml_escape(runs[i].codec)
      << (i == 0 ? " (baseline)" : "") << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

bool write_text(const std::string& path, const std::string& text, std::string* error) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) {
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace

RunSummary summarize(const std::vector<RoundRecord>& records, double target_acc) {
  RunSummary s;
  std::vector<double> evals;
  for (const RoundRecord& r : records) {
    if (!r.evaluated) continue;
    evals.push_back(r.test_acc);
    s.best_acc = std::max(s.best_acc, r.test_acc);
    const size_t window = std::min(kTargetWindow, evals.size());
    double trailing = 0;
    for (size_t i = evals.size() - window; i < evals.size(); ++i) trailing += evals[i];
    if (!s.reached && trailing / double(window) >= target_acc) {
      s.reached = true;
      s.rounds_to_target = r.round;
      s.bytes_to_target = double(r.cum_uplink_bytes);
      s.down_bytes_to_target = double(r.cum_downlink_bytes);
      s.time_to_target = r.sim_time_s;
    }
  }
  if (!evals.empty()) {
    const size_t window = std::min(kFinalWindow, evals.size());
    double sum = 0;
    for (size_t i = evals.size() - window; i < evals.size(); ++i) sum += evals[i];
    s.final_acc = sum / double(window);
  }
  if (!records.empty()) {
    s.rounds = records.back().round;
    s.total_uplink_bytes = double(records.back().cum_uplink_bytes);
    s.total_downlink_bytes = double(records.back().cum_downlink_bytes);
    s.total_sim_s = records.back().sim_time_s;
    s.uplink_bytes_per_round = s.total_uplink_bytes / double(records.size());
  }
  return s;
}

namespace {

// Mean and range of one column over seeds, as "mean" or "mean [min, max]".
struct Spread {
  std::vector<double> values;
  std::string text(int digits, double scale = 1) const {
    if (values.empty()) return "-";
    double sum = 0, lo = values[0], hi = values[0];
    for (double v : values) sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
    std::string t = fixed(sum / double(values.size()) * scale, digits);
    if (values.size() > 1) t += " [" + fixed(lo * scale, digits) + ", " + fixed(hi * scale, digits) + "]";
    return t;
  }
};

// The table's columns for one codec, over seeds.
struct CodecColumns {
  Spread rounds, final_acc, vs_base_pp, to_target, up, up_x, down, down_x, total, total_x, time, time_x;
  size_t reached = 0, runs = 0;
};

void add_run(const RunSummary& s, const RunSummary& base, CodecColumns* c) {
  ++c->runs;
  c->rounds.values.push_back(double(s.rounds));
  c->final_acc.values.push_back(s.final_acc);
  c->vs_base_pp.values.push_back(100 * (s.final_acc - base.final_acc));
  if (!s.reached) return;
  ++c->reached;
  c->to_target.values.push_back(double(s.rounds_to_target));
  const double total = s.bytes_to_target + s.down_bytes_to_target;
  c->up.values.push_back(s.bytes_to_target);
  c->down.values.push_back(s.down_bytes_to_target);
  c->total.values.push_back(total);
  c->time.values.push_back(s.time_to_target);
  if (!base.reached) return;
  c->up_x.values.push_back(s.bytes_to_target / base.bytes_to_target);
  c->down_x.values.push_back(s.down_bytes_to_target / base.down_bytes_to_target);
  c->total_x.values.push_back(total / (base.bytes_to_target + base.down_bytes_to_target));
  c->time_x.values.push_back(s.time_to_target / base.time_to_target);
}

}  // namespace

bool write_report(const std::string& dir, const std::vector<CodecRun>& runs, const ReportSettings& settings,
                  std::ostream& out, std::string* error) {
  if (runs.empty()) {
    *error = "no runs to report";
    return false;
  }
  size_t per_seed = 0;  // codecs per seed
  while (per_seed < runs.size() && runs[per_seed].seed == runs[0].seed) ++per_seed;
  if (runs.size() % per_seed != 0) {
    *error = "every seed needs the same runs";
    return false;
  }
  const size_t seeds = runs.size() / per_seed;
  std::vector<CodecColumns> columns(per_seed);
  std::vector<double> targets;
  for (size_t k = 0; k < seeds; ++k) {
    const CodecRun* group = &runs[k * per_seed];
    const RunSummary base_probe = summarize(group[0].records, 2.0);
    const double target = settings.target_acc > 0 ? settings.target_acc : base_probe.final_acc - 0.005;
    targets.push_back(target);
    const RunSummary base = summarize(group[0].records, target);
    for (size_t i = 0; i < per_seed; ++i) add_run(summarize(group[i].records, target), base, &columns[i]);
  }
  std::string seed_list;
  for (size_t k = 0; k < seeds; ++k) seed_list += (k ? ", " : "") + std::to_string(runs[k * per_seed].seed);

  const std::string& b = runs[0].codec;
  std::ostringstream md;
  md << "# End-to-end comparison against " << b << "\n\n";
  md << settings.description << "; seed" << (seeds > 1 ? "s " : " ") << seed_list << ".\n\n";
  md << "Target accuracy: **" << Spread{targets}.text(4) << "**"
     << (settings.target_acc > 0 ? "" : " (each seed: the baseline's final accuracy - 0.5 pp)")
     << ". Final accuracy is the mean of the last " << kFinalWindow
     << " evaluations; a target counts as reached when the mean of the last " << kTargetWindow
     << " evaluations reaches it. Bytes are all-in (headers, scales, indices, the download stream's "
        "length prefixes), uplink and downlink; `UP@DOWN` names a run's downlink (round/downlink.h), "
        "`full` is the whole bf16 model every round. Each ratio divides by the baseline's bytes in the "
        "same direction (total: both ways) to its own target. Simulated time follows the link model and the"
        " measured compute of the slowest selected client per round. A run given more rounds than the "
        "baseline (`--rounds` in its entry) is compared at its own final round; its target stays the "
        "baseline's."
     << (seeds > 1 ? " With several seeds: mean [min, max]." : "") << "\n\n";
  md << "| codec | rounds | final acc | vs " << b << " (pp) | rounds to target | uplink to target | x | "
     << "downlink to target | x | total to target | x | sim time to target | x |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < per_seed; ++i) {
    const CodecColumns& c = columns[i];
    md << "| `" << runs[i].codec << "` | " << c.rounds.text(0) << " | " << c.final_acc.text(4) << " | "
       << (i == 0 ? std::string("-") : c.vs_base_pp.text(2)) << " | ";
    if (c.reached == 0) {
      md << "not reached | - | - | - | - | - | - | - | - |\n";
      continue;
    }
    md << c.to_target.text(0) << " | " << c.up.text(2, 1e-6) << " MB | " << c.up_x.text(4) << " | "
       << c.down.text(2, 1e-6) << " MB | " << c.down_x.text(4) << " | " << c.total.text(2, 1e-6) << " MB | "
       << c.total_x.text(4) << " | " << c.time.text(1) << " s | " << c.time_x.text(3) << " |";
    if (c.reached < c.runs) md << " (reached in " << c.reached << " of " << c.runs << ")";
    md << "\n";
  }
  md << "\n![accuracy vs uplink](accuracy_vs_uplink.svg)\n\n![accuracy vs total bytes](accuracy_vs_total.svg)"
        "\n\n![accuracy vs time](accuracy_vs_time.svg)\n";
  if (!write_text(dir + "/report.md", md.str(), error)) return false;
  const std::vector<CodecRun> first(runs.begin(), runs.begin() + ptrdiff_t(per_seed));
  if (!write_text(dir + "/accuracy_vs_uplink.svg",
                  svg_plot(first, PlotAxis::kUplink, targets[0], "Test accuracy vs cumulative uplink"),
                  error) ||
      !write_text(
          dir + "/accuracy_vs_total.svg",
          svg_plot(first, PlotAxis::kTotal, targets[0], "Test accuracy vs cumulative bytes, both ways"),
          error) ||
      !write_text(dir + "/accuracy_vs_time.svg",
                  svg_plot(first, PlotAxis::kTime, targets[0], "Test accuracy vs simulated time"), error)) {
    return false;
  }
  out << md.str();
  out << "\nreport: " << dir << "/report.md (plots: accuracy_vs_uplink.svg, accuracy_vs_total.svg, "
      << "accuracy_vs_time.svg)\n";
  return true;
}

namespace {

// The number after "key": in one JSON line of ours (null: NaN). False if the key is absent.
bool json_number(const std::string& line, const char* key, double* out) {
  const std::string quoted = std::string("\"") + key + "\":";
  const size_t at = line.find(quoted);
  if (at == std::string::npos) return false;
  const char* p = line.c_str() + at + quoted.size();
  while (*p == ' ') ++p;
  if (strncmp(p, "null", 4) == 0) {
    *out = NAN;
    return true;
  }
  if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
    *out = *p == 't' ? 1 : 0;
    return true;
  }
  char* end = nullptr;
  *out = strtod(p, &end);
  return end != p;
}

}  // namespace

bool read_jsonl(const std::string& path, std::vector<RoundRecord>* records, std::string* error) {
  std::ifstream f(path);
  if (!f) {
    *error = "cannot read " + path;
    return false;
  }
  records->clear();
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    RoundRecord r;
    double round = 0, evaluated = 0, up = 0, down = 0, cum_up = 0, cum_down = 0;
    if (!json_number(line, "round", &round) || !json_number(line, "evaluated", &evaluated) ||
        !json_number(line, "test_acc", &r.test_acc) || !json_number(line, "uplink_bytes", &up) ||
        !json_number(line, "downlink_bytes", &down) || !json_number(line, "cum_uplink_bytes", &cum_up) ||
        !json_number(line, "cum_downlink_bytes", &cum_down) ||
        !json_number(line, "sim_time_s", &r.sim_time_s)) {
      *error = path + ": line " + std::to_string(records->size() + 1) + " lacks a field of edgefl sim --json";
      return false;
    }
    if (std::isnan(r.test_acc)) r.test_acc = 0;
    r.round = size_t(round);
    r.evaluated = evaluated != 0;
    r.uplink_bytes = uint64_t(up);
    r.downlink_bytes = uint64_t(down);
    r.cum_uplink_bytes = uint64_t(cum_up);
    r.cum_downlink_bytes = uint64_t(cum_down);
    records->push_back(r);
  }
  return true;
}

std::string sanitize_file_name(const std::string& text) {
  std::string r;
  for (char ch : text) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                      ch == '.' || ch == '-';
    r += keep ? ch : '_';
  }
  return r.empty() ? std::string("codec") : r;
}

bool make_directories(const std::string& path) {
  if (path.empty()) return false;
  std::string partial;
  std::istringstream parts(path);
  std::string part;
  if (path[0] == '/') partial = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    partial += part;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
    partial += "/";
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace cli
}  // namespace edgefl
