#include "daemon/ctl/best_view.h"

#include <ostream>

#include "daemon/ctl/format.h"
#include "daemon/ctl/resources_view.h"

namespace triald::ctl {
namespace json = boost::json;

namespace {

// "a, b, c" of a JSON array of numbers.
std::string List(const json::value& v) {
  std::string s;
  if (!v.is_array()) return s;
  for (const json::value& x : v.get_array()) s += (s.empty() ? "" : ", ") + FormatValue(x);
  return s;
}

bool HasItems(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() && !v->get_array().empty();
}

int64_t Int(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<int64_t>() : 0;
}

std::string Trials(int64_t n) { return std::to_string(n) + (n == 1 ? " trial" : " trials"); }

}  // namespace

std::string TrialValuesText(const json::object& t) {
  std::string s;
  const json::value* values = t.if_contains("values");
  if (values != nullptr && values->is_array() && values->get_array().size() > 1) {
    s = "values " + List(*values);
  } else {
    s = "value " + Str(t, "value");
  }
  if (HasItems(t, "constraints")) {
    const json::value* feasible = t.if_contains("feasible");
    const bool ok = feasible != nullptr && feasible->is_bool() && feasible->get_bool();
    s += "  constraints " + List(t.at("constraints")) + (ok ? " (feasible)" : " (infeasible)");
  }
  return s;
}

bool PrintBest(std::ostream& out, const json::value& reply) {
  if (!reply.is_object()) return false;
  const json::object& r = reply.get_object();
  const json::value* front = r.if_contains("best_trials");
  if (front == nullptr || !front->is_array()) {  // one objective: one trial
    out << "trial " << Str(r, "number") << ": " << Str(r, "state") << "  " << TrialValuesText(r)
        << "  (" << FormatDuration(r.contains("duration_s") ? r.at("duration_s") : nullptr)
        << ")\n";
    out << "  params: " << (r.contains("params") ? FormatParams(r.at("params")) : "") << "\n";
    if (std::string res = ResourcesLine(r); !res.empty()) out << "  " << res << "\n";
    return true;
  }
  const std::string dirs = DirectionsText(r);
  const int64_t complete = Int(r, "complete"), feasible = Int(r, "feasible");
  if (front->get_array().empty()) {
    out << "study " << Str(r, "study") << ": the Pareto front is empty: ";
    if (complete == 0) {
      out << "no COMPLETE trial yet\n";
    } else if (feasible == 0) {
      out << "none of its " << complete << (complete == 1 ? " COMPLETE trial" : " COMPLETE trials")
          << " is feasible (each violates a constraint: a value above 0)\n";
    } else {
      out << "no COMPLETE trial has a value for every objective\n";
    }
    return false;
  }
  out << "study " << Str(r, "study") << ": Pareto front of "
      << Trials(static_cast<int64_t>(front->get_array().size())) << " (" << dirs << "; " << complete
      << " complete, " << feasible << " feasible)\n";
  for (const json::value& v : front->get_array()) {
    if (!v.is_object()) continue;
    const json::object& t = v.get_object();
    out << "trial " << Str(t, "number") << ": " << TrialValuesText(t) << "  ("
        << FormatDuration(t.contains("duration_s") ? t.at("duration_s") : nullptr) << ")\n";
    out << "  params: " << (t.contains("params") ? FormatParams(t.at("params")) : "") << "\n";
    if (std::string res = ResourcesLine(t); !res.empty()) out << "  " << res << "\n";
  }
  return true;
}

std::vector<std::string> FrontLines(const json::object& r, size_t max_lines) {
  std::vector<std::string> lines;
  const json::value* front = r.if_contains("best_trials");
  const size_t n = front != nullptr && front->is_array() ? front->get_array().size() : 0;
  const int64_t complete = Int(r, "complete"), feasible = Int(r, "feasible");
  std::string head = "front:  " + Trials(static_cast<int64_t>(n)) + " of " +
                     std::to_string(complete) + " complete (" + std::to_string(feasible) +
                     " feasible)";
  if (n == 0 && complete > 0 && feasible == 0) head += "; no COMPLETE trial is feasible yet";
  lines.push_back(head);
  for (size_t i = 0; i < n && i < max_lines; ++i) {
    const json::value& v = front->get_array()[i];
    if (!v.is_object()) continue;
    const json::object& t = v.get_object();
    const std::string params = t.contains("params") ? FormatParams(t.at("params")) : "";
    lines.push_back("  trial " + Str(t, "number") + ": " + TrialValuesText(t) +
                    (params.empty() ? "" : "  " + params));
  }
  if (n > max_lines) lines.push_back("  ... " + std::to_string(n - max_lines) + " more");
  return lines;
}

}  // namespace triald::ctl
