#include "report.h"

#include <errno.h>
#include <math.h>
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

// A line plot with a log-scale x axis, one curve per run, a dashed target line.
std::string svg_plot(const std::vector<CodecRun>& runs, bool x_is_bytes, double target,
                     const std::string& title) {
  const double width = 760, height = 460, left = 70, right = 210, top = 40, bottom = 55;
  const double pw = width - left - right, ph = height - top - bottom;
  double xmin = 1e300, xmax = 0, ymin = 1, ymax = 0;
  for (const CodecRun& r : runs) {
    for (const RoundRecord& rec : r.records) {
      if (!rec.evaluated) continue;
      const double x = x_is_bytes ? double(rec.cum_uplink_bytes) / 1e6 : rec.sim_time_s;
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
    << (x_is_bytes ? "cumulative uplink (MB, log scale)" : "simulated time (s, log scale)") << "</text>\n";
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
      const double x = x_is_bytes ? double(rec.cum_uplink_bytes) / 1e6 : rec.sim_time_s;
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
      s.bytes_to_target = double(r.cum_uplink_bytes);
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
    s.total_uplink_bytes = double(records.back().cum_uplink_bytes);
    s.total_sim_s = records.back().sim_time_s;
    s.uplink_bytes_per_round = s.total_uplink_bytes / double(records.size());
  }
  return s;
}

bool write_report(const std::string& dir, const std::vector<CodecRun>& runs, const ReportSettings& settings,
                  std::ostream& out, std::string* error) {
  if (runs.empty()) {
    *error = "no runs to report";
    return false;
  }
  const RunSummary base_probe = summarize(runs[0].records, 2.0);
  const double target = settings.target_acc > 0 ? settings.target_acc : base_probe.final_acc - 0.005;
  std::vector<RunSummary> sums;
  for (const CodecRun& r : runs) sums.push_back(summarize(r.records, target));
  const RunSummary& base = sums[0];

  std::ostringstream md;
  md << "# End-to-end comparison against " << runs[0].codec << "\n\n";
  md << settings.description << ".\n\n";
  md << "Target accuracy: **" << fixed(target, 4) << "**"
     << (settings.target_acc > 0 ? "" : " (the baseline's final accuracy - 0.5 pp)")
     << ". Final accuracy is the mean of the last " << kFinalWindow
     << " evaluations; a target counts as reached when the mean of the last " << kTargetWindow
     << " evaluations reaches it. Bytes are all-in (headers, scales, indices); simulated time follows the "
        "link model and the"
        " measured compute of the slowest selected client per round.\n\n";
  md << "| codec | final acc | vs " << runs[0].codec
     << " (pp) | uplink total | bytes/round | uplink to target | x " << runs[0].codec
     << " bytes | sim time to target | x " << runs[0].codec << " time |\n";
  md << "|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunSummary& s = sums[i];
    md << "| `" << runs[i].codec << "` | " << fixed(s.final_acc, 4) << " | "
       << (i == 0 ? "" : (s.final_acc >= base.final_acc ? "+" : ""))
       << (i == 0 ? std::string("-") : fixed(100 * (s.final_acc - base.final_acc), 2)) << " | "
       << fixed(s.total_uplink_bytes / 1e6, 2) << " MB | " << fixed(s.uplink_bytes_per_round / 1e3, 1)
       << " kB | ";
    if (s.reached) {
      md << fixed(s.bytes_to_target / 1e6, 2) << " MB | ";
      md << (base.reached ? fixed(s.bytes_to_target / base.bytes_to_target, 3) : std::string("-")) << " | ";
      md << fixed(s.time_to_target, 1) << " s | ";
      md << (base.reached ? fixed(s.time_to_target / base.time_to_target, 3) : std::string("-")) << " |\n";
    } else {
      md << "not reached | - | not reached | - |\n";
    }
  }
  md << "\n![accuracy vs uplink](accuracy_vs_uplink.svg)\n\n![accuracy vs time](accuracy_vs_time.svg)\n";
  if (!write_text(dir + "/report.md", md.str(), error)) return false;
  if (!write_text(dir + "/accuracy_vs_uplink.svg",
                  svg_plot(runs, true, target, "Test accuracy vs cumulative uplink"), error)) {
    return false;
  }
  if (!write_text(dir + "/accuracy_vs_time.svg",
                  svg_plot(runs, false, target, "Test accuracy vs simulated time"), error)) {
    return false;
  }
  out << md.str();
  out << "\nreport: " << dir << "/report.md (plots: " << dir << "/accuracy_vs_uplink.svg, " << dir
      << "/accuracy_vs_time.svg)\n";
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
