#include "runtime/trace.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "runtime/atomic_file.hpp"

namespace zf {

std::string task_category(const std::string& n) {
  auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
  if (starts("fwd.")) return "forward";
  if (starts("bwd.")) return "backward";
  if (starts("recompute.")) return "recompute";  // activation checkpointing's forward again
  if (starts("select.") || starts("auto.")) return "select";
  if (starts("adam.device")) return "adam.device";
  if (starts("adam.host")) return "adam.host";
  if (starts("accumulate")) return "accumulate";
  if (starts("merge")) return "merge";
  if (starts("load_batch")) return "load";
  if (starts("eval")) return "eval";
  return "copy";  // d2h.*, h2d.*, result.*, resync.*, init.*
}

namespace {

struct Colour {
  const char* alias;
  const char* name;
  const char* rgb;
};
const Colour kStates[] = {
    {"Fw", "forward", "0.0 0.6 0.5"},      {"Bw", "backward", "0.9 0.5 0.1"},
    {"Se", "select", "0.6 0.2 0.8"},       {"Ad", "adam.device", "0.9 0.1 0.1"},
    {"Ac", "accumulate", "0.5 0.7 0.9"},   {"Ah", "adam.host", "0.2 0.3 0.9"},
    {"Me", "merge", "1.0 0.8 0.0"},        {"Cp", "copy", "1.0 0.1 1.0"},
    {"Lo", "load", "0.6 0.6 0.6"},         {"Ev", "eval", "0.3 0.3 0.3"},
    {"Rc", "recompute", "0.5 0.8 0.3"},
};
const char* alias_of(const std::string& cat) {
  for (auto& c : kStates)
    if (cat == c.name) return c.alias;
  return "Cp";
}

const char* kHeader =
    "%EventDef PajeDefineContainerType 1\n%  Alias string\n%  Type string\n%  Name string\n%EndEventDef\n"
    "%EventDef PajeDefineStateType 3\n%  Alias string\n%  Type string\n%  Name string\n%EndEventDef\n"
    "%EventDef PajeDefineEventType 4\n%  Alias string\n%  Type string\n%  Name string\n%EndEventDef\n"
    "%EventDef PajeDefineEntityValue 6\n%  Alias string\n%  Type string\n%  Name string\n%  Color color\n%EndEventDef\n"
    "%EventDef PajeCreateContainer 7\n%  Time date\n%  Alias string\n%  Type string\n%  Container string\n%  Name string\n%EndEventDef\n"
    "%EventDef PajeDestroyContainer 8\n%  Time date\n%  Name string\n%  Type string\n%EndEventDef\n"
    "%EventDef PajeSetState 10\n%  Time date\n%  Container string\n%  Type string\n%  Value string\n%EndEventDef\n"
    "%EventDef PajeNewEvent 20\n%  Time date\n%  Container string\n%  Type string\n%  Value string\n%EndEventDef\n";

struct Line {
  double t;   // ms
  int order;  // tie-break: idle (0) before a state set (1) at the same time; events last
  std::string text;
};

std::string quoted(std::string s) {
  std::replace(s.begin(), s.end(), '"', '\'');
  return "\"" + s + "\"";
}

}  // namespace

void write_paje(const std::string& path, const std::vector<TaskRecord>& records,
                const std::vector<TraceWorker>& workers, std::vector<TraceEvent> events) {
  double t0 = 1e300, t1 = 0;
  for (auto& r : records) {
    t0 = std::min(t0, r.start_us);
    t1 = std::max(t1, r.end_us);
  }
  for (auto& e : events) {
    t0 = std::min(t0, e.time_us);
    t1 = std::max(t1, e.time_us);
  }
  if (t0 > t1) t0 = t1 = 0;
  auto ms = [&](double us) { return (us - t0) * 1e-3; };
  std::ostringstream os;
  os << kHeader;
  os << "1 P 0 \"Program\"\n1 C P \"Context\"\n1 W C \"Worker\"\n3 S W \"Task\"\n";
  os << "4 E W \"Event\"\n4 G P \"Step event\"\n";
  os << "6 I S \"idle\" \"0.95 0.95 0.95\"\n";
  for (auto& c : kStates) os << "6 " << c.alias << " S " << quoted(c.name) << " " << quoted(c.rgb) << "\n";
  os << "7 0.000000 p P 0 \"zenflow run\"\n";
  os << "7 0.000000 cd C p \"device context\"\n7 0.000000 ch C p \"host context\"\n";
  for (auto& w : workers)
    os << "7 0.000000 w" << w.id << " W " << (w.side == Side::Device ? "cd" : "ch") << " " << quoted(w.name) << "\n";
  for (auto& w : workers) os << "10 0.000000 w" << w.id << " S I\n";

  std::vector<Line> lines;
  lines.reserve(records.size() * 2 + events.size());
  char buf[512];
  // per worker, tasks do not overlap (one task at a time per CPU worker): set the state at
  // start, back to idle at end
  for (auto& r : records) {
    std::snprintf(buf, sizeof buf, "10 %.6f w%d S %s\n", ms(r.start_us), r.worker, alias_of(task_category(r.name)));
    lines.push_back({ms(r.start_us), 1, buf});
    std::snprintf(buf, sizeof buf, "10 %.6f w%d S I\n", ms(r.end_us), r.worker);
    lines.push_back({ms(r.end_us), 0, buf});
  }
  for (auto& e : events) {
    std::string c = e.worker < 0 ? "p" : "w" + std::to_string(e.worker);
    std::string type = e.worker < 0 ? "G" : "E";
    std::snprintf(buf, sizeof buf, "20 %.6f %s %s %s\n", ms(e.time_us), c.c_str(), type.c_str(),
                  quoted(e.kind + ": " + e.value).c_str());
    lines.push_back({ms(e.time_us), 2, buf});
  }
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    return a.t < b.t || (a.t == b.t && a.order < b.order);
  });
  for (auto& l : lines) os << l.text;
  const double end = ms(t1) + 0.001;
  for (auto& w : workers) {
    std::snprintf(buf, sizeof buf, "8 %.6f w%d W\n", end, w.id);
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "8 %.6f cd C\n8 %.6f ch C\n8 %.6f p P\n", end, end, end);
  os << buf;
  const std::string s = os.str();
  write_file_atomic(path, s.data(), s.size());
}

void write_task_csv(const std::string& path, const std::vector<TaskRecord>& records) {
  std::ostringstream os;
  os << "name,category,step,side,worker,start_us,end_us,codelet,ready_us,sim_bytes\n";
  char buf[512], bytes[32];
  for (auto& r : records) {
    bytes[0] = '\0';  // empty in a real run
    if (r.sim_bytes >= 0) std::snprintf(bytes, sizeof bytes, "%.0f", r.sim_bytes);
    std::snprintf(buf, sizeof buf, "%s,%s,%lld,%s,%d,%.3f,%.3f,%s,%.3f,%s\n", r.name, task_category(r.name).c_str(),
                  (long long)r.step, r.side == Side::Device ? "device" : "host", r.worker, r.start_us, r.end_us,
                  r.codelet ? r.codelet : "", r.ready_us, bytes);
    os << buf;
  }
  const std::string s = os.str();
  write_file_atomic(path, s.data(), s.size());
}

}  // namespace zf
