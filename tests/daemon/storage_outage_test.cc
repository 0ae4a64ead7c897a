// Storage refusing writes (daemon/scheduler/storage_outage.h): the policy alone, then a scheduler
// on SQLite whose storage goes away (FlakyStorage: every call kUnavailable) while trials run, and
// one whose pass of starts cannot be committed.

#include "daemon/scheduler/storage_outage.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "daemon/control/verbs.h"
#include "daemon/scheduler.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"
#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using common::Status;
using model::TrialState;

TEST_CASE("storage outage: which refusals hold, the probe's back-off and the resume",
          "[scheduler][outage]") {
  CHECK(StorageOutage::IsOutage(common::IoError("database or disk is full")));
  CHECK(StorageOutage::IsOutage(common::Unavailable("connection refused")));
  CHECK_FALSE(StorageOutage::IsOutage(common::FailedPrecondition("trial 3 is finished")));
  CHECK_FALSE(StorageOutage::IsOutage(common::NotFound("no trial 9")));

  StorageOutage o;
  CHECK_FALSE(o.OnFailure(common::NotFound("no trial 9"), 10));
  CHECK_FALSE(o.held());
  REQUIRE(o.OnFailure(common::IoError("database or disk is full"), 10));
  CHECK(o.held());
  CHECK(o.OnFailure(common::IoError("another"), 10.5));
  CHECK(o.reason() == "database or disk is full");  // the first refusal names the outage
  CHECK(o.failures() == 2);
  CHECK_FALSE(o.ProbeDue(10.9));
  CHECK(o.RetryIn(10.5) == Approx(StorageOutage::kInitialDelay - 0.5));
  CHECK(o.ProbeDue(11));
  // Each failed probe doubles the wait, up to kMaxDelay.
  double now = 11;
  std::vector<double> waits;
  for (int i = 0; i < 7; ++i) {
    o.OnProbeFailure(now);
    waits.push_back(o.RetryIn(now));
    now += waits.back();
  }
  CHECK(waits == std::vector<double>{2, 4, 8, 16, 30, 30, 30});
  CHECK(o.OnSuccess());
  CHECK_FALSE(o.held());
  CHECK(o.reason().empty());
  CHECK(o.RetryIn(now) == 0);
  CHECK_FALSE(o.OnSuccess());
}

SchedulerHarnessOptions FlakyLocal() {
  SchedulerHarnessOptions o;
  o.flaky = true;  // SQLite in memory, not shared: a daemon with a storage of its own
  return o;
}

TEST_CASE("storage outage: trial ends are kept, nothing starts, and all is stored once it is back",
          "[scheduler][outage]") {
  SchedulerHarness h(FlakyLocal());
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.n_trials = 4;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 2);

  h.flaky().down = true;  // a full disk, a read-only remount, a database away
  l.Complete(l.launch(0), 0.5);
  CHECK(h.scheduler().storage_outage().held());
  CHECK(h.scheduler().storage_outage().reason() == "the database cannot be reached");
  l.Complete(l.launch(1), 0.25);
  h.scheduler().Pump();
  CHECK(l.launch_count() == 2);  // held: nothing starts, nothing is relaunched
  // Probes fail while it is away, each waiting longer.
  h.PassWait();
  h.PassWait();
  CHECK(l.launch_count() == 2);
  CHECK(h.scheduler().storage_outage().held());

  h.flaky().down = false;
  h.PassWait();  // the probe succeeds: the kept ends are stored, then trials start again
  CHECK_FALSE(h.scheduler().storage_outage().held());
  std::vector<TrialRecord> trials = h.Trials("study");
  REQUIRE(trials.size() >= 2);
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(*trials[0].value == 0.5);
  CHECK(trials[1].state == TrialState::kComplete);
  CHECK(*trials[1].value == 0.25);
  REQUIRE(l.launch_count() == 4);
  CHECK(l.launch(2).trial == 2);
  CHECK(l.launch(3).trial == 3);
  l.Complete(l.launch(2), 1);
  l.Complete(l.launch(3), 2);
  CHECK(h.State("study") == model::StudyState::kComplete);
  trials = h.Trials("study");
  REQUIRE(trials.size() == 4);  // every number once, none lost, none twice
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  auto events = h.storage().GetEvents(std::nullopt);
  REQUIRE(events.ok());
  bool resumed = false;
  for (const model::EventRecord& e : *events) resumed = resumed || e.kind == "storage_resumed";
  CHECK(resumed);
}

TEST_CASE("storage outage: reports and attributes are kept and stored once it is back",
          "[scheduler][outage]") {
  SchedulerHarness h(FlakyLocal());
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.n_trials = 2;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 2);
  Launched& running = l.launch(0);
  Launched& ending = l.launch(1);
  l.Report(running, 1, 0.5);

  h.flaky().down = true;
  l.Report(running, 2, 0.25);  // refused: kept, and the daemon holds
  CHECK(h.scheduler().storage_outage().held());
  l.Report(running, 3, 0.125);  // while held: kept without trying
  l.Attr(running, "epoch", "3");
  l.Report(ending, 1, 4.0);
  l.Complete(ending, 2.0);       // its end is kept too, after its report
  l.Report(running, 3, 0.0625);  // a step reported again: the last value wins
  CHECK(h.scheduler().pending_writes().size() == 5);
  h.PassWait();  // still away
  CHECK(h.scheduler().pending_writes().size() == 5);

  h.flaky().down = false;
  h.PassWait();  // back: the writes, then the kept end
  CHECK_FALSE(h.scheduler().storage_outage().held());
  CHECK(h.scheduler().pending_writes().size() == 0);
  std::vector<TrialRecord> trials = h.Trials("study");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].intermediate == std::map<int64_t, double>{{1, 0.5}, {2, 0.25}, {3, 0.0625}});
  CHECK(trials[0].attrs.at("epoch") == "3");
  CHECK(trials[1].state == TrialState::kComplete);
  CHECK(trials[1].intermediate == std::map<int64_t, double>{{1, 4.0}});
  // Writes after the outage go straight to storage again.
  l.Report(running, 4, 0.03125);
  CHECK(h.scheduler().pending_writes().size() == 0);
  CHECK(h.Trials("study")[0].intermediate.count(4) == 1);
}

TEST_CASE("storage outage: status of an active study is answered from memory",
          "[scheduler][outage]") {
  SchedulerHarness h(FlakyLocal());
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.n_trials = 4;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  l.Complete(l.launch(0), 0.5);
  VerbContext c;
  c.scheduler = &h.scheduler();
  c.storage = &h.storage();
  const Verb* status = FindVerb("status");
  REQUIRE(status != nullptr);
  auto stored = status->handler(c, {{"study", "study"}});
  REQUIRE(stored.ok());
  CHECK_FALSE(stored->as_object().contains("from_memory"));

  h.flaky().down = true;
  l.Complete(l.launch(1), 0.25);  // kept: storage is away
  auto memory = status->handler(c, {{"study", "study"}});
  REQUIRE(memory.ok());
  const boost::json::object& o = memory->as_object();
  CHECK_THAT(std::string(o.at("from_memory").as_string()),
             Catch::Contains("the database cannot be reached"));
  CHECK(o.at("state").as_string() == "RUNNING");
  CHECK(o.at("complete").as_int64() == 1);  // the kept end is not stored, nor counted yet
  CHECK(o.at("running").as_int64() == 2);   // the kept one, and the one started after the first
  CHECK(o.at("best").at("value").as_double() == 0.5);
  CHECK(o.at("storage").at("held").as_bool());
  // A study that is not active has no memory to answer from: the error is the reply.
  auto unknown = status->handler(c, {{"study", "elsewhere"}});
  CHECK_FALSE(unknown.ok());
}

// A daemon whose SQLite database is the file `path` (on a file system a test fills or breaks).
SchedulerHarnessOptions SqliteAt(const std::string& path) {
  SchedulerHarnessOptions o;
  o.sqlite = storage::SqliteOptions{};
  o.sqlite->path = path;
  return o;
}

// Six trials, three at a time.
Sweep SixTrials() {
  Sweep sweep;
  sweep.n_trials = 6;
  sweep.parallelism = 3;
  sweep.sampler = "kind = \"random\"\nseed = 1";
  return sweep;
}

// A small tmpfs (root only): the database's file system, filled and freed.
class SmallDisk {
 public:
  SmallDisk() {
    const std::string cmd = "mount -t tmpfs -o size=4m,mode=0700 triald-test " + dir_.path();
    mounted_ = std::system(cmd.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) (void)std::system(("umount -l " + dir_.path()).c_str());
  }
  bool mounted() const { return mounted_; }
  std::string File(const std::string& name) const { return dir_.path() + "/" + name; }
  // Fills what is left with a ballast file.
  void Fill() {
    std::FILE* f = std::fopen(File("ballast").c_str(), "ab");
    REQUIRE(f != nullptr);
    std::vector<char> block(4096, 'x');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }
  void Free() { std::remove(File("ballast").c_str()); }

 private:
  testing::TempDir dir_;
  bool mounted_ = false;
};

TEST_CASE("storage outage: a full disk stops the pass's starts and holds, freed, all is stored",
          "[scheduler][outage]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to mount a small tmpfs");
  SmallDisk disk;
  REQUIRE(disk.mounted());
  SchedulerHarness h(SqliteAt(disk.File("triald.db")));
  FakeLauncher& l = h.launcher();
  h.SubmitOk(SixTrials());
  REQUIRE(l.launch_count() == 3);
  l.Complete(l.launch(0), 0.5);  // stored before the disk fills
  const size_t before = l.launch_count();
  disk.Fill();
  // Trials end and start while the disk is full: nothing is launched twice under one number,
  // nothing that ran is lost.
  l.Complete(l.launch(1), 0.25);
  l.Complete(l.launch(2), 0.125);
  for (size_t i = before; i < l.launch_count(); ++i) {
    if (l.launch(i).live()) l.Complete(l.launch(i), 1.0);
  }
  CHECK(h.scheduler().storage_outage().held());
  const size_t while_full = l.launch_count();
  h.scheduler().Pump();
  CHECK(l.launch_count() == while_full);  // held: no relaunch loop

  disk.Free();
  h.PassWait();
  CHECK_FALSE(h.scheduler().storage_outage().held());
  for (int round = 0; round < 10 && h.State("study") == model::StudyState::kRunning; ++round) {
    for (size_t i = 0; i < l.launch_count(); ++i) {
      if (l.launch(i).live()) l.Complete(l.launch(i), 2.0);
    }
    h.scheduler().Pump();
  }
  CHECK(h.State("study") == model::StudyState::kComplete);
  std::vector<TrialRecord> trials = h.Trials("study");
  REQUIRE(trials.size() == 6);
  for (const TrialRecord& t : trials) {
    INFO("trial " << t.number);
    CHECK(t.state == TrialState::kComplete);
  }
  CHECK(*trials[0].value == 0.5);
  CHECK(*trials[1].value == 0.25);
  CHECK(*trials[2].value == 0.125);
}

// A 16 MiB ext4 image on a loop device (root only), mounted errors=remount-ro: the kernel makes
// it read-only when it meets an error, as after a failing disk, while the database is open.
class RemountingDisk {
 public:
  RemountingDisk() {
    const std::string image = dir_.File("disk.img");
    mount_ = dir_.File("mnt");
    ok_ = std::system(("truncate -s 16M " + image + " && mkfs.ext4 -q " + image + " && mkdir " +
                       mount_ + " && mount -o loop,errors=remount-ro " + image + " " + mount_)
                          .c_str()) == 0;
  }
  ~RemountingDisk() {
    if (ok_) (void)std::system(("umount -l " + mount_).c_str());
  }
  bool mounted() const { return ok_; }
  std::string File(const std::string& name) const { return mount_ + "/" + name; }
  const std::string& dir() const { return mount_; }
  // Makes ext4 record an error, which remounts it read-only (mount shows "emergency_ro").
  void Fail() {
    std::FILE* p = ::popen(("findmnt -no SOURCE " + mount_).c_str(), "r");
    REQUIRE(p != nullptr);
    char dev[256] = {};
    REQUIRE(std::fgets(dev, sizeof dev, p) != nullptr);
    ::pclose(p);
    std::string name(dev);
    name = name.substr(name.rfind('/') + 1);
    name.erase(name.find_last_not_of("\n") + 1);
    std::FILE* f = std::fopen(("/sys/fs/ext4/" + name + "/trigger_fs_error").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("storage outage test\n", f);
    std::fclose(f);
    REQUIRE(std::fopen(File("probe").c_str(), "w") == nullptr);  // read-only now
  }

 private:
  testing::TempDir dir_;
  std::string mount_;
  bool ok_ = false;
};

TEST_CASE("storage outage: a file system the kernel remounts read-only holds, nothing twice",
          "[scheduler][outage]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to mount a loop device");
  RemountingDisk disk;
  REQUIRE(disk.mounted());
  SchedulerHarness h(SqliteAt(disk.File("triald.db")));
  FakeLauncher& l = h.launcher();
  h.SubmitOk(SixTrials());
  REQUIRE(l.launch_count() == 3);
  l.Complete(l.launch(0), 0.5);  // stored before the file system fails
  REQUIRE(l.launch_count() == 4);
  disk.Fail();
  l.Complete(l.launch(1), 0.25);
  l.Complete(l.launch(2), 0.125);
  CHECK(h.scheduler().storage_outage().held());
  INFO(h.scheduler().storage_outage().reason());
  // SQLite's own words, and the system's: what an operator needs to see.
  CHECK_THAT(h.scheduler().storage_outage().reason(),
             Catch::Contains("disk I/O error (writing in " + disk.dir() +
                             " now fails: Read-only file system)"));
  const size_t while_failed = l.launch_count();
  for (int i = 0; i < 5; ++i) {
    h.clock().Advance(StorageOutage::kMaxDelay);
    h.PassWait();
  }
  CHECK(l.launch_count() == while_failed);  // held: no relaunch loop
  CHECK(h.scheduler().storage_outage().held());
  // What was stored before stays, and reads still work: the first trial's value.
  std::vector<TrialRecord> trials = h.Trials("study");
  REQUIRE(!trials.empty());
  CHECK(trials[0].state == TrialState::kComplete);
  REQUIRE(trials[0].value.has_value());
  CHECK(*trials[0].value == 0.5);
}

}  // namespace
}  // namespace triald::daemon
