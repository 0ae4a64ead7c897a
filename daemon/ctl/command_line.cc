#include "daemon/ctl/command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

#include "daemon/cli/validators.h"

namespace triald::ctl {
namespace {

// Help layout: a verb's synopsis at column 2, its description (and its options' descriptions)
// at column 28, as in `trialctl --help`.
constexpr size_t kDescriptionColumn = 28;

const char kExitCodes[] =
    "exit codes: 0 ok, 1 error reported by triald (or a waited-for or watched study\n"
    "that ended without a COMPLETE trial, or an output file that cannot be written),\n"
    "2 bad command line, 3 triald unreachable\n";

// One verb of trialctl. `help` lines are '\n'-separated; `forms` are synopses written out where
// the declared options cannot say which go together (export's two forms); otherwise the
// synopsis is made from the declarations.
struct VerbSpec {
  const char* name;
  const char* help;
  std::vector<const char*> forms;
  void (*declare)(CLI::App* verb, CommandLine* c);
};

// --json on a verb that uses it; with no `what`, its entry shows no line for it (the global
// options say what it does).
CLI::Option* AddJson(CLI::App* verb, CommandLine* c, const char* what = "") {
  return verb->add_flag("--json", c->json, what);
}

CLI::Option* AddStudy(CLI::App* verb, CommandLine* c) {
  return verb->add_option("STUDY", c->study, "the study's name")->required();
}

CLI::Option* AddInterval(CLI::App* verb, CommandLine* c, const char* what) {
  return verb->add_option("--interval", c->interval_s, what)
      ->type_name("SECONDS")
      ->check(cli::SecondsBetween(0.05, 3600, "0.05 and 3600"));
}

const std::vector<VerbSpec>& VerbSpecs() {
  static const std::vector<VerbSpec> kVerbs = {
      {"submit",
       "submit a TOML sweep; prints the study name",
       {},
       [](CLI::App* v, CommandLine* c) {
         v->add_option("FILE", c->file, "the sweep file")->required();
         v->add_option("--name", c->name, "the study's name instead of the file's [study] name")
             ->type_name("NAME");
         v->add_flag("--resume", c->resume,
                     "continue the study of this name when there is one\n"
                     "(n_trials more trials; same space and objective)");
         v->add_flag("--no-check", c->no_check,
                     "kind = \"python\": do not import the objective's module\n"
                     "(and preload modules) in the trials' interpreter first");
         v->add_option("--check-timeout", c->check_timeout_s,
                       "seconds the check at submit may take (default 60)")
             ->type_name("SECONDS")
             ->check(cli::SecondsBetween(1, 3600, "1 and 3600"));
         v->add_flag("--wait", c->wait,
                     "watch it until it ends, progress on stderr,\n"
                     "then print the best trial");
         AddInterval(v, c, "with --wait: seconds between polls (default 0.5)");
         AddJson(v, c, "print triald's reply as JSON (not with --wait)");
       }},
      {"watch",
       "live progress until the study ends: counts, best so far,\n"
       "ETA (mean finished-trial time x trials left / trials at\n"
       "once); redrawn in place on a terminal, else one line per\n"
       "change; then prints the best trial",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         AddInterval(v, c, "seconds between polls (default 0.5)");
         AddJson(v, c, "each changed status as one JSON line, nothing else");
       }},
      {"report",
       "one self-contained HTML report with plots and a table",
       {"STUDY -o FILE.html"},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_option("-o,--out", c->output, "the HTML file to write")
             ->type_name("FILE.html")
             ->required();
       }},
      {"export",
       "csv, json: every trial to stdout (csv: one row per trial);\n"
       "optuna: an Optuna 3.1 SQLite storage (optuna.load_study,\n"
       "optuna-dashboard)",
       {"STUDY --format csv|json", "STUDY --format optuna --out FILE.db [--force]"},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_option("--format", c->format, "csv, json or optuna")
             ->type_name("FORMAT")
             ->required()
             ->check(CLI::Validator(
                 [](std::string& f) {
                   return f == "csv" || f == "json" || f == "optuna"
                              ? std::string()
                              : "\"" + f + "\": expected csv, json or optuna";
                 },
                 ""));
         v->add_option("-o,--out", c->output, "with --format optuna: the file to write")
             ->type_name("FILE.db");
         v->add_flag("--force", c->force, "replace an existing --out file");
       }},
      {"studies",
       "every study with its progress and best value",
       {},
       [](CLI::App* v, CommandLine* c) { AddJson(v, c); }},
      {"status",
       "one study's progress and best trial; the objective's files\n"
       "kept at submit, and whether each changed since",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         AddJson(v, c);
         v->add_flag("--code", c->show_code,
                     "print the objective's files as they were at submit\n"
                     "(the study's submitter, root and triald's user)");
       }},
      {"trials",
       "a study's trials (all, or a page with --offset/--limit);\n"
       "DURATION is the run time, start to end (so far, with +,\n"
       "while it runs); REASON one line (`logs`, --json: all)",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_option("--offset", c->offset, "start at trial number N (default 0)")
             ->type_name("N")
             ->check(cli::IntegerFrom(0, 2147483647));
         v->add_option("--limit", c->limit, "at most N trials (default: all)")
             ->type_name("N")
             ->check(cli::IntegerFrom(1, 2147483647));
         v->add_flag("--resources", c->resources,
                     "add what each trial used: PEAK_MEM, PEAK_GPU (peak\n"
                     "memory, peak GPU memory; K/M/G/T = 1024^n), CPU_S,\n"
                     "WALL_S (seconds); - where not measured");
         AddJson(v, c);
       }},
      {"best",
       "the best feasible COMPLETE trial; with several objectives,\n"
       "the Pareto front of the feasible COMPLETE trials",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         AddJson(v, c);
       }},
      {"cancel",
       "stop a study's running trials and start no more",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         AddJson(v, c);
       }},
      {"enqueue",
       "queue a trial with these parameter values (like Optuna's\n"
       "enqueue_trial); it runs before any newly sampled trial,\n"
       "enqueued ones first come first served, and counts toward\n"
       "n_trials; parameters not given are sampled. VALUE is\n"
       "written as in the sweep: 0.01, 64, adamw, true. A\n"
       "kind = \"python\" study also takes parameters its\n"
       "objective suggests: the value answers that suggest.\n"
       "Prints the trial number",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         // Collected as text: NAME=VALUE and duplicates are checked after parsing
         // (CheckCombinations), with messages that name the parameter.
         v->add_flag("--skip-if-exists", c->skip_if_exists,
                     "queue nothing when a trial already has these values\n"
                     "(waiting, running or finished); prints its number");
         v->add_option("--param", c->param_texts, "one parameter's value (repeatable)")
             ->type_name("NAME=VALUE")
             ->expected(1)
             ->allow_extra_args(false)
             ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
         AddJson(v, c);
       }},
      {"logs",
       "a trial's captured stdout (or stderr)",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_option("TRIAL", c->trial, "the trial's number")
             ->required()
             ->check(CLI::Validator(
                 [](std::string& t) {
                   long n = 0;
                   return cli::ParseLong(t, &n) && n >= 0
                              ? std::string()
                              : "expected a trial number (an integer >= 0)";
                 },
                 ""));
         v->add_flag("--stderr", c->stderr_stream, "the captured stderr instead");
         v->add_flag("--all", c->whole_log,
                     "the whole log as captured (default: its last 256 KiB)");
         AddJson(v, c);
       }},
      {"nodes",
       "the daemons sharing triald's PostgreSQL storage: alive or\n"
       "dead, seconds since their last heartbeat, running trials\n"
       "(on SQLite: this daemon alone)",
       {},
       [](CLI::App* v, CommandLine* c) { AddJson(v, c); }},
      {"ping", "check that triald answers", {}, [](CLI::App* v, CommandLine* c) { AddJson(v, c); }},
      {"pause",
       "start no new trial of the study (on every node); running\n"
       "ones go on; `status` shows PAUSED",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         AddJson(v, c);
       }},
      {"resume",
       "start a paused study's trials again",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         AddJson(v, c);
       }},
      {"extend",
       "set the study's total number of trials to N (above its\n"
       "finished trials); a COMPLETE study runs again",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_option("--n-trials", c->n_trials, "the new total")
             ->type_name("N")
             ->required()
             ->check(cli::IntegerFrom(1, 2147483647));
         AddJson(v, c);
       }},
      {"set",
       "change a setting of the study: parallelism=N (N >= 1),\n"
       "its trials at once per node from the next launch on;\n"
       "lowering it stops nothing that runs; metric_names=A,B,...\n"
       "names its objectives (one per direction; empty: none)",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_option("SETTING", c->setting, "parallelism=N or metric_names=A,B")->required();
         AddJson(v, c);
       }},
      {"delete",
       "remove a study and its trials, values, attributes and events\n"
       "from storage (refused while trials run); asks for the\n"
       "study's name again unless --yes",
       {},
       [](CLI::App* v, CommandLine* c) {
         AddStudy(v, c);
         v->add_flag("--purge", c->purge,
                     "also remove its trial folders and logs under the state\n"
                     "directory");
         v->add_flag("--yes", c->yes, "do not ask (needed when stdin is not a terminal)");
         AddJson(v, c);
       }},
      {"events",
       "a study's events (submitted, paused, trials lost, ...), or\n"
       "without STUDY the daemon's own (a deleted study's)",
       {},
       [](CLI::App* v, CommandLine* c) {
         v->add_option("STUDY", c->study, "the study's name");
         AddJson(v, c);
       }},
  };
  return kVerbs;
}

const VerbSpec* FindSpec(const std::string& name) {
  for (const VerbSpec& v : VerbSpecs()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

// The parser: the global options, one subcommand per verb and `help [VERB]`.
std::unique_ptr<CLI::App> MakeParser(CommandLine* c, std::string* help_verb) {
  auto app = std::make_unique<CLI::App>("the command-line client of triald", "trialctl");
  app->set_help_flag("-h,--help", "this text (VERB --help, help VERB: that verb's entry)");
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->require_subcommand(1);
  // Options a verb does not declare (--socket, --json) are looked up here, wherever they stand.
  app->fallthrough();
  app->add_option("--socket", c->socket,
                  "triald's control socket (default $TRIALD_SOCKET, else\n"
                  "the first that answers of /run/triald/triald.sock,\n"
                  "$XDG_RUNTIME_DIR/triald/triald.sock,\n"
                  "~/.local/state/triald/triald.sock, .triald/triald.sock)")
      ->type_name("PATH");
  app->add_flag("--json", c->json, "machine-readable output (read verbs, enqueue, watch)");
  for (const VerbSpec& spec : VerbSpecs()) {
    CLI::App* verb = app->add_subcommand(spec.name, spec.help);
    spec.declare(verb, c);
  }
  app->add_subcommand("help", "a verb's usage")->add_option("VERB", *help_verb, "a verb");
  return app;
}

bool IsHelp(const CLI::Option* o) {
  for (const std::string& l : o->get_lnames()) {
    if (l == "help") return true;
  }
  return false;
}

bool IsFlag(const CLI::Option* o) { return o->get_type_name().empty(); }

// "-o, --out FILE.html", "--wait", "STUDY".
std::string OptionLabel(const CLI::Option* o) {
  if (o->get_positional()) return o->get_name(true);
  std::string label;
  for (const std::string& s : o->get_snames()) label += (label.empty() ? "-" : ", -") + s;
  for (const std::string& l : o->get_lnames()) label += (label.empty() ? "--" : ", --") + l;
  if (!IsFlag(o)) label += " " + o->get_type_name();
  return label;
}

// The synopsis made from a verb's declarations: its arguments, then its options in the order
// declared, optional ones in brackets, repeatable ones followed by "...".
std::string Synopsis(const CLI::App& verb) {
  std::string s = verb.get_name();
  for (const CLI::Option* o : verb.get_options()) {
    if (o->get_positional()) s += " " + o->get_name(true);
  }
  for (const CLI::Option* o : verb.get_options()) {
    if (o->get_positional() || IsHelp(o)) continue;
    std::string part = o->get_name() + (IsFlag(o) ? "" : " " + o->get_type_name());
    if (!o->get_required()) part = "[" + part + "]";
    if (o->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll) part += "...";
    s += " " + part;
  }
  return s;
}

// `label` at `indent`, then `text` ('\n'-separated lines) at column 28, on the same line when
// the label leaves room.
std::string Entry(size_t indent, const std::string& label, const std::string& text) {
  std::string out = std::string(indent, ' ') + label;
  size_t start = 0;
  bool first = true;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (first && out.size() + 2 <= kDescriptionColumn) {
      out += std::string(kDescriptionColumn - out.size(), ' ');
    } else {
      out += "\n" + std::string(kDescriptionColumn, ' ');
    }
    out += text.substr(start, end - start);
    first = false;
    start = end + 1;
  }
  return out + "\n";
}

// A verb's entry: its synopsis (or forms), its description, and its options.
std::string VerbEntry(const CLI::App& verb) {
  const VerbSpec* spec = FindSpec(verb.get_name());
  std::string out;
  if (spec->forms.empty()) {
    out = "  " + Synopsis(verb) + "\n";
  } else {
    for (const char* form : spec->forms) out += "  " + verb.get_name() + " " + form + "\n";
  }
  out.pop_back();  // the description starts on the last synopsis line when it fits
  out = Entry(0, out, spec->help);
  for (const CLI::Option* o : verb.get_options()) {
    if (o->get_positional() || IsHelp(o) || o->get_description().empty()) continue;
    out += Entry(4, OptionLabel(o), o->get_description());
  }
  return out;
}

std::string GlobalOptions(const CLI::App& app) {
  std::string out = "options:\n";
  std::vector<const CLI::Option*> options = app.get_options();
  // -h, --help (declared first by CLI11) last.
  std::stable_partition(options.begin(), options.end(),
                        [](const CLI::Option* o) { return !IsHelp(o); });
  for (const CLI::Option* o : options) {
    std::string label = "  " + OptionLabel(o);
    std::string text = o->get_description();
    // Global options in a narrower column: their descriptions are longer.
    constexpr size_t kColumn = 18;
    label += std::string(label.size() < kColumn ? kColumn - label.size() : 1, ' ');
    size_t nl;
    while ((nl = text.find('\n')) != std::string::npos) {
      label += text.substr(0, nl) + "\n" + std::string(kColumn, ' ');
      text.erase(0, nl + 1);
    }
    out += label + text + "\n";
  }
  return out;
}

std::string FullUsage(const CLI::App& app) {
  std::string out = "usage: trialctl [--socket PATH] VERB [ARGS] [--json]\n\nverbs:\n";
  for (const VerbSpec& spec : VerbSpecs()) out += VerbEntry(*app.get_subcommand(spec.name));
  return out + "\n" + GlobalOptions(app) + "\n" + kExitCodes;
}

std::string VerbUsage(const CLI::App& app, const CLI::App& verb) {
  return "usage: trialctl [--socket PATH] " + verb.get_name() + " ...\n\n" + VerbEntry(verb) +
         "\n" + GlobalOptions(app) + "\n" + kExitCodes;
}

// The verb the command line selected (not `help`), or nullptr.
const CLI::App* SelectedVerb(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    if (FindSpec(sub->get_name()) != nullptr) return sub;
  }
  return nullptr;
}

// The help of the verb on the command line, or the whole help.
ParsedCommandLine Help(const CLI::App& app) {
  ParsedCommandLine r;
  r.kind = ParsedCommandLine::Kind::kHelp;
  const CLI::App* verb = SelectedVerb(app);
  r.text = verb ? VerbUsage(app, *verb) : FullUsage(app);
  return r;
}

ParsedCommandLine UsageError(const CLI::App& app, const std::string& what) {
  ParsedCommandLine r;
  r.kind = ParsedCommandLine::Kind::kUsageError;
  const CLI::App* verb = SelectedVerb(app);
  r.text = "trialctl: " + what + "\n" + (verb ? VerbUsage(app, *verb) : FullUsage(app));
  return r;
}

// What CLI11 reports, except where no verb was recognised: then the unknown verb, or the
// unknown option, or that none was given.
std::string Describe(const CLI::App& app, const CLI::ParseError& e) {
  if (!app.get_subcommands().empty() || dynamic_cast<const CLI::RequiredError*>(&e) == nullptr) {
    return e.what();
  }
  const std::vector<std::string> rest = app.remaining();
  for (const std::string& t : rest) {
    if (!t.empty() && t[0] != '-') return "unknown verb \"" + t + "\"";
  }
  if (!rest.empty()) return "unknown option \"" + rest[0] + "\"";
  return "no verb given";
}

// What CLI11 cannot check: --param's NAME=VALUE form and duplicates, and which --format takes
// --out.
std::string CheckCombinations(CommandLine& c) {
  for (const std::string& kv : c.param_texts) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "--param \"" + kv + "\": expected NAME=VALUE";
    std::string name = kv.substr(0, eq);
    for (const auto& [given, value] : c.params) {
      if (given == name) return "--param " + name + " given twice";
    }
    c.params.emplace_back(std::move(name), kv.substr(eq + 1));
  }
  if (c.verb == "set") {
    const size_t eq = c.setting.find('=');
    const std::string key = c.setting.substr(0, eq);
    if (eq == std::string::npos || (key != "parallelism" && key != "metric_names")) {
      return "set \"" + c.setting + "\": expected parallelism=N or metric_names=A,B,...";
    }
    if (key == "parallelism" && !cli::ParseLong(c.setting.substr(eq + 1), &c.parallelism)) {
      return "set \"" + c.setting + "\": expected parallelism=N with N an integer";
    }
  }
  if (c.verb == "export" && (c.format == "optuna") == c.output.empty()) {
    return c.format == "optuna" ? "export --format optuna needs --out FILE.db"
                                : "export --format " + c.format + " writes to stdout; no --out";
  }
  return "";
}

}  // namespace

ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args) {
  ParsedCommandLine r;
  std::string help_verb;
  std::unique_ptr<CLI::App> app = MakeParser(&r.command, &help_verb);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app->parse(reversed);
  } catch (const CLI::Success&) {  // -h, --help
    return Help(*app);
  } catch (const CLI::ParseError& e) {
    // Help wins over whatever else is wrong on the line.
    if (std::find(args.begin(), args.end(), "--help") != args.end() ||
        std::find(args.begin(), args.end(), "-h") != args.end()) {
      return Help(*app);
    }
    return UsageError(*app, Describe(*app, e));
  }
  const CLI::App* verb = SelectedVerb(*app);
  if (verb == nullptr) {  // help [VERB]
    r.kind = ParsedCommandLine::Kind::kHelp;
    const CLI::App* named = FindSpec(help_verb) ? app->get_subcommand(help_verb) : nullptr;
    r.text = named ? VerbUsage(*app, *named) : FullUsage(*app);
    return r;
  }
  r.command.verb = verb->get_name();
  if (std::string what = CheckCombinations(r.command); !what.empty()) {
    return UsageError(*app, what);
  }
  return r;
}

std::map<std::string, std::vector<std::string>> CompletionWords() {
  CommandLine c;
  std::string help_verb;
  std::unique_ptr<CLI::App> app = MakeParser(&c, &help_verb);
  std::map<std::string, std::vector<std::string>> words;
  auto names = [](const CLI::App& a) {
    std::vector<std::string> out;
    for (const CLI::Option* o : a.get_options()) {
      for (const std::string& s : o->get_snames()) out.push_back("-" + s);
      for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
    }
    return out;
  };
  words[""] = names(*app);
  for (const VerbSpec& spec : VerbSpecs())
    words[spec.name] = names(*app->get_subcommand(spec.name));
  return words;
}

}  // namespace triald::ctl
