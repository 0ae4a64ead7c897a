#include "daemon/ctl/trialctl.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "common/fd.h"
#include "daemon/ctl/client.h"

namespace triald::ctl {
namespace json = boost::json;
using common::Result;

namespace {

const char kUsage[] =
    "usage: trialctl [--socket PATH] VERB [ARGS] [--json]\n"
    "\n"
    "verbs:\n"
    "  submit FILE [--wait]      submit a TOML sweep; prints the study name\n"
    "                            (--wait: block until it ends, then print the best trial)\n"
    "  studies                   every study with its progress and best value\n"
    "  status STUDY              one study's progress and best trial\n"
    "  trials STUDY              every trial of a study\n"
    "  best STUDY                the best COMPLETE trial\n"
    "  cancel STUDY              stop a study's running trials and start no more\n"
    "  enqueue STUDY [--param NAME=VALUE]...\n"
    "                            queue a trial with these parameter values (like Optuna's\n"
    "                            enqueue_trial); it runs before any newly sampled trial,\n"
    "                            enqueued ones first come first served, and counts toward\n"
    "                            n_trials; parameters not given are sampled. VALUE is\n"
    "                            written as in the sweep: 0.01, 64, adamw, true.\n"
    "                            Prints the trial number\n"
    "  logs STUDY TRIAL [--stderr]  a trial's captured stdout (or stderr)\n"
    "  ping                      check that triald answers\n"
    "\n"
    "options:\n"
    "  --socket PATH   triald's control socket (default $TRIALD_SOCKET, else\n"
    "                  .triald/triald.sock)\n"
    "  --json          machine-readable output (read verbs, enqueue)\n"
    "\n"
    "exit codes: 0 ok, 1 error reported by triald (or a waited-for study without a\n"
    "COMPLETE trial), 2 bad command line, 3 triald unreachable\n";

struct Args {
  std::string socket;
  bool json = false;
  bool wait = false;
  bool stderr_stream = false;
  std::vector<std::pair<std::string, std::string>> params;  // --param NAME=VALUE, in order
  std::vector<std::string> positional;
};

std::string FormatValue(const json::value& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_double() || v.is_int64() || v.is_uint64()) {
    double d = v.to_number<double>();
    std::ostringstream o;
    o << std::setprecision(6) << d;
    return o.str();
  }
  return json::serialize(v);
}

std::string FormatParams(const json::value& params) {
  std::string s;
  if (!params.is_object()) return s;
  for (const auto& kv : params.get_object()) {
    if (!s.empty()) s += " ";
    s += std::string(kv.key()) + "=" + FormatValue(kv.value());
  }
  return s;
}

std::string FormatDuration(const json::value& v) {
  if (v.is_null()) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << v.to_number<double>() << "s";
  return o.str();
}

// Prints rows as aligned columns.
void PrintTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v ? FormatValue(*v) : "-";
}

void PrintTrial(std::ostream& out, const json::object& t) {
  out << "trial " << Str(t, "number") << ": " << Str(t, "state") << "  value " << Str(t, "value")
      << "  (" << FormatDuration(t.at("duration_s")) << ")\n";
  out << "  params: " << FormatParams(t.at("params")) << "\n";
  if (t.contains("fail_reason") && !t.at("fail_reason").is_null()) {
    out << "  failed: " << Str(t, "fail_reason") << ": " << Str(t, "fail_detail") << "\n";
  }
}

void PrintStatus(std::ostream& out, const json::object& s) {
  out << "study " << Str(s, "name") << ": " << Str(s, "state") << ", " << Str(s, "direction")
      << "\n";
  out << "  trials: " << Str(s, "finished") << "/" << Str(s, "n_trials") << " finished ("
      << Str(s, "complete") << " complete, " << Str(s, "pruned") << " pruned, " << Str(s, "failed")
      << " failed), " << Str(s, "running") << " running, " << Str(s, "waiting") << " waiting\n";
  const json::value& best = s.at("best");
  if (best.is_object()) {
    out << "  best: trial " << Str(best.get_object(), "number") << " value "
        << Str(best.get_object(), "value") << "  " << FormatParams(best.get_object().at("params"))
        << "\n";
  } else {
    out << "  best: none yet\n";
  }
}

int Fail(std::ostream& err, const common::Status& st) {
  err << "trialctl: " << st.message() << "\n";
  return st.code() == common::Code::kUnavailable ? kExitUnavailable : kExitError;
}

int Usage(std::ostream& err, const std::string& msg) {
  err << "trialctl: " << msg << "\n" << kUsage;
  return kExitUsage;
}

int Wait(Client& client, const std::string& study, std::ostream& out, std::ostream& err) {
  std::string last;
  for (;;) {
    Result<json::value> r = client.Call("status", {{"study", study}});
    if (!r.ok()) return Fail(err, r.status());
    const json::object& s = r->get_object();
    std::string line = Str(s, "finished") + "/" + Str(s, "n_trials") + " finished, " +
                       Str(s, "running") + " running, best " +
                       (s.at("best").is_object() ? Str(s.at("best").get_object(), "value") : "-");
    if (line != last) {
      err << study << ": " << line << "\n";
      last = line;
    }
    // A cancelled study may still be stopping its trials: wait for them too.
    if (Str(s, "state") != "RUNNING" && Str(s, "running") == "0") {
      out << "study " << study << " " << Str(s, "state") << "\n";
      if (!s.at("best").is_object()) {
        err << "trialctl: study \"" << study << "\" ended without a COMPLETE trial\n";
        return kExitError;
      }
      out << "best ";
      PrintTrial(out, s.at("best").get_object());
      return kExitOk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

int RunTrialctl(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s == "-h" || s == "--help" || s == "help") {
      out << kUsage;
      return kExitOk;
    } else if (s == "--socket") {
      if (i + 1 >= argv.size()) return Usage(err, "--socket needs a path");
      a.socket = argv[++i];
    } else if (s == "--json") {
      a.json = true;
    } else if (s == "--wait") {
      a.wait = true;
    } else if (s == "--stderr") {
      a.stderr_stream = true;
    } else if (s == "--param") {
      if (i + 1 >= argv.size()) return Usage(err, "--param needs NAME=VALUE");
      const std::string& kv = argv[++i];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Usage(err, "--param \"" + kv + "\": expected NAME=VALUE");
      }
      std::string name = kv.substr(0, eq);
      for (const auto& [given, value] : a.params) {
        if (given == name) return Usage(err, "--param " + name + " given twice");
      }
      a.params.emplace_back(std::move(name), kv.substr(eq + 1));
    } else if (s.size() > 1 && s[0] == '-') {
      return Usage(err, "unknown option \"" + s + "\"");
    } else {
      a.positional.push_back(s);
    }
  }
  if (a.positional.empty()) return Usage(err, "no verb given");
  const std::string verb = a.positional[0];
  const size_t nargs = a.positional.size() - 1;
  auto need = [&](size_t n, const char* what) -> bool {
    if (nargs == n) return true;
    Usage(err, verb + " expects " + what);
    return false;
  };
  if (a.socket.empty()) a.socket = DefaultSocketPath();
  if (!a.params.empty() && verb != "enqueue") return Usage(err, "--param is for enqueue only");

  if (verb == "submit") {
    if (!need(1, "FILE")) return kExitUsage;
    const std::string& file = a.positional[1];
    Result<std::string> text = common::ReadFile(file);
    if (!text.ok()) return Fail(err, text.status());
    Result<Client> client = Client::Connect(a.socket);
    if (!client.ok()) return Fail(err, client.status());
    std::string abs = std::filesystem::absolute(file).lexically_normal().string();
    Result<json::value> r = client->Call("submit", {{"sweep", *text}, {"path", abs}});
    if (!r.ok()) return Fail(err, r.status());
    std::string study = Str(r->get_object(), "study");
    if (a.json && !a.wait) {
      out << json::serialize(*r) << "\n";
    } else {
      out << study << "\n";
    }
    if (a.wait) return Wait(*client, study, out, err);
    return kExitOk;
  }

  json::object args;
  if (verb == "studies" || verb == "ping") {
    if (!need(0, "no arguments")) return kExitUsage;
  } else if (verb == "status" || verb == "trials" || verb == "best" || verb == "cancel") {
    if (!need(1, "STUDY")) return kExitUsage;
    args["study"] = a.positional[1];
  } else if (verb == "enqueue") {
    if (!need(1, "STUDY [--param NAME=VALUE]...")) return kExitUsage;
    args["study"] = a.positional[1];
    json::object params;
    for (const auto& [name, value] : a.params) params[name] = value;
    args["params"] = std::move(params);
  } else if (verb == "logs") {
    if (!need(2, "STUDY TRIAL")) return kExitUsage;
    args["study"] = a.positional[1];
    char* end = nullptr;
    long n = std::strtol(a.positional[2].c_str(), &end, 10);
    if (*end != '\0' || n < 0) return Usage(err, "TRIAL must be a trial number");
    args["trial"] = n;
    args["stream"] = a.stderr_stream ? "stderr" : "stdout";
  } else {
    return Usage(err, "unknown verb \"" + verb + "\"");
  }

  Result<Client> client = Client::Connect(a.socket);
  if (!client.ok()) return Fail(err, client.status());
  Result<json::value> r = client->Call(verb, std::move(args));
  if (!r.ok()) return Fail(err, r.status());
  if (a.json) {
    out << json::serialize(*r) << "\n";
    return kExitOk;
  }
  if (verb == "ping") {
    out << "triald pid " << Str(r->get_object(), "pid") << ": " << Str(r->get_object(), "running")
        << " running, " << Str(r->get_object(), "queued") << " queued\n";
  } else if (verb == "studies") {
    std::vector<std::vector<std::string>> rows = {
        {"STUDY", "STATE", "DIRECTION", "FINISHED", "RUNNING", "FAILED", "BEST"}};
    for (const json::value& v : r->get_array()) {
      const json::object& s = v.get_object();
      rows.push_back({Str(s, "name"), Str(s, "state"), Str(s, "direction"),
                      Str(s, "finished") + "/" + Str(s, "n_trials"), Str(s, "running"),
                      Str(s, "failed"),
                      s.at("best").is_object() ? Str(s.at("best").get_object(), "value") : "-"});
    }
    PrintTable(out, rows);
  } else if (verb == "status") {
    PrintStatus(out, r->get_object());
  } else if (verb == "trials") {
    std::vector<std::vector<std::string>> rows = {
        {"#", "STATE", "VALUE", "DURATION", "PARAMS", "REASON"}};
    for (const json::value& v : r->get_array()) {
      const json::object& t = v.get_object();
      std::string reason =
          t.at("fail_reason").is_null() ? "" : Str(t, "fail_reason") + ": " + Str(t, "fail_detail");
      rows.push_back({Str(t, "number"), Str(t, "state"), Str(t, "value"),
                      FormatDuration(t.at("duration_s")), FormatParams(t.at("params")), reason});
    }
    PrintTable(out, rows);
  } else if (verb == "best") {
    PrintTrial(out, r->get_object());
  } else if (verb == "cancel") {
    out << "study " << a.positional[1] << " cancelled\n";
  } else if (verb == "enqueue") {
    out << r->at("trial").to_number<int64_t>() << "\n";
  } else if (verb == "logs") {
    const json::object& o = r->get_object();
    if (!o.at("exists").get_bool()) {
      err << "trialctl: no " << (a.stderr_stream ? "stderr" : "stdout") << " log for trial "
          << a.positional[2] << " (state " << Str(o, "state") << ")\n";
      return kExitError;
    }
    const json::string& content = o.at("content").get_string();
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  return kExitOk;
}

}  // namespace triald::ctl
