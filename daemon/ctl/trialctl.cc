#include "daemon/ctl/trialctl.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/fd.h"
#include "daemon/ctl/client.h"
#include "daemon/ctl/format.h"
#include "daemon/ctl/report.h"
#include "daemon/ctl/watch.h"
#include "daemon/export/study_export.h"

namespace triald::ctl {
namespace json = boost::json;
using common::Result;

namespace {

const char kUsage[] =
    "usage: trialctl [--socket PATH] VERB [ARGS] [--json]\n"
    "\n"
    "verbs:\n"
    "  submit FILE [--wait]      submit a TOML sweep; prints the study name\n"
    "                            (--wait: watch it until it ends, progress on stderr,\n"
    "                            then print the best trial)\n"
    "  watch STUDY [--interval SECONDS] [--json]\n"
    "                            live progress until the study ends: counts, best so far,\n"
    "                            ETA (mean finished-trial time x trials left / trials at\n"
    "                            once); redrawn in place on a terminal, else one line per\n"
    "                            change; then prints the best trial (--json: each\n"
    "                            changed status as one JSON line, nothing else)\n"
    "  report STUDY -o FILE.html one self-contained HTML report with plots and a table\n"
    "  export STUDY --format csv|json\n"
    "                            every trial to stdout (csv: one row per trial)\n"
    "  export STUDY --format optuna --out FILE.db [--force]\n"
    "                            an Optuna 3.1 SQLite storage (optuna.load_study,\n"
    "                            optuna-dashboard)\n"
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
    "  nodes                     the daemons sharing triald's PostgreSQL storage: alive or\n"
    "                            dead, seconds since their last heartbeat, running trials\n"
    "                            (on SQLite: this daemon alone)\n"
    "  ping                      check that triald answers\n"
    "\n"
    "options:\n"
    "  --socket PATH   triald's control socket (default $TRIALD_SOCKET, else\n"
    "                  .triald/triald.sock)\n"
    "  --json          machine-readable output (read verbs, enqueue, watch)\n"
    "  -h, --help      this text (VERB --help, help VERB: that verb's entry)\n"
    "\n"
    "exit codes: 0 ok, 1 error reported by triald (or a waited-for or watched study\n"
    "that ended without a COMPLETE trial, or an output file that cannot be written),\n"
    "2 bad command line, 3 triald unreachable\n";

struct Args {
  std::string socket;
  bool json = false;
  bool wait = false;
  bool stderr_stream = false;
  bool force = false;
  std::string output;  // report -o, export --out
  std::string format;  // export --format
  double interval_s = 0.5;
  std::vector<std::pair<std::string, std::string>> params;  // --param NAME=VALUE, in order
  std::vector<std::string> positional;
};

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

void PrintStatus(std::ostream& out, const json::object& s) {
  out << "study " << Str(s, "name") << ": " << Str(s, "state") << ", " << Str(s, "direction")
      << "\n";
  out << "  trials: " << Str(s, "finished") << "/" << Str(s, "n_trials") << " finished ("
      << Str(s, "complete") << " complete, " << Str(s, "pruned") << " pruned, " << Str(s, "failed")
      << " failed), " << Str(s, "running") << " running, " << Str(s, "waiting") << " waiting";
  if (s.contains("retried") && s.at("retried").is_int64() && s.at("retried").get_int64() > 0) {
    out << ", " << Str(s, "retried") << " retried";
  }
  out << "\n";
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

// The watch view for `stream` (stdout or stderr of trialctl).
WatchOptions ViewOn(std::ostream& stream, int tty_fd, double interval_s) {
  WatchOptions w;
  w.view = &stream;
  w.tty_fd = tty_fd;
  w.interval = std::chrono::milliseconds(std::lround(interval_s * 1000));
  return w;
}

// `trialctl VERB --help`: the verb's lines of kUsage (its entry and the indented lines under
// it), then the options and exit codes; empty for an unknown verb.
std::string VerbUsage(const std::string& verb) {
  std::istringstream in(kUsage);
  std::string text;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  " + verb + " ", 0) == 0 || line == "  " + verb) {
      inside = true;
    } else if (!inside || line.rfind("    ", 0) != 0) {
      inside = false;
      continue;
    }
    text += line + "\n";
  }
  if (text.empty()) return "";
  const std::string usage = kUsage;
  return "usage: trialctl [--socket PATH] " + verb + " ...\n\n" + text +
         usage.substr(usage.find("\noptions:"));
}

}  // namespace

int RunTrialctl(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  return RunTrialctl(argv, out, err, Terminals{});
}

int RunTrialctl(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
                const Terminals& terminals) {
  // Help first, whatever else the line holds: `trialctl --help`, `trialctl VERB --help`,
  // `trialctl help VERB`.
  for (const std::string& s : argv) {
    if (s != "-h" && s != "--help" && s != "help") continue;
    for (const std::string& v : argv) {
      if (v.empty() || v[0] == '-' || v == "help") continue;
      if (std::string text = VerbUsage(v); !text.empty()) {
        out << text;
        return kExitOk;
      }
    }
    out << kUsage;
    return kExitOk;
  }
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s == "--socket") {
      if (i + 1 >= argv.size()) return Usage(err, "--socket needs a path");
      a.socket = argv[++i];
    } else if (s == "--json") {
      a.json = true;
    } else if (s == "--wait") {
      a.wait = true;
    } else if (s == "--stderr") {
      a.stderr_stream = true;
    } else if (s == "--force") {
      a.force = true;
    } else if (s == "-o" || s == "--out" || s == "--format" || s == "--interval") {
      if (i + 1 >= argv.size()) return Usage(err, s + " needs a value");
      const std::string& v = argv[++i];
      if (s == "--format") {
        a.format = v;
      } else if (s == "--interval") {
        char* end = nullptr;
        a.interval_s = std::strtod(v.c_str(), &end);
        if (*end != '\0' || !(a.interval_s >= 0.05 && a.interval_s <= 3600)) {
          return Usage(err, "--interval \"" + v + "\": expected seconds between 0.05 and 3600");
        }
      } else {
        a.output = v;
      }
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
  if (!a.output.empty() && verb != "report" && verb != "export") {
    return Usage(err, "-o/--out is for report and export only");
  }
  if (!a.format.empty() && verb != "export") return Usage(err, "--format is for export only");

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
    if (a.wait) {
      return WatchStudy(*client, study, ViewOn(err, terminals.err_fd, a.interval_s), out, err);
    }
    return kExitOk;
  }
  if (verb == "watch") {
    if (!need(1, "STUDY")) return kExitUsage;
    Result<Client> client = Client::Connect(a.socket);
    if (!client.ok()) return Fail(err, client.status());
    WatchOptions view = ViewOn(out, a.json ? -1 : terminals.out_fd, a.interval_s);
    view.json = a.json;
    return WatchStudy(*client, a.positional[1], view, out, err);
  }
  if (verb == "report" || verb == "export") {
    if (!need(1, "STUDY")) return kExitUsage;
    const bool optuna = a.format == "optuna";
    if (verb == "report" && a.output.empty()) return Usage(err, "report needs -o FILE.html");
    if (verb == "export" && a.format != "csv" && a.format != "json" && !optuna) {
      return Usage(err, "export needs --format csv, json or optuna");
    }
    if (verb == "export" && optuna == a.output.empty()) {
      return Usage(err, optuna ? "export --format optuna needs --out FILE.db"
                               : "export --format " + a.format + " writes to stdout; no --out");
    }
    Result<Client> client = Client::Connect(a.socket);
    if (!client.ok()) return Fail(err, client.status());
    Result<json::value> r = client->Call("export", {{"study", a.positional[1]}});
    if (!r.ok()) return Fail(err, r.status());
    Result<exports::StudyData> data = exports::ParseStudyExport(std::move(*r));
    if (!data.ok()) return Fail(err, data.status());
    if (verb == "report") {
      common::Status st = WriteReport(*data, a.output);
      if (!st.ok()) return Fail(err, st);
      out << a.output << "\n";
    } else if (optuna) {
      common::Status st = exports::WriteOptunaStorage(*data, a.output, a.force);
      if (!st.ok()) return Fail(err, st);
      out << a.output << "\n";
    } else {
      out << (a.format == "csv" ? exports::ToCsv(*data) : exports::ToJson(*data));
    }
    return kExitOk;
  }

  json::object args;
  if (verb == "studies" || verb == "ping" || verb == "nodes") {
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
  } else if (verb == "nodes") {
    std::vector<std::vector<std::string>> rows = {{"NODE", "STATE", "LAST HEARTBEAT", "RUNNING"}};
    for (const json::value& v : r->get_array()) {
      const json::object& n = v.get_object();
      std::ostringstream ago;
      ago << std::fixed << std::setprecision(1) << n.at("silent_for").to_number<double>()
          << " s ago";
      rows.push_back({Str(n, "name") + (n.at("self").as_bool() ? " (this)" : ""),
                      n.at("alive").as_bool() ? "alive" : "dead", ago.str(), Str(n, "running")});
    }
    PrintTable(out, rows);
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
    // A NODE column when the trials ran on several daemons (a shared PostgreSQL storage).
    std::set<std::string> nodes;
    for (const json::value& v : r->get_array()) {
      const json::object& t = v.get_object();
      if (t.contains("node") && t.at("node").is_string()) nodes.insert(Str(t, "node"));
    }
    const bool show_node = nodes.size() > 1;
    std::vector<std::vector<std::string>> rows = {
        {"#", "STATE", "VALUE", "DURATION", "PARAMS", "RETRY OF", "REASON"}};
    if (show_node) rows[0].insert(rows[0].begin() + 4, "NODE");
    for (const json::value& v : r->get_array()) {
      const json::object& t = v.get_object();
      std::string reason =
          t.at("fail_reason").is_null() ? "" : Str(t, "fail_reason") + ": " + Str(t, "fail_detail");
      rows.push_back(
          {Str(t, "number"), Str(t, "state"), Str(t, "value"), FormatDuration(t.at("duration_s")),
           FormatParams(t.at("params")),
           t.contains("retry_of") && !t.at("retry_of").is_null() ? Str(t, "retry_of") : "",
           reason});
      if (show_node) {
        rows.back().insert(rows.back().begin() + 4,
                           t.contains("node") && t.at("node").is_string() ? Str(t, "node") : "-");
      }
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
