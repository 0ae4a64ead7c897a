#include "daemon/ctl/trialctl.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/fd.h"
#include "common/json.h"
#include "common/utf8.h"
#include "config/sweep.h"
#include "daemon/ctl/best_view.h"
#include "daemon/ctl/client.h"
#include "daemon/ctl/command_line.h"
#include "daemon/ctl/format.h"
#include "daemon/ctl/report.h"
#include "daemon/ctl/resources_view.h"
#include "daemon/ctl/submit_check.h"
#include "daemon/ctl/submit_code.h"
#include "daemon/ctl/watch.h"
#include "daemon/export/study_export.h"
#include "proto/control.h"

namespace triald::ctl {
namespace json = boost::json;
using common::Result;

namespace {

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

// A Slurm trial's job as `trials` shows it, from its "triald.slurm" attribute (daemon/slurm/):
// "17 on node-3", "17 queued (Resources)", "17 NODE_FAIL on node-3"; "" for a local trial.
std::string SlurmJobText(const json::object& t) {
  const json::value* attrs = t.if_contains("attrs");
  if (attrs == nullptr || !attrs->is_object()) return "";
  const json::value* s = attrs->get_object().if_contains("triald.slurm");
  if (s == nullptr || !s->is_object()) return "";
  const json::object& o = s->get_object();
  auto field = [&](const char* k) {
    const json::value* v = o.if_contains(k);
    return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
  };
  const std::string id = field("job_id").empty() ? "?" : field("job_id");
  const std::string state = field("state"), node = field("node"), reason = field("reason");
  if (state == "PENDING") return id + " queued" + (reason.empty() ? "" : " (" + reason + ")");
  std::string text = id;
  if (state != "RUNNING" && state != "COMPLETED" && !state.empty()) text += " " + state;
  if (!node.empty()) text += " on " + node;
  return text;
}

// "alice (uid 1001)", "uid 1001" without a name, "unknown" for a study stored before
// submitters were recorded (or a daemon that does not report them).
// The DURATION column: a trial's run time, from its start to its end, or so far with a "+"
// while it runs ("12.30s+", against `now`, unix seconds); "-" before it started.
std::string RunTimeText(const json::object& t, double now) {
  const json::value* started = t.if_contains("started_at");
  const json::value* state = t.if_contains("state");
  if (state != nullptr && state->is_string() && state->as_string() == "RUNNING" &&
      started != nullptr && started->is_number()) {
    return FormatDuration(json::value(std::max(0.0, now - started->to_number<double>()))) + "+";
  }
  const json::value* d = t.if_contains("duration_s");
  return d != nullptr ? FormatDuration(*d) : "-";
}

std::string SubmitterText(const json::object& s) {
  const json::value* sub = s.if_contains("submitter");
  if (sub == nullptr || !sub->is_object()) return "unknown";
  const json::object& o = sub->get_object();
  std::string uid = "uid " + Str(o, "uid");
  const json::value* name = o.if_contains("name");
  return name != nullptr && name->is_string() ? std::string(name->get_string()) + " (" + uid + ")"
                                              : uid;
}

// The study's directions, "minimize, maximize"; its direction when the reply has none.
bool SeveralObjectives(const json::object& s) {
  const json::value* d = s.if_contains("directions");
  return d != nullptr && d->is_array() && d->get_array().size() > 1;
}

// A trial's values as a cell: "0.31, 812"; "-" when it has none.
std::string ValuesText(const json::object& t) {
  const json::value* v = t.if_contains("values");
  if (v == nullptr || !v->is_array() || v->get_array().empty()) return "-";
  std::string text;
  for (const json::value& x : v->get_array()) text += (text.empty() ? "" : ", ") + FormatValue(x);
  return text;
}

// The study's state as shown: PAUSED for a RUNNING study that is paused (trialctl pause).
std::string StateText(const json::object& s) {
  const json::value* paused = s.if_contains("paused");
  const bool is_paused = paused != nullptr && paused->is_bool() && paused->get_bool();
  return is_paused && Str(s, "state") == "RUNNING" ? "PAUSED" : Str(s, "state");
}

void PrintStatus(std::ostream& out, const json::object& s) {
  out << "study " << Str(s, "name") << ": " << StateText(s) << ", " << DirectionsText(s) << "\n";
  out << "  trials: " << Str(s, "finished") << "/" << Str(s, "n_trials") << " finished ("
      << Str(s, "complete") << " complete, " << Str(s, "pruned") << " pruned, " << Str(s, "failed")
      << " failed), " << Str(s, "running") << " running, " << Str(s, "waiting") << " waiting";
  if (s.contains("retried") && s.at("retried").is_int64() && s.at("retried").get_int64() > 0) {
    out << ", " << Str(s, "retried") << " retried";
  }
  out << "\n";
  out << "  submitted by " << SubmitterText(s) << "\n";
  if (const json::value* sm = s.if_contains("sampler"); sm != nullptr && sm->is_object()) {
    const json::object& o = sm->get_object();
    if (const json::value* why = o.if_contains("why"); why != nullptr && why->is_string()) {
      out << "  sampler: auto chose " << why->get_string().c_str() << "\n";
    } else {
      out << "  sampler: " << Str(o, "kind") << "\n";
    }
  }
  if (const json::value* py = s.if_contains("python"); py != nullptr && py->is_object()) {
    const json::object& p = py->get_object();
    out << "  python: " << Str(p, "path");
    if (const json::value* v = p.if_contains("version"); v != nullptr && v->is_string()) {
      out << " (Python " << v->get_string().c_str() << ")";
    }
    out << "\n";
  }
  // The objective's files kept at submit, and whether each is still what the study started
  // with (read now, as the user running trialctl): submit_code.h.
  if (const json::value* code = s.if_contains("code"); code != nullptr && code->is_array()) {
    for (const json::value& f : code->get_array()) {
      if (!f.is_object()) continue;
      const std::string sha = Str(f.get_object(), "sha256");
      out << "  code: " << Str(f.get_object(), "path") << " (sha256 " << sha.substr(0, 12)
          << "): " << CodeFileNow(Str(f.get_object(), "path"), sha) << "\n";
    }
  }
  if (const json::value* p = s.if_contains("parallelism"); p != nullptr && p->is_number()) {
    out << "  parallelism: " << Str(s, "parallelism") << " (set after submit)\n";
  }
  // Why a FAILED study could not go on (its sampler or storage failed, fail-fast).
  if (const json::value* f = s.if_contains("failure"); f != nullptr && f->is_string()) {
    out << "  FAILED: " << Str(s, "failure") << "\n";
  }
  if (std::string failed = FailuresText(s); !failed.empty())
    out << "  failures: " << failed << "\n";
  // Storage refusing writes (daemon/scheduler/storage_outage.h): nothing starts.
  if (std::string held = StorageHoldText(s); !held.empty()) out << "  " << held << "\n";
  // Storage could not answer: this is what the daemon knows in memory.
  if (const json::value* m = s.if_contains("from_memory"); m != nullptr && m->is_string()) {
    out << "  (from the daemon's memory: storage cannot answer: " << m->get_string().c_str()
        << ")\n";
  }
  // Trials that could not be started lately (daemon/scheduler/spawn_backoff.h).
  if (s.contains("spawn") && s.at("spawn").is_object()) {
    const json::object& sp = s.at("spawn").get_object();
    std::ostringstream retry;
    retry << std::fixed << std::setprecision(1) << sp.at("retry_in_s").to_number<double>();
    out << (sp.at("held").as_bool() ? "  HELD: trials cannot start: "
                                    : "  waiting to start trials: ")
        << Str(sp, "reason") << " (" << Str(sp, "cause") << ", " << Str(sp, "failures")
        << " failures in a row; next attempt in " << retry.str() << " s)\n";
  }
  // The study's fork server ([objective] fork_server; daemon/README.md, "Fork server").
  if (const json::value* fsv = s.if_contains("fork_server"); fsv != nullptr && fsv->is_object()) {
    const json::object& fs = fsv->get_object();
    const std::string state = Str(fs, "state");
    out << "  fork server: " << state;
    if (state == "on" || state == "starting") {
      std::string mods;
      if (const json::value* p = fs.if_contains("preloaded"); p != nullptr && p->is_array()) {
        for (const json::value& m : p->get_array()) {
          if (m.is_string()) mods += (mods.empty() ? "" : ", ") + std::string(m.get_string());
        }
      }
      out << " (pid " << Str(fs, "pid");
      if (state == "on") {
        out << ", preloaded: " << (mods.empty() ? "nothing" : mods);
        const std::string forks = Str(fs, "forks");
        if (forks == "1") out << ", one fork per trial";
        if (forks == "2") out << ", two forks per trial";
      }
      out << ")";
    } else if (state == "off" || state == "down") {
      out << ": " << Str(fs, "reason");
    }
    out << ", " << Str(fs, "forked") << " trials forked\n";
  }
  // A Slurm study's jobs now (daemon/README.md, "Running on Slurm").
  if (const json::value* sl = s.if_contains("slurm"); sl != nullptr && sl->is_object()) {
    const json::object& o = sl->get_object();
    out << "  slurm: " << Str(o, "running") << " job(s) running, " << Str(o, "queued") << " queued";
    if (const json::value* r = o.if_contains("reasons"); r != nullptr && r->is_object()) {
      std::string why;
      for (const auto& [reason, n] : r->get_object()) {
        why += (why.empty() ? "" : ", ") + std::string(reason) + " " + json::serialize(n);
      }
      if (!why.empty()) out << " (" << why << ")";
    }
    out << "\n";
  }
  const json::value& best = s.at("best");
  const json::value* front = s.if_contains("pareto_front_size");
  if (SeveralObjectives(s)) {
    // Several objectives: the Pareto front of feasible COMPLETE trials (`trialctl best`).
    const bool known = front != nullptr && front->is_number();
    const int64_t n = known ? front->to_number<int64_t>() : 0;
    if (!known) {
      out << "  pareto front: -\n";
    } else if (n == 0) {
      out << "  pareto front: none yet\n";
    } else {
      out << "  pareto front: " << n << (n == 1 ? " trial" : " trials") << "\n";
    }
  } else if (best.is_object()) {
    out << "  best: trial " << Str(best.get_object(), "number") << " value "
        << Str(best.get_object(), "value") << "  " << FormatParams(best.get_object().at("params"))
        << "\n";
  } else {
    out << "  best: none yet\n";
  }
}

// The resources line of `status`: the study's trials read a page (kResourcePage trials) at a
// time, keeping only the numbers ResourceSummary needs; a study of more than kResourceScan
// trials is summarized over its latest kResourceScan, and the line says so, so that `status`
// stays quick on a study of millions. Empty when the daemon reports no resources.
constexpr int64_t kResourcePage = 1000;
constexpr int64_t kResourceScan = 20'000;

Result<std::string> StudyResourcesLine(Client& client, const std::string& study,
                                       const json::object& status) {
  int64_t total = 0;
  for (const char* key : {"waiting", "running", "complete", "pruned", "failed"}) {
    const json::value* v = status.if_contains(key);
    if (v != nullptr && v->is_int64()) total += v->get_int64();
  }
  const int64_t first = std::max<int64_t>(0, total - kResourceScan);
  ResourceSummary summary;
  for (int64_t offset = first;; offset += kResourcePage) {
    TRIALD_ASSIGN_OR_RETURN(
        json::value page,
        client.Call("trials", {{"study", study}, {"offset", offset}, {"limit", kResourcePage}}));
    if (!page.is_array()) return common::IoError("trials reply from triald: expected a list");
    for (const json::value& t : page.get_array()) {
      if (t.is_object()) summary.Add(t.get_object());
    }
    if (static_cast<int64_t>(page.get_array().size()) < kResourcePage) break;
  }
  if (!summary.reported()) return std::string();
  return summary.Line() + (first > 0 ? " (over the latest " + std::to_string(kResourceScan) +
                                           " of " + std::to_string(total) + " trials)"
                                     : std::string());
}

int Fail(std::ostream& err, const common::Status& st) {
  err << "trialctl: " << EscapeForTerminal(st.message(), true) << "\n";
  return st.code() == common::Code::kUnavailable ? kExitUnavailable : kExitError;
}

// The watch view for `stream` (stdout or stderr of trialctl).
WatchOptions ViewOn(std::ostream& stream, int tty_fd, double interval_s) {
  WatchOptions w;
  w.view = &stream;
  w.tty_fd = tty_fd;
  w.interval = std::chrono::milliseconds(std::lround(interval_s * 1000));
  return w;
}

}  // namespace

int RunTrialctl(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  return RunTrialctl(argv, out, err, Terminals{});
}

int RunTrialctl(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
                const Terminals& terminals) {
  ParsedCommandLine parsed = ParseCommandLine(argv);
  if (parsed.kind == ParsedCommandLine::Kind::kHelp) {
    out << parsed.text;
    return kExitOk;
  }
  if (parsed.kind == ParsedCommandLine::Kind::kUsageError) {
    err << parsed.text;
    return kExitUsage;
  }
  CommandLine& a = parsed.command;
  const std::string& verb = a.verb;
  {  // --socket, $TRIALD_SOCKET, else the first place where a triald answers
    Result<std::string> socket = ResolveSocket(a.socket);
    if (!socket.ok()) return Fail(err, socket.status());
    a.socket = *socket;
  }

  if (verb == "submit") {
    const std::string& file = a.file;
    // Refused here, before anything is read or sent: triald would refuse it anyway.
    std::error_code size_ec;
    const uintmax_t size = std::filesystem::file_size(file, size_ec);
    auto too_large = [&](uintmax_t bytes) {
      err << "trialctl: sweep file " << file << " is " << bytes << " bytes; the limit is "
          << proto::kMaxSweepBytes << " bytes (2 MiB)\n";
      return kExitError;
    };
    if (!size_ec && size > proto::kMaxSweepBytes) return too_large(size);
    Result<std::string> text = common::ReadFile(file);
    if (!text.ok()) return Fail(err, text.status());
    if (text->size() > proto::kMaxSweepBytes) return too_large(text->size());
    if (std::string bad = common::DescribeInvalidUtf8(*text); !bad.empty()) {
      err << "trialctl: sweep file " << file << " is not UTF-8 text: " << bad
          << "; save it as UTF-8\n";
      return kExitError;
    }
    Result<Client> client = Client::Connect(a.socket);
    if (!client.ok()) return Fail(err, client.status());
    std::string abs = std::filesystem::absolute(file).lexically_normal().string();
    json::object submit = {{"sweep", *text}, {"path", abs}};
    if (!a.name.empty()) submit["name"] = a.name;
    if (a.resume) submit["resume"] = true;
    // kind = "python": the trials run the submitter's interpreter, checked here first
    // (daemon/ctl/submit_check.h). A sweep that does not parse goes as it is: triald says why.
    config::SweepSource source{*text, abs, {}};
    source.submit.name = a.name;
    if (Result<config::SweepSpec> spec = config::ParseSweep(source); spec.ok()) {
      std::vector<std::string> checked_files;
      if (spec->objective.kind == "python") {
        SubmitCheckOptions check;
        check.import_objective = !a.no_check;
        check.timeout_s = a.check_timeout_s;
        Result<CheckedInterpreter> python =
            CheckPythonSweep(*spec, abs, SubmitterEnvironment::Current(), check);
        if (!python.ok()) return Fail(err, python.status());
        submit["python"] = python->executable;
        submit["python_version"] = python->version;
        checked_files = python->files;
      }
      // The objective's files as they are now, kept with the study (daemon/ctl/submit_code.h).
      std::vector<config::CodeFile> code = ReadCodeFiles(ObjectiveCodePaths(*spec, checked_files));
      if (!code.empty()) submit["code"] = CodeFilesJson(code);
    }
    Result<json::value> r = client->Call("submit", submit);
    if (!r.ok()) return Fail(err, r.status());
    std::string study = Str(r->get_object(), "study");
    if (const json::value* resumed = r->get_object().if_contains("resumed");
        resumed != nullptr && resumed->is_bool() && resumed->as_bool() && !a.json) {
      err << "trialctl: continuing study " << study << " (" << Str(r->get_object(), "n_trials")
          << " trials in all)\n";
    }
    if (a.json && !a.wait) {
      out << common::SerializeJson(*r) << "\n";
    } else {
      out << study << "\n";
    }
    if (a.wait) {
      return WatchStudy(*client, study, ViewOn(err, terminals.err_fd, a.interval_s), out, err);
    }
    return kExitOk;
  }
  if (verb == "watch") {
    Result<Client> client = Client::Connect(a.socket);
    if (!client.ok()) return Fail(err, client.status());
    WatchOptions view = ViewOn(out, a.json ? -1 : terminals.out_fd, a.interval_s);
    view.json = a.json;
    return WatchStudy(*client, a.study, view, out, err);
  }
  if (verb == "report" || verb == "export") {
    const bool optuna = a.format == "optuna";
    Result<Client> client = Client::Connect(a.socket);
    if (!client.ok()) return Fail(err, client.status());
    Result<json::value> r = client->Call("export", {{"study", a.study}});
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
  if (verb == "delete") {
    args["study"] = a.study;
    args["purge"] = a.purge;
    if (!a.yes) {
      // The study's name again, typed on the terminal: a script says --yes.
      if (terminals.in == nullptr) {
        err << "trialctl: delete " << a.study
            << ": stdin is not a terminal to confirm on; add --yes to delete without asking\n";
        return kExitUsage;
      }
      err << "Delete study " << a.study << " and all its trials"
          << (a.purge ? ", trial folders and logs" : "")
          << "? This cannot be undone.\nType the study's name to confirm: " << std::flush;
      std::string typed;
      std::getline(*terminals.in, typed);
      if (typed != a.study) {
        err << "trialctl: \"" << typed << "\" is not \"" << a.study << "\"; nothing deleted\n";
        return kExitError;
      }
    }
  } else if (verb == "pause" || verb == "resume") {
    args["study"] = a.study;
  } else if (verb == "extend") {
    args["study"] = a.study;
    args["n_trials"] = a.n_trials;
  } else if (verb == "set") {
    args["study"] = a.study;
    if (a.setting.rfind("metric_names=", 0) == 0) {
      json::array names;
      const std::string list = a.setting.substr(13);
      for (size_t at = 0; !list.empty() && at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        names.emplace_back(list.substr(at, comma - at));
        at = comma + 1;
      }
      args["metric_names"] = std::move(names);
    } else {
      args["parallelism"] = a.parallelism;
    }
  } else if (verb == "events") {
    if (!a.study.empty()) args["study"] = a.study;
  } else if (verb == "status" || verb == "trials" || verb == "best" || verb == "cancel") {
    args["study"] = a.study;
    if (verb == "trials" && a.offset > 0) args["offset"] = a.offset;
    if (verb == "trials" && a.limit > 0) args["limit"] = a.limit;
  } else if (verb == "enqueue") {
    args["study"] = a.study;
    json::object params;
    for (const auto& [name, value] : a.params) params[name] = value;
    args["params"] = std::move(params);
    if (a.skip_if_exists) args["skip_if_exists"] = true;
  } else if (verb == "logs") {
    args["study"] = a.study;
    args["trial"] = std::strtol(a.trial.c_str(), nullptr, 10);  // digits (ParseCommandLine)
    args["stream"] = a.stderr_stream ? "stderr" : "stdout";
    args["whole"] = a.whole_log;
  }

  Result<Client> client = Client::Connect(a.socket);
  if (!client.ok()) return Fail(err, client.status());
  // status --code: the files kept at submit, with their source (the verb `code`).
  const std::string call = verb == "status" && a.show_code ? "code" : verb;
  Result<json::value> r = client->Call(call, std::move(args));
  if (!r.ok()) return Fail(err, r.status());
  if (a.json) {
    out << common::SerializeJson(*r) << "\n";
    return kExitOk;
  }
  if (verb == "ping") {
    // Which daemon answered: where, and what it runs on (a daemon older than "version" has
    // none to show).
    const json::object& o = r->get_object();
    out << "triald pid " << Str(o, "pid") << " at " << EscapeForTerminal(a.socket) << ": "
        << Str(o, "running") << " running, " << Str(o, "queued") << " queued\n"
        << "  state " << Str(o, "state_dir") << ", node " << Str(o, "node")
        << (o.contains("shared") && o.at("shared").is_bool() && o.at("shared").get_bool()
                ? " (shared storage)"
                : "")
        << (o.contains("version") ? ", version " + Str(o, "version") : std::string()) << "\n";
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
        {"STUDY", "STATE", "DIRECTION", "FINISHED", "RUNNING", "FAILED", "BEST", "SUBMITTER"}};
    for (const json::value& v : r->get_array()) {
      const json::object& s = v.get_object();
      rows.push_back({Str(s, "name"), StateText(s), Str(s, "direction"),
                      Str(s, "finished") + "/" + Str(s, "n_trials"), Str(s, "running"),
                      Str(s, "failed"),
                      s.at("best").is_object() ? Str(s.at("best").get_object(), "value") : "-",
                      SubmitterText(s)});
    }
    PrintTable(out, rows);
  } else if (call == "code") {
    const json::array& files = r->get_object().at("files").get_array();
    if (files.empty()) out << "study " << a.study << ": no files were recorded at submit\n";
    for (const json::value& v : files) {
      const json::object& f = v.get_object();
      const std::string sha = Str(f, "sha256");
      out << "== " << Str(f, "path") << " (sha256 " << sha.substr(0, 12) << ", " << Str(f, "bytes")
          << " bytes at submit; " << CodeFileNow(Str(f, "path"), sha) << ")\n";
      if (const json::value* src = f.if_contains("source"); src != nullptr && src->is_string()) {
        const std::string text(src->get_string());
        out << text << (text.empty() || text.back() == '\n' ? "" : "\n");
      } else {
        out << "(its source was not kept: over 256 KiB, not UTF-8, or past 1 MiB in all)\n";
      }
    }
  } else if (verb == "status") {
    Result<std::string> resources = StudyResourcesLine(*client, a.study, r->get_object());
    if (!resources.ok()) return Fail(err, resources.status());
    PrintStatus(out, r->get_object());
    if (!resources->empty()) out << "  " << *resources << "\n";
  } else if (verb == "trials") {
    // A NODE column when the trials ran on several daemons (a shared PostgreSQL storage).
    std::set<std::string> nodes;
    for (const json::value& v : r->get_array()) {
      const json::object& t = v.get_object();
      if (t.contains("node") && t.at("node").is_string()) nodes.insert(Str(t, "node"));
    }
    const bool show_node = nodes.size() > 1;
    // A SLURM JOB column when trials ran as Slurm jobs: the job and its node, or why it waits.
    bool show_slurm = false;
    for (const json::value& v : r->get_array()) {
      show_slurm = show_slurm || !SlurmJobText(v.get_object()).empty();
    }
    // Several objectives: a VALUES column ("0.31, 812") instead of VALUE. Constraints: a
    // FEASIBLE column (yes, no, or - for a trial that reported none).
    bool several = false;
    bool constrained = false;
    for (const json::value& v : r->get_array()) {
      const json::object& t = v.get_object();
      const json::value* values = t.if_contains("values");
      several =
          several || (values != nullptr && values->is_array() && values->get_array().size() > 1);
      const json::value* c = t.if_contains("constraints");
      constrained = constrained || (c != nullptr && c->is_array());
    }
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // The objectives' names ([study] metric_names) head the value column when there are some.
    std::string value_head = several ? "VALUES" : "VALUE";
    if (Result<json::value> st = client->Call("status", {{"study", a.study}});
        st.ok() && st->is_object()) {
      if (std::string names = MetricNamesText(st->get_object()); !names.empty()) {
        value_head += " (" + names + ")";
      }
    }
    std::vector<std::vector<std::string>> rows = {
        {"#", "STATE", value_head, "DURATION", "PARAMS", "RETRY OF", "REASON"}};
    if (constrained) rows[0].insert(rows[0].begin() + 3, "FEASIBLE");
    if (show_node) rows[0].insert(rows[0].begin() + 4 + (constrained ? 1 : 0), "NODE");
    if (show_slurm)
      rows[0].insert(rows[0].begin() + 4 + (constrained ? 1 : 0) + show_node, "SLURM JOB");
    const long params_at = 4 + (constrained ? 1 : 0) + (show_node ? 1 : 0) + (show_slurm ? 1 : 0);
    for (const json::value& v : r->get_array()) {
      const json::object& t = v.get_object();
      // One line of why (the whole text: `logs`, --json): the exception's last line, the
      // signal, the limit hit.
      std::string reason;
      if (!t.at("fail_reason").is_null()) {
        const json::value* line = t.if_contains("fail_summary");
        model::FailInfo fail;
        fail.reason = Str(t, "fail_reason");
        fail.detail = t.at("fail_detail").is_string() ? std::string(t.at("fail_detail").as_string())
                                                      : std::string();
        reason =
            fail.reason + ": " +
            (line != nullptr && line->is_string() ? Str(t, "fail_summary")
                                                  : EscapeForTerminal(model::FailSummary(fail)));
      }
      rows.push_back(
          {Str(t, "number"), Str(t, "state"), several ? ValuesText(t) : Str(t, "value"),
           RunTimeText(t, now), FormatParams(t.at("params")),
           t.contains("retry_of") && !t.at("retry_of").is_null() ? Str(t, "retry_of") : "",
           reason});
      if (constrained) {
        const json::value* c = t.if_contains("constraints");
        const json::value* f = t.if_contains("feasible");
        const bool has = c != nullptr && c->is_array();
        rows.back().insert(
            rows.back().begin() + 3,
            std::string(!has ? "-"
                             : (f != nullptr && f->is_bool() && f->get_bool() ? "yes" : "no")));
      }
      if (show_node) {
        rows.back().insert(rows.back().begin() + 4 + (constrained ? 1 : 0),
                           t.contains("node") && t.at("node").is_string() ? Str(t, "node") : "-");
      }
      if (show_slurm) {
        const std::string job = SlurmJobText(t);
        rows.back().insert(rows.back().begin() + 4 + (constrained ? 1 : 0) + show_node,
                           job.empty() ? "-" : job);
      }
      if (a.resources) {  // before PARAMS, the longest column
        const std::vector<std::string> cells = ResourceCells(t);
        rows.back().insert(rows.back().begin() + params_at, cells.begin(), cells.end());
      }
    }
    if (a.resources) {
      const std::vector<std::string> heads = ResourceHeaders();
      rows[0].insert(rows[0].begin() + params_at, heads.begin(), heads.end());
    }
    PrintTable(out, rows);
  } else if (verb == "best") {
    if (!PrintBest(out, *r)) return kExitError;  // an empty Pareto front: no best trial
  } else if (verb == "cancel") {
    out << "study " << a.study << " cancelled\n";
  } else if (verb == "pause") {
    out << "study " << a.study << " paused: no new trials start; running ones go on\n";
  } else if (verb == "resume") {
    out << "study " << a.study << " resumed\n";
  } else if (verb == "extend") {
    out << "study " << a.study << ": " << Str(r->get_object(), "n_trials") << " trials ("
        << Str(r->get_object(), "state") << ")\n";
  } else if (verb == "set" && r->get_object().contains("metric_names")) {
    const std::string names = MetricNamesText(r->get_object());
    out << "study " << a.study << ": "
        << (names.empty() ? "its objectives have no names" : "objectives named " + names) << "\n";
  } else if (verb == "set") {
    out << "study " << a.study << ": parallelism " << Str(r->get_object(), "parallelism")
        << " from the next launch\n";
  } else if (verb == "delete") {
    out << "study " << a.study << " deleted (" << Str(r->get_object(), "deleted_trials")
        << " trials" << (a.purge ? ", folders purged" : "") << ")\n";
  } else if (verb == "events") {
    std::vector<std::vector<std::string>> rows = {{"TIME", "KIND", "TRIAL ID", "DETAIL"}};
    for (const json::value& v : r->get_array()) {
      const json::object& e = v.get_object();
      const double at = e.at("at").to_number<double>();
      const std::time_t t = static_cast<std::time_t>(at);
      std::tm tm{};
      ::localtime_r(&t, &tm);
      std::ostringstream when;
      when << std::put_time(&tm, "%Y-%m-%d %H:%M:%S");
      rows.push_back({when.str(), Str(e, "kind"),
                      e.at("trial_id").is_null() ? "" : Str(e, "trial_id"), Str(e, "detail")});
    }
    PrintTable(out, rows);
  } else if (verb == "enqueue") {
    out << r->at("trial").to_number<int64_t>() << "\n";
    if (const json::value* s = r->get_object().if_contains("skipped");
        s != nullptr && s->is_bool() && s->as_bool()) {
      err << "trialctl: nothing queued: trial " << r->at("trial").to_number<int64_t>()
          << " already has these values (--skip-if-exists)\n";
    }
  } else if (verb == "logs") {
    const json::object& o = r->get_object();
    if (!o.at("exists").get_bool()) {
      if (const json::value* why = o.if_contains("refused")) {
        err << "trialctl: log not shown: " << FormatValue(*why) << "\n";
        return kExitError;
      }
      err << "trialctl: no " << (a.stderr_stream ? "stderr" : "stdout") << " log for trial "
          << a.trial << " (state " << Str(o, "state") << ")\n";
      return kExitError;
    }
    const json::string& content = o.at("content").get_string();
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    const json::value* omitted = o.if_contains("omitted");
    if (!a.whole_log && omitted != nullptr && omitted->is_number() &&
        omitted->to_number<double>() > 0) {
      err << "trialctl: the log's first " << FormatValue(*omitted) << " of "
          << FormatValue(o.at("size")) << " bytes not shown; --all shows the whole log\n";
    }
  }
  return kExitOk;
}

}  // namespace triald::ctl
