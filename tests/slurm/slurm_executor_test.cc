// Studies whose trials run as Slurm jobs ([executor] kind = "slurm"), against the real one-node
// cluster of the `slurm` fixture (tests/slurm/fixture.sh: slurmctld, slurmd and munged as root,
// 8 CPUs, two fake GPUs as GRES). Each case checks that squeue holds none of its jobs when it
// ends. Not root: skipped visibly (the cluster needs root); as root a cluster that does not
// answer fails.

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/slurm/slurm_job.h"
#include "tests/integration/harness.h"
#include "tests/support/postgres.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

// Slurm's command `argv` (sinfo, squeue, scancel, scontrol) and its stdout; fails on an error.
std::string Slurm(const std::vector<std::string>& argv) {
  common::Result<std::string> out = slurm::RunForOutput(argv, 30);
  INFO(argv[0] << ": " << out.status().ToString());
  REQUIRE(out.ok());
  return *out;
}

// Asserts that the fixture's cluster answers and its node is up; skips (visibly) where it cannot
// run. "planned" (sinfo(1): planned by the backfill scheduler for a higher-priority job) is an
// up node too: the flag stays until the next backfill cycle, after an earlier case's job.
#define REQUIRE_CLUSTER()                                                          \
  do {                                                                             \
    if (::geteuid() != 0) TRIALD_SKIP("the test Slurm cluster needs root");        \
    const char* conf = std::getenv("SLURM_CONF");                                  \
    REQUIRE(conf != nullptr);                                                      \
    const std::string state = Slurm({"sinfo", "--noheader", "--format=%T"});       \
    INFO("sinfo: " << state);                                                      \
    REQUIRE((state.rfind("idle", 0) == 0 || state.rfind("mixed", 0) == 0 ||        \
             state.rfind("allocated", 0) == 0 || state.rfind("planned", 0) == 0)); \
  } while (0)

// triald's jobs in Slurm's queue ("ID NAME STATE" lines).
std::string TrialdJobs() {
  std::string out;
  std::istringstream in(Slurm({"squeue", "--noheader", "--format=%i %j %T"}));
  for (std::string line; std::getline(in, line);) {
    if (line.find(" triald.") != std::string::npos) out += line + "\n";
  }
  return out;
}

// trialctl's output for `args` once it contains `text` (polling, bounded); fails the case,
// showing the last output, when it never does.
std::string WaitCtlSays(TestDaemon& d, const std::vector<std::string>& args,
                        const std::string& text) {
  std::string out;
  const bool said = WaitFor(
      [&] {
        out = Trialctl(d.socket(), args).out;
        return out.find(text) != std::string::npos;
      },
      30);
  INFO("trialctl " << args[0] << ":\n" << out);
  CHECK(said);
  return out;
}

void RequireQueueEmpties() {
  std::string left;
  WaitFor(
      [&] {
        left = TrialdJobs();
        return left.empty();
      },
      20);
  INFO("left in squeue:\n" << left);
  REQUIRE(left.empty());
}

// The "triald.slurm" attribute of a trial (the bridge's last word); empty when it has none.
json::object SlurmAttr(const json::value& trial) {
  const json::object& t = trial.as_object();
  if (!t.contains("attrs") || !t.at("attrs").is_object()) return {};
  const json::object& attrs = t.at("attrs").as_object();
  if (!attrs.contains("triald.slurm")) return {};
  return attrs.at("triald.slurm").as_object();
}

std::string Str(const json::object& o, const char* key) {
  return o.contains(key) && o.at(key).is_string() ? std::string(o.at(key).as_string())
                                                  : std::string();
}

// An exec objective that reports its GPUs and when it ran (attrs), sleeps `sleep_s`, and ends
// with value x.
std::string WorkerScript(double sleep_s) {
  std::ostringstream o;
  o << "t0=$(date +%s.%N)\n"
       "echo \"{\\\"type\\\":\\\"attr\\\",\\\"key\\\":\\\"gpus\\\",\\\"value\\\":\\\"$CUDA_VISIBLE_"
       "DEVICES\\\"}\" >&3\n"
       "echo \"stdout of trial $TRIALD_TRIAL\"\n"
       "echo \"stderr of trial $TRIALD_TRIAL\" >&2\n"
       "sleep "
    << sleep_s
    << "\n"
       "t1=$(date +%s.%N)\n"
       "echo \"{\\\"type\\\":\\\"attr\\\",\\\"key\\\":\\\"ran\\\",\\\"value\\\":\\\"$t0 $t1\\\"}\" "
       ">&3\n"
       "x=$(printf %s \"$TRIALD_PARAMS\" | sed 's/.*\"x\": *\\([-0-9.e]*\\).*/\\1/')\n"
       "echo \"{\\\"type\\\":\\\"final\\\",\\\"value\\\":$x}\" >&3\n";
  return o.str();
}

std::string SlurmSweep(const std::string& name, const std::string& dir, int n_trials,
                       int parallelism, const std::string& extra_study = "",
                       const std::string& executor = "") {
  std::string toml = ExecSweep(name, "[\"sh\", \"worker.sh\"]", n_trials, parallelism, 0, 2, dir);
  if (!extra_study.empty()) {
    toml.replace(toml.find("\n\n[objective]\n"), 2, "\n" + extra_study + "\n\n");
  }
  return toml + "\n[executor]\nkind = \"slurm\"\n" + executor;
}

// A daemon of its own on a temporary folder with the worker script (sleeping `sleep_s`), and
// the Slurm study `name` submitted to it.
struct SlurmRun {
  SlurmRun(const std::string& name, double sleep_s, int n_trials, int parallelism,
           const std::string& extra_study = "") {
    daemon.Start();
    dir.Write("worker.sh", WorkerScript(sleep_s), 0755);
    const std::string toml = SlurmSweep(name, dir.path(), n_trials, parallelism, extra_study);
    daemon.Submit(toml, dir.Write(name + ".toml", toml));
  }
  TempDir dir;
  TestDaemon daemon{dir.File("state")};
};

}  // namespace

TEST_CASE("slurm: a define-by-run study with a pruner runs its trials as Slurm jobs", "[slurm]") {
  REQUIRE_CLUSTER();
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  const std::string toml =
      "[study]\nname = \"dbr\"\ndirection = \"minimize\"\nn_trials = 6\nparallelism = 3\n\n"
      "[objective]\nkind = \"python\"\npython = \"/usr/bin/python3\"\nfunction = \"" +
      ExamplesDir() +
      "/conditional.py:objective\"\n\n[pruner]\nkind = \"median\"\nn_startup_trials = 2\n\n"
      "[executor]\nkind = \"slurm\"\npartition = \"debug\"\n";
  daemon.Submit(toml, dir.Write("dbr.toml", toml));
  json::object status = daemon.WaitStudy("dbr", 120);
  INFO(daemon.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = daemon.Trials("dbr");
  REQUIRE(trials.size() == 6);
  std::set<std::string> job_ids;
  int complete = 0;
  for (const json::value& t : trials) {
    INFO(json::serialize(t));
    const std::string state(t.at("state").as_string());
    CHECK((state == "COMPLETE" || state == "PRUNED"));
    complete += state == "COMPLETE";
    // Suggestions were answered across srun: each trial has its own parameters.
    CHECK(t.at("params").as_object().contains("optimizer"));
    const json::object slurm = SlurmAttr(t);
    CHECK(Str(slurm, "node") == "triald-node");
    CHECK_FALSE(Str(slurm, "job_id").empty());
    job_ids.insert(Str(slurm, "job_id"));
    // What the worker's tree used, measured on the node.
    CHECK(t.at("resources").at("memory_source").as_string().find("Slurm node") !=
          std::string::npos);
  }
  CHECK(complete >= 1);
  CHECK(job_ids.size() == 6);  // one job per trial
  RequireQueueEmpties();
}

TEST_CASE("slurm: gpus_per_trial = 1 on two GPUs runs two trials at once, each on its own GPU",
          "[slurm]") {
  REQUIRE_CLUSTER();
  SlurmRun run("gpus", 1.5, 4, 4, "gpus_per_trial = 1");
  TestDaemon& daemon = run.daemon;
  // While two hold both GPUs, the others wait in Slurm's queue, and the views say why.
  const std::string table = WaitCtlSays(daemon, {"trials", "gpus"}, "queued (Resources)");
  CHECK_THAT(table, Catch::Contains("SLURM JOB") && Catch::Contains(" on triald-node"));
  // status sums them up while some wait.
  WaitCtlSays(daemon, {"status", "gpus"}, "2 job(s) running, 2 queued");
  json::object status = daemon.WaitStudy("gpus", 60);
  INFO(daemon.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = daemon.Trials("gpus");
  REQUIRE(CountState(trials, "COMPLETE") == 4);
  struct Run {
    double t0, t1;
    std::string gpu;
  };
  std::vector<Run> runs;
  for (const json::value& t : trials) {
    INFO(json::serialize(t));
    const json::object& attrs = t.at("attrs").as_object();
    Run r{};
    std::istringstream(std::string(attrs.at("ran").as_string())) >> r.t0 >> r.t1;
    r.gpu = std::string(attrs.at("gpus").as_string());
    CHECK((r.gpu == "0" || r.gpu == "1"));
    runs.push_back(r);
  }
  for (const Run& a : runs) {
    int overlapping = 0;
    for (const Run& b : runs) {
      if (b.t0 < a.t1 && a.t0 < b.t1) {
        ++overlapping;
        if (&a != &b) CHECK(a.gpu != b.gpu);  // two at once never share a GPU
      }
    }
    CHECK(overlapping <= 2);
  }
  // The logs came back through srun: each stream in its own file.
  Ctl logs = Trialctl(daemon.socket(), {"logs", "gpus", "0"});
  CHECK(logs.code == 0);
  CHECK_THAT(logs.out, Catch::Contains("stdout of trial 0"));
  Ctl err = Trialctl(daemon.socket(), {"logs", "--stderr", "gpus", "0"});
  CHECK_THAT(err.out + err.err, Catch::Contains("stderr of trial 0"));
  RequireQueueEmpties();
}

TEST_CASE("slurm: cancelling a study ends its running and queued jobs", "[slurm]") {
  REQUIRE_CLUSTER();
  SlurmRun run("cancel", 60, 3, 3, "gpus_per_trial = 1");
  TestDaemon& daemon = run.daemon;
  // Two run (both GPUs), one waits in the queue.
  WaitFor([&] { return TrialdJobs().find("RUNNING") != std::string::npos; }, 30);
  WaitFor(
      [&] {
        const std::string jobs = TrialdJobs();
        return jobs.find("PENDING") != std::string::npos;
      },
      30);
  Ctl c = Trialctl(daemon.socket(), {"cancel", "cancel"});
  REQUIRE(c.code == 0);
  daemon.WaitStudy("cancel", 60);
  json::array trials = daemon.Trials("cancel");
  for (const json::value& t : trials) {
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "FAIL");
    CHECK(t.at("fail_reason").as_string() == "cancelled");
  }
  RequireQueueEmpties();
}

TEST_CASE("slurm: triald killed mid-study leaves no job behind, and its restart completes it",
          "[slurm]") {
  REQUIRE_CLUSTER();
  SlurmRun run("restart", 2, 4, 2, "retries = 2");
  TestDaemon& daemon = run.daemon;
  WaitFor(
      [&] {
        const std::string jobs = TrialdJobs();
        return std::count(jobs.begin(), jobs.end(), '\n') == 2 &&
               jobs.find("PENDING") == std::string::npos;
      },
      30);
  daemon.Kill();
  // The trials' bridges die with the daemon, srun with them, and Slurm ends their jobs; what
  // could still be there is cancelled by the next start.
  daemon.Start();
  json::object status = daemon.WaitStudy("restart", 90);
  INFO(daemon.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = daemon.Trials("restart");
  int lost = 0, retried = 0;
  for (const json::value& t : trials) {
    INFO(json::serialize(t));
    if (t.at("state").as_string() == "FAIL") {
      CHECK(t.at("fail_reason").as_string() == "lost");
      ++lost;
    }
    retried += !t.at("retry_of").is_null();
  }
  CHECK(lost == 2);  // the two running when triald died
  CHECK(retried == 2);
  CHECK(CountState(trials, "COMPLETE") == 4);
  RequireQueueEmpties();
}

TEST_CASE("slurm: a job cancelled outside triald or whose node goes down is retried for that",
          "[slurm]") {
  REQUIRE_CLUSTER();
  SlurmRun run("outside", 4, 1, 1,
               "retries = 3\nretry_on = [\"slurm_cancelled\", \"node_failure\"]");
  TestDaemon& daemon = run.daemon;
  auto running_job = [&](size_t n_trials) {
    std::string id;
    WaitTrials(
        daemon, "outside",
        [&](const json::array& trials) {
          if (trials.size() != n_trials) return false;
          const json::object s = SlurmAttr(trials.back());
          id = Str(s, "job_id");
          return Str(s, "state") == "RUNNING";
        },
        30);
    return id;
  };
  // Slurm refuses to requeue a job srun started (only batch jobs requeue): nothing changes.
  const std::string first = running_job(1);
  CHECK_FALSE(slurm::RunForOutput({"scontrol", "requeue", first}, 30).ok());
  Slurm({"scancel", first});
  const std::string second = running_job(2);
  Slurm({"scontrol", "update", "nodename=triald-node", "state=down", "reason=triald-test"});
  WaitTrials(
      daemon, "outside", [](const json::array& trials) { return trials.size() == 3; }, 30);
  // Back up; the third attempt runs to its end.
  (void)slurm::RunForOutput({"scontrol", "update", "nodename=triald-node", "state=resume"}, 30);
  WaitFor([] { return Slurm({"sinfo", "--noheader", "--format=%T"}).rfind("idle", 0) == 0; }, 30);
  json::object status = daemon.WaitStudy("outside", 60);
  INFO(daemon.log());
  json::array trials = daemon.Trials("outside");
  REQUIRE(trials.size() == 3);
  CHECK(trials[0].at("fail_reason").as_string() == "slurm_cancelled");
  CHECK_THAT(std::string(trials[0].at("fail_detail").as_string()),
             Catch::Contains("Slurm ended job " + first) && Catch::Contains("CANCELLED"));
  CHECK(trials[1].at("fail_reason").as_string() == "node_failure");
  CHECK_THAT(std::string(trials[1].at("fail_detail").as_string()), Catch::Contains("NODE_FAIL"));
  CHECK(trials[2].at("state").as_string() == "COMPLETE");
  CHECK(status.at("state").as_string() == "COMPLETE");
  RequireQueueEmpties();
}

TEST_CASE("slurm: a preempted trial fails as preempted and is retried, trial_timeout ends a job",
          "[slurm]") {
  REQUIRE_CLUSTER();
  // Both GPUs, so that a job of the higher-priority partition `urgent` must preempt it.
  SlurmRun run("preempt", 4, 1, 1, "gpus_per_trial = 2\nretries = 1");
  TestDaemon& daemon = run.daemon;
  TempDir& dir = run.dir;
  WaitTrials(
      daemon, "preempt",
      [](const json::array& trials) {
        return trials.size() == 1 && Str(SlurmAttr(trials[0]), "state") == "RUNNING";
      },
      30);
  Slurm(
      {"sbatch", "--partition=urgent", "--gres=gpu:2", "--output=/dev/null", "--wrap", "sleep 1"});
  json::object status = daemon.WaitStudy("preempt", 60);
  INFO(daemon.log());
  json::array trials = daemon.Trials("preempt");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].at("fail_reason").as_string() == "preempted");  // retried by default
  CHECK_THAT(std::string(trials[0].at("fail_detail").as_string()), Catch::Contains("PREEMPTED"));
  CHECK(trials[1].at("state").as_string() == "COMPLETE");
  CHECK(status.at("state").as_string() == "COMPLETE");

  // trial_timeout: triald stops the trial, and Slurm's job with it.
  dir.Write("worker.sh", WorkerScript(60), 0755);
  std::string slow = SlurmSweep("slow", dir.path(), 1, 1);
  slow = SetTomlKey(slow, "trial_timeout", "2");
  daemon.Submit(slow, dir.Write("slow.toml", slow));
  daemon.WaitStudy("slow", 60);
  json::array t = daemon.Trials("slow");
  REQUIRE(t.size() == 1);
  CHECK(t[0].at("fail_reason").as_string() == "timeout");
  RequireQueueEmpties();
}

TEST_CASE("slurm: bad executor settings are refused at submit naming the key", "[slurm]") {
  REQUIRE_CLUSTER();
  TempDir dir;
  dir.Write("worker.sh", WorkerScript(0), 0755);
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  auto refused = [&](const std::string& toml) {
    Ctl c = Trialctl(daemon.socket(), {"submit", dir.Write("bad.toml", toml)});
    CHECK(c.code != 0);
    return c.err;
  };
  CHECK_THAT(refused(SlurmSweep("p", dir.path(), 1, 1, "", "partition = \"nope\"\n")),
             Catch::Contains("[executor] partition = \"nope\": no such partition") &&
                 Catch::Contains("debug"));
  CHECK_THAT(refused(SlurmSweep("g", dir.path(), 1, 1, "gpus_per_trial = 3")),
             Catch::Contains("[study] gpus_per_trial = 3 with [executor] kind = \"slurm\"") &&
                 Catch::Contains("at most 2 GPU(s)"));
  daemon.Stop();

  // The daemon's [slurm] defaults stand for what the sweep leaves out, and are checked alike.
  TestDaemon configured(dir.File("state3"));
  configured.AddArgs(
      {"--config", dir.Write("triald.toml", "[slurm]\npartition = \"elsewhere\"\n")});
  configured.Start();
  Ctl d = Trialctl(configured.socket(),
                   {"submit", dir.Write("d.toml", SlurmSweep("d", dir.path(), 1, 1))});
  CHECK(d.code != 0);
  CHECK_THAT(d.err, Catch::Contains("[executor] partition = \"elsewhere\" (triald --config "
                                    "[slurm] partition): no such partition"));
  configured.Stop();

  // A daemon whose PATH has no Slurm client.
  TempDir empty;
  const std::string path = std::getenv("PATH");
  setenv("PATH", empty.path().c_str(), 1);
  TestDaemon bare(dir.File("state2"));
  bare.Start();
  setenv("PATH", path.c_str(), 1);
  std::string toml = SlurmSweep("s", dir.path(), 1, 1);
  toml.replace(toml.find("[\"sh\""), 5, "[\"/bin/sh\"");  // found without PATH
  Ctl c = Trialctl(bare.socket(), {"submit", dir.Write("s.toml", toml)});
  CHECK(c.code != 0);
  CHECK_THAT(c.err, Catch::Contains("[executor] kind = \"slurm\": Slurm's client (srun, sinfo) "
                                    "is not installed"));
}

TEST_CASE("slurm: a pilot in an allocation joins a shared study and leaves when it has no work",
          "[slurm][postgres]") {
  REQUIRE_CLUSTER();
  TestDatabase db;
  TempDir dir;
  dir.Write("worker.sh", WorkerScript(1), 0755);
  // The submit host's daemon runs one trial at a time; the pilot takes the rest.
  TestDaemon submit(dir.File("state"), 1);
  submit.AddArgs({"--storage", db.url(), "--node-name", "submit"});
  submit.Start();
  const std::string toml = ExecSweep("shared", "[\"sh\", \"worker.sh\"]", 16, 4, 0, 2, dir.path());
  submit.Submit(toml, dir.Write("shared.toml", toml));
  const std::string job =
      Slurm({"sbatch", "--parsable", "--cpus-per-task=3", "--output=" + dir.File("pilot.out"),
             "--export=ALL,TRIALD_STORAGE=" + db.url() + ",TRIALD_BIN=" + BinDir() +
                 ",TRIALD_IDLE=3,TRIALD_STATE_ROOT=" + dir.path(),
             std::string(TRIALD_SOURCE_DIR) + "/scripts/slurm_pilot.sh"});
  const std::string id = job.substr(0, job.find_first_of(";\n"));
  json::object status = submit.WaitStudy("shared", 90);
  INFO(submit.log() << "\npilot: " << ReadTextFile(dir.File("pilot.out")));
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = submit.Trials("shared");
  CHECK(CountState(trials, "COMPLETE") == 16);
  int on_pilot = 0;
  for (const json::value& t : trials) {
    on_pilot += std::string(t.at("node").as_string()).rfind("pilot-" + id + "-", 0) == 0;
  }
  CHECK(on_pilot > 0);
  // The study has no more work: the pilot leaves by itself, and its job ends well.
  std::string record;
  WaitFor(
      [&] {
        record = Slurm({"scontrol", "show", "job", "-o", id});
        return record.find("JobState=COMPLETED") != std::string::npos ||
               record.find("JobState=FAILED") != std::string::npos;
      },
      30);
  INFO(record);
  CHECK(record.find("JobState=COMPLETED") != std::string::npos);
  CHECK(record.find("ExitCode=0:0") != std::string::npos);
}

}  // namespace triald::testing
