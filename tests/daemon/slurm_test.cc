// The Slurm executor's parts that run nothing (daemon/slurm/): the relay's frames, the srun
// command, job names, Slurm's job records and endings, the [executor] table, a Slurm trial's
// outcome, and SlurmLauncher around a fake launcher. The real cluster is tests/slurm/.

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/sweep.h"
#include "daemon/scheduler/launch_spec.h"
#include "daemon/scheduler/trial_outcome.h"
#include "daemon/slurm/slurm_cluster.h"
#include "daemon/slurm/slurm_job.h"
#include "daemon/slurm/slurm_launcher.h"
#include "tests/config/sweep_test_util.h"
#include "tests/daemon/fakes.h"
#include "tests/support/temp_dir.h"

namespace triald::slurm {
namespace {

using config::testing::ErrorOf;
using config::testing::Parsed;

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST_CASE("slurm frames carry any bytes, one line each, however the stream is cut", "[slurm]") {
  std::string payload;
  for (int c = 0; c < 256; ++c) payload.push_back(static_cast<char>(c));
  payload += "%0A%25\n\r\n";
  const std::string stream = EncodeFrame(FrameTag::kStdout, payload) +
                             EncodeFrame(FrameTag::kChannel, "{\"type\":\"final\"}\n") +
                             EncodeFrame(FrameTag::kStderr, "") +
                             EncodeFrame(FrameTag::kExit, "0 1024 0.5");
  // Each frame is one line: exactly four newlines, none inside a payload.
  CHECK(std::count(stream.begin(), stream.end(), '\n') == 4);
  for (size_t cut : {size_t{1}, size_t{3}, size_t{7}, stream.size()}) {
    FrameDecoder d;
    std::vector<Frame> frames;
    for (size_t i = 0; i < stream.size(); i += cut) {
      REQUIRE(d.Feed(std::string_view(stream).substr(i, cut), &frames).ok());
    }
    REQUIRE(frames.size() == 4);
    CHECK(frames[0].tag == FrameTag::kStdout);
    CHECK(frames[0].payload == payload);
    CHECK(frames[1].payload == "{\"type\":\"final\"}\n");
    CHECK(frames[2].tag == FrameTag::kStderr);
    CHECK(frames[2].payload.empty());
    CHECK(frames[3].payload == "0 1024 0.5");
    CHECK_FALSE(d.mid_frame());
  }
}

TEST_CASE("a stream that is not a relay's is refused, naming what was wrong", "[slurm]") {
  std::vector<Frame> frames;
  FrameDecoder a;
  common::Status st = a.Feed("srun: error: something\n", &frames);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("unknown frame tag") != std::string::npos);
  FrameDecoder b;
  st = b.Feed("O50%ZZ\n", &frames);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("bad escape %ZZ") != std::string::npos);
  // A line that never ends is not buffered without bound.
  FrameDecoder c;
  st = c.Feed("O" + std::string(3 * kMaxFramePayload + 8, 'x'), &frames);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("a line of more than") != std::string::npos);
}

TEST_CASE("srun's command carries the study's settings and ends with the relay and command",
          "[slurm]") {
  SrunRequest r;
  r.srun = "/usr/bin/srun";
  r.job_name = JobName("gpu-host", 42);
  r.comment = "triald study s trial 3";
  r.workdir = "/shared/project";
  r.gpus = 2;
  r.memory_bytes = (3ull << 30) + 1;  // rounds up to whole MiB
  r.trial_timeout_s = 600;
  r.kill_grace_s = 30;
  r.executor.partition = "gpu";
  r.executor.account = "ml";
  r.executor.qos = "high";
  r.executor.constraint = "a100,80gb";
  r.executor.cpus_per_trial = 8;
  r.executor.extra_args = {"--exclusive", "--nice=10"};
  r.relay = "/opt/triald/bin/triald-slurm-relay";
  r.command = {"/usr/bin/python3", "-m", "train"};
  const std::vector<std::string> argv = SrunArgv(r);
  REQUIRE(argv.size() > 6);
  CHECK(argv[0] == "/usr/bin/srun");
  for (const char* want :
       {"--job-name=triald.gpu-host.t42", "--comment=triald study s trial 3", "--ntasks=1",
        "--nodes=1", "--quiet", "--export=ALL", "--chdir=/shared/project", "--partition=gpu",
        "--account=ml", "--qos=high", "--constraint=a100,80gb", "--cpus-per-task=8", "--gres=gpu:2",
        "--mem=3073M", "--time=11", "--exclusive", "--nice=10"}) {
    INFO(want);
    CHECK(Has(argv, want));
  }
  // No terminal for the frames (srun --unbuffered gives the task one).
  CHECK_FALSE(Has(argv, "--unbuffered"));
  const std::vector<std::string> tail(argv.end() - 6, argv.end());
  CHECK(tail == std::vector<std::string>{"/opt/triald/bin/triald-slurm-relay", "run", "--",
                                         "/usr/bin/python3", "-m", "train"});
}

TEST_CASE("the job's time limit: time_limit, else trial_timeout plus kill_grace, in minutes",
          "[slurm]") {
  config::SlurmExecutorConfig e;
  CHECK(TimeLimitMinutes(e, 0, 10) == 0);      // none: the partition's
  CHECK(TimeLimitMinutes(e, 60, 0) == 1);      // one minute
  CHECK(TimeLimitMinutes(e, 61, 0) == 2);      // rounded up
  CHECK(TimeLimitMinutes(e, 3590, 30) == 61);  // the grace counts
  e.time_limit = 7200;
  CHECK(TimeLimitMinutes(e, 60, 10) == 120);  // time_limit wins
}

TEST_CASE("the daemon's [slurm] defaults fill what a study's [executor] leaves out", "[slurm]") {
  config::SlurmExecutorConfig e;
  e.partition = "mine";
  config::SlurmDefaults d{"gpu", "ml", "normal", "a100"};
  const config::SlurmExecutorConfig got = WithDefaults(e, d);
  CHECK(got.partition == "mine");  // the study's own wins
  CHECK(got.account == "ml");
  CHECK(got.qos == "normal");
  CHECK(got.constraint == "a100");
  CHECK(WithDefaults(e, {}).account.empty());
}

TEST_CASE("job names carry the node (cleaned) and the trial id", "[slurm]") {
  CHECK(JobName("host-1.example", 7) == "triald.host-1.example.t7");
  CHECK(JobName("a b/c|d", 7) == "triald.a_b_c_d.t7");
  CHECK(JobNamePrefix("n") == "triald.n.t");
  CHECK(JobName("n", 12).rfind(JobNamePrefix("n"), 0) == 0);
}

TEST_CASE("scontrol's one-line job record is read key by key", "[slurm]") {
  const auto f = ParseScontrolJob(
      "JobId=6 JobName=triald.n.t1 UserId=root(0) JobState=NODE_FAIL Reason=NodeDown "
      "Dependency=(null) ExitCode=0:0 NodeList=triald-node\n");
  CHECK(f.at("JobId") == "6");
  CHECK(f.at("JobState") == "NODE_FAIL");
  CHECK(f.at("Reason") == "NodeDown");
  CHECK(f.at("NodeList") == "triald-node");
  CHECK(ParseScontrolJob("").empty());
}

TEST_CASE("sacct's record of a job gives its peak memory, CPU and elapsed time", "[slurm]") {
  const auto a = ParseSacct(
      "12||01:02.500|00:01:05\n12.batch|2048K|00:00.100|00:01:05\n12.0|3M|01:02.400|00:01:04\n");
  REQUIRE(a.ok());
  CHECK(a->max_rss_bytes == 3u << 20);
  CHECK(*a->total_cpu_s == Approx(62.5));
  CHECK(*a->elapsed_s == Approx(65));
  CHECK(*ParseSlurmDuration("1-02:03:04") == Approx(86400 + 7384));
  CHECK(*ParseSlurmDuration("00:00.250") == Approx(0.25));
  CHECK_FALSE(ParseSlurmDuration("soon"));
  CHECK_FALSE(ParseSacct("").ok());
  CHECK_FALSE(ParseSacct("Slurm accounting storage is disabled\n").ok());
}

TEST_CASE("Slurm's endings become failure reasons retry_on can name", "[slurm]") {
  CHECK(FailureReason("PREEMPTED", false) == "preempted");
  CHECK(FailureReason("NODE_FAIL", false) == "node_failure");
  CHECK(FailureReason("BOOT_FAIL", false) == "node_failure");
  CHECK(FailureReason("TIMEOUT", false) == "slurm_time_limit");
  CHECK(FailureReason("DEADLINE", false) == "slurm_time_limit");
  CHECK(FailureReason("OUT_OF_MEMORY", false) == "slurm_oom");
  CHECK(FailureReason("CANCELLED", false) == "slurm_cancelled");
  // triald's own cancel (a stop), and endings the worker's exit already tells.
  CHECK_FALSE(FailureReason("CANCELLED", true));
  CHECK_FALSE(FailureReason("COMPLETED", false));
  CHECK_FALSE(FailureReason("FAILED", false));
  CHECK(JobStateIsActive("PENDING"));
  CHECK(JobStateIsActive("COMPLETING"));
  CHECK_FALSE(JobStateIsActive("CANCELLED"));
  const auto& retryable = config::RetryableReasons();
  for (const char* r : FailureReasons()) {
    INFO(r);
    CHECK(std::find_if(retryable.begin(), retryable.end(),
                       [&](const char* x) { return std::string(x) == r; }) != retryable.end());
  }
  // Preemption and a failed node are retried by default, as a lost trial is.
  const auto& by_default = config::DefaultRetryOn();
  CHECK(std::find(by_default.begin(), by_default.end(), "preempted") != by_default.end());
  CHECK(std::find(by_default.begin(), by_default.end(), "node_failure") != by_default.end());
}

// kMinimal with a timeout, a GPU per trial and an [executor] table for Slurm.
std::string SlurmSweepText() {
  return config::testing::With("n_trials = 10",
                               "n_trials = 10\ntrial_timeout = 120\ngpus_per_trial = 1") +
         R"(
[executor]
kind = "slurm"
partition = "gpu"
account = "ml"
time_limit = 3600
cpus_per_trial = 4
extra_args = ["--exclusive"]
)";
}

TEST_CASE("[executor] kind = \"slurm\" is read with its keys, and local is the default",
          "[slurm][config]") {
  const config::SweepSpec local = Parsed(config::testing::kMinimal);
  CHECK(local.executor.kind == "local");
  const config::SweepSpec s = Parsed(SlurmSweepText());
  CHECK(s.executor.kind == "slurm");
  CHECK(s.executor.slurm.partition == "gpu");
  CHECK(s.executor.slurm.account == "ml");
  CHECK(s.executor.slurm.time_limit == 3600);
  CHECK(s.executor.slurm.cpus_per_trial == 4);
  CHECK(s.executor.slurm.extra_args == std::vector<std::string>{"--exclusive"});
}

TEST_CASE("bad [executor] settings are refused naming the key", "[slurm][config]") {
  using config::testing::With;
  CHECK_THAT(ErrorOf(With("kind = \"slurm\"", "kind = \"k8s\"", SlurmSweepText())),
             Catch::Contains("[executor] kind") && Catch::Contains("one of local, slurm"));
  CHECK_THAT(ErrorOf(With("partition = \"gpu\"", "partition = \"a b\"", SlurmSweepText())),
             Catch::Contains("[executor] partition"));
  CHECK_THAT(ErrorOf(With("[\"--exclusive\"]", "[\"--job-name=x\"]", SlurmSweepText())),
             Catch::Contains("extra_args[0]") && Catch::Contains("--job-name is set by triald"));
  // srun takes unambiguous prefixes: --par would be --partition.
  CHECK_THAT(ErrorOf(With("[\"--exclusive\"]", "[\"--par=x\"]", SlurmSweepText())),
             Catch::Contains("--partition is set by triald"));
  CHECK_THAT(ErrorOf(With("[\"--exclusive\"]", "[\"-p\", \"x\"]", SlurmSweepText())),
             Catch::Contains("extra_args[0]") && Catch::Contains("not a long option"));
  CHECK_THAT(ErrorOf(With("[\"--exclusive\"]", "[\"--unbuffered\"]", SlurmSweepText())),
             Catch::Contains("--unbuffered is set by triald"));
  CHECK_THAT(ErrorOf(With("time_limit = 3600", "time_limit = 0", SlurmSweepText())),
             Catch::Contains("[executor] time_limit"));
  // A key of the slurm kind under kind = "local".
  CHECK_THAT(ErrorOf(With("kind = \"slurm\"", "kind = \"local\"", SlurmSweepText())),
             Catch::Contains("partition"));
  CHECK_THAT(ErrorOf(With("command = [\"true\"]",
                          "command = [\"true\"]\nfork_server = true\npreload = [\"json\"]",
                          SlurmSweepText())),
             Catch::Contains("fork_server"));
  CHECK_THAT(ErrorOf(With("gpus_per_trial = 1",
                          "gpus_per_trial = 1\nresource_constraints = [\"peak_memory <= 1G\"]",
                          SlurmSweepText())),
             Catch::Contains("measured metrics"));
}

TEST_CASE("the check at submit against sinfo: partition, default, availability, GPUs", "[slurm]") {
  const std::string sinfo =
      "debug*|up|gpu:2\nurgent|up|gpu:2\nbig|up|gpu:a100:8(S:0-1)\n"
      "cpu|up|(null)\nold|down|gpu:4\n";
  config::SweepSpec spec = Parsed(SlurmSweepText());
  auto check = [&](const std::string& partition, int gpus, const config::SlurmDefaults& d = {}) {
    spec.executor.slurm.partition = partition;
    spec.study.gpus_per_trial = gpus;
    return CheckAgainstSinfo(spec, "s.toml", d, sinfo);
  };
  CHECK(check("debug", 2).ok());
  CHECK(check("", 1).ok());  // the default partition
  CHECK(check("big", 8).ok());
  CHECK_THAT(check("nope", 1).message(),
             Catch::Contains("[executor] partition = \"nope\": no such partition (sinfo lists "
                             "debug, urgent, big, cpu, old)"));
  CHECK_THAT(check("", 1, {"nope", "", "", ""}).message(),
             Catch::Contains("(triald --config [slurm] partition): no such partition"));
  CHECK_THAT(check("cpu", 1).message(),
             Catch::Contains("[study] gpus_per_trial = 1 with [executor] kind = \"slurm\": "
                             "partition \"cpu\" has no GPUs"));
  CHECK(check("cpu", 0).ok());
  CHECK_THAT(check("debug", 3).message(), Catch::Contains("at most 2 GPU(s) per node"));
  CHECK_THAT(check("old", 1).message(), Catch::Contains("partition \"old\" is not up"));
}

TEST_CASE("the check at submit reads a snapshot of sinfo and never waits on a hung one",
          "[slurm]") {
  triald::testing::TempDir dir;
  const std::string relay = dir.Write("relay", "#!/bin/sh\n", 0755);
  std::mutex mu;
  std::condition_variable cv;
  bool hang = false;
  int calls = 0;
  SlurmCluster::Options o;
  o.srun = "/usr/bin/srun";
  o.relay = relay;
  o.refresh_s = 0.05;
  o.stale_after_s = 0.5;
  o.first_wait_s = 5;
  o.run = [&](const std::vector<std::string>& argv, double) -> common::Result<std::string> {
    CHECK(argv[0] == "/usr/bin/sinfo");
    std::unique_lock<std::mutex> lock(mu);
    ++calls;
    cv.wait(lock, [&] { return !hang; });
    return std::string("debug*|up|gpu:2\n");
  };
  SlurmCluster cluster(o);
  const config::SweepSpec spec = Parsed(SlurmSweepText());
  config::SweepSpec on_debug = spec;
  on_debug.executor.slurm.partition = "debug";
  REQUIRE(cluster.Check(on_debug, "s.toml").ok());  // waited for the first answer
  // sinfo hangs: checks answer at once from the snapshot, then refuse once it is stale.
  {
    std::lock_guard<std::mutex> lock(mu);
    hang = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  common::Status st = common::Status::Ok();
  while (st.ok() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    st = cluster.Check(on_debug, "s.toml");  // returns though sinfo hangs (else: no end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_THAT(st.message(), Catch::Contains("sinfo has not answered for"));
  {
    std::lock_guard<std::mutex> lock(mu);
    hang = false;
  }
  cv.notify_all();
  // Answering again: accepted again.
  const auto t1 = std::chrono::steady_clock::now();
  while (!cluster.Check(on_debug, "s.toml").ok() &&
         std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(cluster.Check(on_debug, "s.toml").ok());
  CHECK(calls >= 2);
}

TEST_CASE("a Slurm study's trial holds no local GPU slot and its spec names its job", "[slurm]") {
  const config::SweepSpec s = Parsed(SlurmSweepText());
  CHECK(daemon::LocalGpusPerTrial(s) == 0);
  CHECK(daemon::LocalGpusPerTrial(Parsed(
            config::testing::With("n_trials = 10", "n_trials = 10\ngpus_per_trial = 2"))) == 2);
  daemon::LaunchSettings settings;
  settings.state_dir = "/var/lib/triald";
  settings.node = "submit-1";
  model::TrialRecord trial;
  trial.id = 77;
  trial.number = 3;
  const launcher::LaunchSpec ls = daemon::MakeLaunchSpec(settings, "s", s, trial, {});
  REQUIRE(ls.slurm);
  CHECK(ls.slurm->job_name == "triald.submit-1.t77");
  CHECK(ls.slurm->gpus == 1);
  CHECK(ls.slurm->executor.partition == "gpu");
  CHECK(ls.slurm->comment == "triald study s trial 3");
  CHECK_FALSE(
      daemon::MakeLaunchSpec(settings, "s", Parsed(config::testing::kMinimal), trial, {}).slurm);
}

TEST_CASE("Slurm's ending is the trial's failure reason, unless triald stopped it",
          "[slurm][outcome]") {
  daemon::TrialObservation seen;
  seen.process.exit.code = 1;
  seen.process.executor_failure = "preempted";
  seen.process.executor_detail = "Slurm ended job 9 on n1: PREEMPTED";
  model::TrialOutcome out = daemon::ClassifyExit(seen);
  CHECK(out.state == model::TrialState::kFail);
  CHECK(out.fail.reason == "preempted");
  CHECK(out.fail.detail.rfind("Slurm ended job 9 on n1: PREEMPTED", 0) == 0);
  // A cancel of triald's own says cancelled, whatever Slurm recorded.
  seen.process.stop_reason = launcher::StopReason::kCancel;
  CHECK(daemon::ClassifyExit(seen).fail.reason == "cancelled");
}

// What SlurmLauncher hands the local launcher, and what it makes of the bridge's reports.
TEST_CASE("SlurmLauncher runs a Slurm trial's bridge locally and reads Slurm's word from it",
          "[slurm]") {
  triald::testing::FakeLauncher local;
  SlurmLauncher::Options o;
  o.local = &local;
  o.relay = "/opt/bin/triald-slurm-relay";
  o.srun = "/usr/bin/srun";
  SlurmLauncher sl(o);

  launcher::LaunchSpec spec;
  spec.executable = "/usr/bin/python3";
  spec.argv = {"python3", "obj.py"};
  spec.workdir = "/shared/w";
  spec.memory_limit_bytes = 1 << 30;
  spec.pids_limit = 100;
  spec.timeout_s = 60;
  spec.env = {"TRIALD_STUDY=s", "TRIALD_TRIAL=0"};

  SECTION("a local trial passes through untouched, and marks nothing") {
    triald::testing::TempDir dir;
    o.marker = SlurmMarker(dir.path());
    SlurmLauncher marked(o);
    REQUIRE(marked.Launch(spec, {}).ok());
    CHECK(local.launch(0).spec.executable == "/usr/bin/python3");
    CHECK_FALSE(std::filesystem::exists(o.marker));
    // The first Slurm trial marks the state directory: a restart looks for its jobs.
    spec.slurm = launcher::SlurmJob{{}, 0, "triald.n.t6", "c"};
    REQUIRE(marked.Launch(spec, {}).ok());
    CHECK(std::filesystem::exists(o.marker));
  }

  SECTION("a Slurm trial becomes its bridge; the job's limits are Slurm's") {
    spec.slurm = launcher::SlurmJob{{}, 1, "triald.n.t5", "c"};
    std::vector<launcher::ProcessOutcome> exits;
    launcher::TrialCallbacks cb;
    cb.on_exit = [&](const launcher::ProcessOutcome& out) { exits.push_back(out); };
    std::vector<proto::ReportMessage> seen;
    cb.on_message = [&](const proto::ReportMessage& m) { seen.push_back(m); };
    REQUIRE(sl.Launch(spec, cb).ok());
    const launcher::LaunchSpec& bridge = local.launch(0).spec;
    CHECK(bridge.executable == "/opt/bin/triald-slurm-relay");
    CHECK_FALSE(bridge.slurm);
    CHECK(bridge.memory_limit_bytes == 0);
    CHECK(bridge.pids_limit == 0);
    CHECK(bridge.timeout_s == 60);  // triald still stops it at trial_timeout
    CHECK(bridge.env == spec.env);
    CHECK(Has(bridge.argv, "--mem=1024M"));
    CHECK(Has(bridge.argv, "--gres=gpu:1"));
    CHECK(Has(bridge.argv, "--job-name=triald.n.t5"));
    CHECK(bridge.argv.back() == "obj.py");
    CHECK(*(bridge.argv.end() - 2) == "/usr/bin/python3");  // the resolved executable

    proto::ReportMessage attr;
    attr.type = proto::ReportType::kAttr;
    attr.key = kSlurmAttr;
    attr.json_value = R"({"job_id":"9","state":"NODE_FAIL","reason":"NodeDown","node":"n1",)"
                      R"("ending":"node_failure","peak_memory_bytes":"2048","cpu_time_s":"1.5",)"
                      R"j("accounting":"none (sacct: sacct exited with code 1)"})j";
    local.launch(0).callbacks.on_message(attr);
    CHECK(seen.size() == 1);  // stored as any attribute
    launcher::ProcessOutcome out;
    out.exit.code = 1;
    out.resources.peak_memory_bytes = 999;  // the bridge's own, not the trial's
    out.resources.memory_source = "cgroup";
    out.resources.wall_s = 3;
    local.launch(0).callbacks.on_exit(out);
    REQUIRE(exits.size() == 1);
    CHECK(exits[0].executor_failure == "node_failure");
    CHECK(exits[0].executor_detail == "Slurm ended job 9 on n1: NODE_FAIL (NodeDown)");
    CHECK(exits[0].resources.peak_memory_bytes == 2048u);
    // No Slurm accounting on that cluster: the relay's count, and the views say why.
    CHECK_THAT(exits[0].resources.memory_source,
               Catch::Contains("getrusage") && Catch::Contains("sacct exited with code 1"));
    CHECK(exits[0].resources.cpu_time_s == 1.5);
    CHECK(exits[0].resources.wall_s == 3.0);
  }

  SECTION("an ending that is not one of Slurm's is not a failure reason") {
    spec.slurm = launcher::SlurmJob{{}, 0, "triald.n.t5", "c"};
    std::vector<launcher::ProcessOutcome> exits;
    launcher::TrialCallbacks cb;
    cb.on_exit = [&](const launcher::ProcessOutcome& out) { exits.push_back(out); };
    REQUIRE(sl.Launch(spec, cb).ok());
    proto::ReportMessage attr;
    attr.type = proto::ReportType::kAttr;
    attr.key = kSlurmAttr;
    attr.json_value = R"({"ending":"lost","peak_memory_bytes":"lots"})";
    local.launch(0).callbacks.on_message(attr);
    local.launch(0).callbacks.on_exit(launcher::ProcessOutcome{});
    REQUIRE(exits.size() == 1);
    CHECK(exits[0].executor_failure.empty());
    CHECK_FALSE(exits[0].resources.peak_memory_bytes);
  }

  SECTION("without srun a Slurm trial does not start, and says why") {
    o.srun = "";
    SlurmLauncher none(o);
    spec.slurm = launcher::SlurmJob{};
    launcher::LaunchResult r = none.Launch(spec, {});
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("srun is not installed"));
    CHECK(local.launch_count() == 0);
  }
}

}  // namespace
}  // namespace triald::slurm
