// StudyAdmission (daemon/scheduler/admission.h): what is checked of a sweep at submit and when a
// stored study is loaded again, through a fake environment (no file system).

#include "daemon/scheduler/admission.h"

#include <catch2/catch.hpp>
#include <string>

#include "daemon/devices/gpu_pool.h"
#include "tests/daemon/fake_scheduler_env.h"

namespace triald::daemon {
namespace {

std::string Sweep(const std::string& objective, const std::string& study_extra = "") {
  return "[study]\nname = \"a\"\nn_trials = 3\n" + study_extra + "\n[objective]\n" + objective +
         "\n[space.x]\ntype = \"float\"\nlow = 0\nhigh = 1\n";
}

const model::Submitter kAlice{1001, "alice"};

StudyAdmission Admission(testing::FakeSchedulerEnv& env, devices::GpuPool* gpus = nullptr) {
  StudyAdmission::Options o;
  o.env = &env;
  o.gpus = gpus;
  o.base_env = {"PATH=/usr/bin"};
  return StudyAdmission(std::move(o));
}

TEST_CASE("admission: a sweep whose command resolves is admitted", "[scheduler][admission]") {
  testing::FakeSchedulerEnv env;
  auto spec = Admission(env).Admit(
      {Sweep("kind = \"exec\"\ncommand = [\"train\", \"--fast\"]"), "/s/a.toml"}, kAlice);
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->study.name == "a");
  CHECK(env.prepared == 1);
}

TEST_CASE("admission: errors name the sweep file, the key and what was expected",
          "[scheduler][admission]") {
  testing::FakeSchedulerEnv env;
  SECTION("a missing executable") {
    env.missing_executables = {"train"};
    auto spec = Admission(env).Admit({Sweep("kind = \"exec\"\ncommand = [\"train\"]"), "/s/a.toml"},
                                     kAlice);
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.status().code() == common::Code::kInvalidArgument);
    CHECK_THAT(
        spec.status().message(),
        Catch::StartsWith("/s/a.toml: [objective] command[0] = \"train\": train not found") &&
            Catch::EndsWith("expected an executable"));
  }
  SECTION("a missing workdir, before anything else") {
    env.missing_workdirs = {"/nowhere"};
    env.missing_executables = {"train"};
    auto spec = Admission(env).Admit(
        {Sweep("kind = \"exec\"\ncommand = [\"train\"]\nworkdir = \"/nowhere\""), ""}, kAlice);
    REQUIRE_FALSE(spec.ok());
    CHECK_THAT(spec.status().message(), Catch::StartsWith("<sweep>: [objective] workdir"));
    CHECK(env.prepared == 0);
  }
  SECTION("more GPUs per trial than the daemon has") {
    auto spec = Admission(env).Admit(
        {Sweep("kind = \"exec\"\ncommand = [\"train\"]", "gpus_per_trial = 2\n"), "/s/a.toml"},
        kAlice);
    REQUIRE_FALSE(spec.ok());
    CHECK_THAT(spec.status().message(),
               Catch::Contains("[study] gpus_per_trial = 2: triald has no GPUs") &&
                   Catch::EndsWith("expected at most 0"));
  }
}

TEST_CASE("admission: GPUs within the pool are admitted, peak_gpu_memory needs a probe",
          "[scheduler][admission]") {
  testing::FakeSchedulerEnv env;
  devices::GpuPoolOptions po;
  po.gpus = {0, 1};
  devices::GpuPool pool(po);
  StudyAdmission admission = Admission(env, &pool);
  CHECK(admission
            .Admit({Sweep("kind = \"exec\"\ncommand = [\"train\"]", "gpus_per_trial = 2\n"), ""},
                   kAlice)
            .ok());
  auto measured = admission.Admit(
      {Sweep("kind = \"exec\"\ncommand = [\"train\"]",
             "gpus_per_trial = 1\nresource_constraints = [\"peak_gpu_memory <= 1M\"]\n"),
       ""},
      kAlice);
  REQUIRE_FALSE(measured.ok());
  CHECK_THAT(measured.status().message(), Catch::Contains("triald cannot measure GPU memory"));
}

TEST_CASE("admission: a stored study is readmitted without the submit-time file checks",
          "[scheduler][admission]") {
  testing::FakeSchedulerEnv env;
  model::StudyRecord rec;
  rec.spec_toml = Sweep("kind = \"exec\"\ncommand = [\"train\"]\nworkdir = \"/gone\"");
  rec.spec_path = "/s/a.toml";
  // The workdir and executable may be gone since: that is a failure to start each trial.
  env.missing_workdirs = {"/gone"};
  env.missing_executables = {"train"};
  auto spec = Admission(env).Readmit(rec);
  INFO(spec.status().ToString());
  CHECK(spec.ok());
  CHECK(env.prepared == 1);
}

TEST_CASE("admission: a root daemon checks the files as the submitter first",
          "[scheduler][admission]") {
  testing::FakeSchedulerEnv env;
  env.as_root = true;
  auto spec = Admission(env).Admit({Sweep("kind = \"exec\"\ncommand = [\"train\"]"), ""}, kAlice);
  REQUIRE(spec.ok());
  CHECK(env.checked_as == std::vector<uid_t>{1001});
  CHECK(env.prepared == 2);  // as alice, then as the daemon (which fills in the commands)
  // A submitter who is root, or unknown, has the daemon's rights: one pass.
  env.checked_as.clear();
  REQUIRE(
      Admission(env)
          .Admit({Sweep("kind = \"exec\"\ncommand = [\"train\"]"), ""}, model::Submitter{0, "root"})
          .ok());
  CHECK(env.checked_as.empty());
  // What the submitter's pass refuses is the answer; the daemon's pass never runs.
  env.missing_executables = {"train"};
  env.prepared = 0;
  auto refused =
      Admission(env).Admit({Sweep("kind = \"exec\"\ncommand = [\"train\"]"), ""}, kAlice);
  REQUIRE_FALSE(refused.ok());
  CHECK(env.prepared == 1);
}

TEST_CASE("resuming a study needs its directions, space and objective", "[admission]") {
  auto spec = [](const std::string& study_extra, const std::string& space,
                 const std::string& command) {
    common::Result<config::SweepSpec> s = config::ParseSweep(
        {"[study]\nname = \"s\"\nn_trials = 3\n" + study_extra +
             "\n[objective]\nkind = \"exec\"\ncommand = " + command + "\n" + space,
         "/w/s.toml",
         {}});
    INFO(s.status().ToString());
    REQUIRE(s.ok());
    return *s;
  };
  const std::string x = "[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";
  const std::string wider = "[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 2.0\n";
  const std::string y = "[space.y]\ntype = \"int\"\nlow = 1\nhigh = 3\n";
  const config::SweepSpec base = spec("", x, R"(["/bin/true"])");
  // n_trials and other settings may change; what the trials mean may not.
  CHECK(
      StudyAdmission::ResumeMismatch(base, spec("parallelism = 4", x, R"(["/bin/true"])")).empty());
  CHECK(StudyAdmission::ResumeMismatch(base, spec("", wider, R"(["/bin/true"])")) ==
        "[space.x] " + config::DistributionText(base.space[0].dist) + " then, " +
            config::DistributionText(spec("", wider, R"(["/bin/true"])").space[0].dist) + " now");
  CHECK(StudyAdmission::ResumeMismatch(base, spec("", x + y, R"(["/bin/true"])")) ==
        "[space.y] is new");
  CHECK(StudyAdmission::ResumeMismatch(spec("", x + y, R"(["/bin/true"])"), base) ==
        "[space.y] is gone");
  CHECK(StudyAdmission::ResumeMismatch(base, spec("", x, R"(["/bin/false"])")) ==
        "[objective] command \"/bin/true\" then, \"/bin/false\" now");
  CHECK(StudyAdmission::ResumeMismatch(base,
                                       spec("direction = \"maximize\"", x, R"(["/bin/true"])")) ==
        "directions [minimize] then, [maximize] now");
}

}  // namespace
}  // namespace triald::daemon
