// CappedLog: a trial's stdout/stderr file that keeps the head and the tail of the output and
// says exactly how much was dropped in between, so a flooding worker cannot fill the disk.

#include "daemon/launcher/capped_log.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"

namespace triald::launcher {
namespace {

namespace fs = std::filesystem;
using common::Code;
using common::Result;

using triald::testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

// Deterministic bytes in which any window of a few bytes identifies its offset.
std::string Pattern(size_t size, uint32_t seed = 1) {
  std::string s(size, '\0');
  uint32_t x = seed;
  for (char& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>('a' + (x >> 24) % 26);
  }
  return s;
}

std::unique_ptr<CappedLog> MustOpen(const std::string& path, size_t head, size_t tail) {
  CappedLog::Options options;
  options.head_bytes = head;
  options.tail_bytes = tail;
  Result<std::unique_ptr<CappedLog>> log = CappedLog::Open(path, options);
  if (!log.ok()) FAIL(log.status().message());
  return std::move(log).value();
}

std::string Marker(uint64_t omitted) {
  return "[triald: " + std::to_string(omitted) + " bytes omitted]";
}

// Checks that `file` is data's first `head` bytes, a marker for exactly the bytes dropped, and
// data's last `tail` bytes, with nothing else but line breaks around the marker.
void CheckHeadMarkerTail(const std::string& file, const std::string& data, size_t head,
                         size_t tail) {
  REQUIRE(data.size() > head + tail);
  const uint64_t omitted = data.size() - head - tail;
  REQUIRE(file.size() >= head + tail);
  CHECK(file.compare(0, head, data, 0, head) == 0);
  CHECK(file.compare(file.size() - tail, tail, data, data.size() - tail, tail) == 0);
  std::string middle = file.substr(head, file.size() - head - tail);
  CHECK_THAT(middle, Catch::Contains(Marker(omitted)));
  CHECK(middle.size() <= Marker(omitted).size() + 2);
}

TEST_CASE("small output is written verbatim", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  auto log = MustOpen(path, 1024, 1024);
  log->Append("epoch 1 loss 0.9\n");
  log->Append("");
  log->Append("epoch 2 loss 0.7\n");
  CHECK(log->total_bytes() == 34);
  REQUIRE(log->Close().ok());
  CHECK(Slurp(path) == "epoch 1 loss 0.9\nepoch 2 loss 0.7\n");
}

TEST_CASE("the head is on disk while the worker is still running", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  auto log = MustOpen(path, 100, 8192);
  std::string data = Pattern(1000);
  log->Append(data.substr(0, 60));
  CHECK(Slurp(path) == data.substr(0, 60));
  log->Append(data.substr(60));
  CHECK(Slurp(path) == data.substr(0, 100));  // only the head until Close
  REQUIRE(log->Close().ok());
}

TEST_CASE("output of exactly head + tail bytes is kept whole with no marker", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  const size_t head = 10000, tail = 9000;
  std::string data = Pattern(head + tail);
  auto log = MustOpen(path, head, tail);
  for (size_t i = 0; i < data.size(); i += 777) log->Append(data.substr(i, 777));
  REQUIRE(log->Close().ok());
  CHECK(Slurp(path) == data);
}

TEST_CASE("output over head + tail keeps the head, the tail and an exact omitted count",
          "[capped_log]") {
  const size_t head = 16 * 1024, tail = 12 * 1024;
  std::string data = Pattern(200 * 1000 + 13);

  SECTION("in many odd-sized appends") {
    TempDir dir;
    std::string path = dir.File("stderr.log");
    auto log = MustOpen(path, head, tail);
    size_t i = 0;
    for (size_t n = 1; i < data.size(); n = n % 3001 + 7) {
      log->Append(data.substr(i, n));
      i += std::min(n, data.size() - i);
    }
    CHECK(log->total_bytes() == data.size());
    REQUIRE(log->Close().ok());
    CheckHeadMarkerTail(Slurp(path), data, head, tail);
  }
  SECTION("in one append") {
    TempDir dir;
    std::string path = dir.File("stderr.log");
    auto log = MustOpen(path, head, tail);
    log->Append(data);
    CHECK(log->total_bytes() == data.size());
    REQUIRE(log->Close().ok());
    CheckHeadMarkerTail(Slurp(path), data, head, tail);
  }
  SECTION("one byte over") {
    TempDir dir;
    std::string path = dir.File("stderr.log");
    std::string small = data.substr(0, head + tail + 1);
    auto log = MustOpen(path, head, tail);
    log->Append(small);
    REQUIRE(log->Close().ok());
    std::string file = Slurp(path);
    CheckHeadMarkerTail(file, small, head, tail);
    CHECK_THAT(file, Catch::Contains(Marker(1)));
  }
}

TEST_CASE("a tail cap below the in-memory minimum still bounds the file", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stderr.log");
  const size_t head = 50, tail = 100;
  std::string data = Pattern(50000, 7);
  auto log = MustOpen(path, head, tail);
  for (size_t i = 0; i < data.size(); i += 333) log->Append(data.substr(i, 333));
  REQUIRE(log->Close().ok());
  CheckHeadMarkerTail(Slurp(path), data, head, tail);
}

TEST_CASE("a zero head keeps only the tail", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stderr.log");
  std::string data = Pattern(30000, 3);
  auto log = MustOpen(path, 0, 1000);
  log->Append(data);
  REQUIRE(log->Close().ok());
  CheckHeadMarkerTail(Slurp(path), data, 0, 1000);
}

TEST_CASE("Tail returns the last bytes across many small appends", "[capped_log]") {
  TempDir dir;
  const size_t tail = 10000;
  auto log = MustOpen(dir.File("stderr.log"), 1000, tail);
  std::string all;
  for (int i = 0; i < 20000; ++i) {
    std::string piece = "line " + std::to_string(i) + (i % 7 == 0 ? "\n" : " ");
    all += piece;
    log->Append(piece);
    // Every append, since the kept window is trimmed only now and then.
    size_t n = std::min(tail, all.size());
    if (log->Tail(n) != all.substr(all.size() - n)) {
      FAIL("Tail(" << n << ") wrong after append " << i);
    }
  }
  CHECK(log->total_bytes() == all.size());
  CHECK(log->Tail(1) == all.substr(all.size() - 1));
  CHECK(log->Tail(100) == all.substr(all.size() - 100));
  CHECK(log->Tail(0).empty());
}

TEST_CASE("Tail returns everything when less than n was written", "[capped_log]") {
  TempDir dir;
  auto log = MustOpen(dir.File("stderr.log"), 1000, 4096);
  CHECK(log->Tail(100).empty());
  log->Append("Traceback (most recent call last):\n");
  log->Append("ValueError: bad lr\n");
  CHECK(log->Tail(4096) == "Traceback (most recent call last):\nValueError: bad lr\n");
  CHECK(log->Tail(19) == "ValueError: bad lr\n");
}

TEST_CASE("Tail survives a single append larger than the tail", "[capped_log]") {
  TempDir dir;
  auto log = MustOpen(dir.File("stderr.log"), 10, 10000);
  std::string data = Pattern(100000, 5);
  log->Append(data);
  log->Append("end\n");
  CHECK(log->Tail(10000) == (data + "end\n").substr(data.size() + 4 - 10000));
}

// Covers the header's promise with real volume: 100 MiB in 64 KiB chunks (a few hundred
// milliseconds of memcpy, no timing asserted).
TEST_CASE("a 100 MiB flood leaves a file no larger than head + tail + marker", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  CappedLog::Options defaults;
  const size_t head = defaults.head_bytes, tail = defaults.tail_bytes;
  Result<std::unique_ptr<CappedLog>> opened = CappedLog::Open(path, defaults);
  REQUIRE(opened.ok());
  std::unique_ptr<CappedLog> log = std::move(opened).value();

  const size_t chunk = 64 * 1024;
  const uint64_t total = 100ull * 1024 * 1024;
  std::string buf = Pattern(chunk, 11);
  std::string last_chunks;  // what the tail must hold
  for (uint64_t written = 0; written < total; written += chunk) {
    // Stamp each chunk with its index so that a tail from the wrong place cannot match.
    std::string stamp = "#" + std::to_string(written / chunk) + "#";
    buf.replace(0, stamp.size(), stamp);
    log->Append(buf);
    if (total - written <= tail) last_chunks += buf;
    if (written % (16 * chunk) == 0) REQUIRE(FileSize(path) <= head);
  }
  CHECK(log->total_bytes() == total);
  REQUIRE(log->Close().ok());

  const std::string marker = Marker(total - head - tail);
  uint64_t size = FileSize(path);
  CHECK(size <= head + tail + marker.size() + 2);
  CHECK(size >= head + tail);
  std::string file = Slurp(path);
  CHECK_THAT(file.substr(head, file.size() - head - tail), Catch::Contains(marker));
  REQUIRE(last_chunks.size() == tail);
  CHECK(file.compare(file.size() - tail, tail, last_chunks) == 0);
}

TEST_CASE("Close is idempotent and does not write the tail twice", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  std::string data = Pattern(50000, 9);
  auto log = MustOpen(path, 1000, 9000);
  log->Append(data);
  REQUIRE(log->Close().ok());
  std::string first = Slurp(path);
  CHECK(log->Close().ok());
  CHECK(log->Close().ok());
  log.reset();  // the destructor closes too
  CHECK(Slurp(path) == first);
  CheckHeadMarkerTail(first, data, 1000, 9000);
}

TEST_CASE("destroying an unclosed log still writes the tail", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  std::string data = Pattern(50000, 4);
  {
    auto log = MustOpen(path, 1000, 9000);
    log->Append(data);
  }
  CheckHeadMarkerTail(Slurp(path), data, 1000, 9000);
}

TEST_CASE("Open replaces what an earlier run left in the file", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("stdout.log");
  {
    std::ofstream old(path);
    old << "output of a previous attempt that was much longer than this one\n";
  }
  auto log = MustOpen(path, 1024, 1024);
  log->Append("new\n");
  REQUIRE(log->Close().ok());
  CHECK(Slurp(path) == "new\n");
}

TEST_CASE("Open in a missing directory gives an error naming the path", "[capped_log]") {
  TempDir dir;
  std::string path = dir.File("no-such-dir/trial-3/stdout.log");
  Result<std::unique_ptr<CappedLog>> log = CappedLog::Open(path, CappedLog::Options{});
  REQUIRE_FALSE(log.ok());
  CHECK(log.status().code() == Code::kIo);
  CHECK_THAT(log.status().message(), Catch::Contains(path));
}

TEST_CASE("a write failure is reported by Close", "[capped_log]") {
  // /dev/full accepts open() and fails every write with ENOSPC, like a full log disk.
  auto log = MustOpen("/dev/full", 100, 100);
  log->Append("this cannot be written\n");
  CHECK(log->total_bytes() == 23);
  common::Status st = log->Close();
  CHECK_FALSE(st.ok());
  CHECK(st.code() == Code::kIo);
  // And a second Close reports the same failure rather than pretending all went well.
  CHECK(log->Close().code() == Code::kIo);
}

// The free bytes of the file system that holds `path`.
uint64_t FreeBytes(const std::string& path) {
  struct statvfs vs {};
  REQUIRE(::statvfs(path.c_str(), &vs) == 0);
  return static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize;
}

TEST_CASE("the automatic log reserve is a tenth of the file system, within 8 and 256 MiB",
          "[capped_log][reserve]") {
  const uint64_t mib = 1 << 20;
  CHECK(CappedLog::ReserveFor(CappedLog::kAutoReserve, 20 * mib) == 8 * mib);
  CHECK(CappedLog::ReserveFor(CappedLog::kAutoReserve, 200 * mib) == 20 * mib);
  CHECK(CappedLog::ReserveFor(CappedLog::kAutoReserve, 1ull << 40) == 256 * mib);
  CHECK(CappedLog::ReserveFor(5 * mib, 4 * mib) == 5 * mib);  // as given
  CHECK(CappedLog::ReserveFor(0, 4 * mib) == 0);
}

TEST_CASE("a log writes nothing that would eat into the reserve kept for the database",
          "[capped_log][reserve]") {
  TempDir dir;
  const std::string path = dir.File("stdout.log");
  CappedLog::Options options;
  options.head_bytes = 1 << 20;
  options.tail_bytes = 1 << 16;
  // Over four times what this file system has free: not one byte may be written, not even the
  // note that output was dropped (it may use three quarters of the reserve).
  options.reserve_bytes = 4 * FreeBytes(dir.path()) + (1ull << 30);
  Result<std::unique_ptr<CappedLog>> log = CappedLog::Open(path, options);
  REQUIRE(log.ok());
  (*log)->Append(Pattern(300000));
  CHECK((*log)->total_bytes() == 300000);
  CHECK((*log)->Tail(10) == Pattern(300000).substr(300000 - 10));  // stderr_tail still works
  CHECK((*log)->Close().ok());  // not an error: the output was dropped on purpose
  CHECK(FileSize(path) == 0);
}

// A small tmpfs (root only) that the log fills up to its reserve.
TEST_CASE("on a small disk a flooding log stops at the reserve and says so",
          "[capped_log][reserve]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to mount a small tmpfs");
  TempDir dir;
  REQUIRE(std::system(("mount -t tmpfs -o size=4m triald-test " + dir.path()).c_str()) == 0);
  struct Unmount {
    std::string path;
    ~Unmount() { (void)std::system(("umount -l " + path).c_str()); }
  } unmount{dir.path()};
  const std::string path = dir.File("stdout.log");
  CappedLog::Options options;
  options.reserve_bytes = 1 << 20;
  options.head_bytes = 16 << 20;
  options.tail_bytes = 1 << 16;
  Result<std::unique_ptr<CappedLog>> log = CappedLog::Open(path, options);
  REQUIRE(log.ok());
  const std::string chunk = Pattern(64 * 1024, 3);
  for (int i = 0; i < 128; ++i) (*log)->Append(chunk);  // 8 MiB
  CHECK((*log)->Close().ok());
  CHECK(FreeBytes(dir.path()) >= (1 << 20) - 64 * 1024);
  const uint64_t size = FileSize(path);
  CHECK(size >= (2 << 20));  // it wrote until the reserve, not less
  CHECK(size <= (3 << 20) + 4096);
  const std::string file = Slurp(path);
  const uint64_t written = file.find("\n[triald: ");
  REQUIRE(written != std::string::npos);
  CHECK(written % chunk.size() == 0);  // whole appends, from the start
  CHECK(file.compare(0, chunk.size(), chunk) == 0);
  CHECK_THAT(file.substr(written),
             Catch::Contains("[triald: " + std::to_string((8ull << 20) - written) +
                             " bytes not written: they would have left less free space on this "
                             "file system than the reserve kept for the database]"));
}

}  // namespace
TEST_CASE("Open never follows a link and never waits on a FIFO at the log path",
          "[capped_log][security]") {
  TempDir dir;
  const std::string target = dir.Write("target", "keep me\n");
  const std::string link = dir.File("stdout.log");
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  Result<std::unique_ptr<CappedLog>> log = CappedLog::Open(link, CappedLog::Options{});
  CHECK_FALSE(log.ok());
  CHECK(Slurp(target) == "keep me\n");  // not truncated through the link

  const std::string fifo = dir.File("stderr.log");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  Result<std::unique_ptr<CappedLog>> on_fifo = CappedLog::Open(fifo, CappedLog::Options{});
  CHECK_FALSE(on_fifo.ok());  // ENXIO at once (no reader), instead of blocking the daemon
  CHECK_THAT(on_fifo.status().message(), Catch::Contains(fifo));
}

TEST_CASE("MakeLogDir: a folder of the daemon's, 0750 whatever the umask",
          "[capped_log][security]") {
  TempDir dir;
  const mode_t old_mask = ::umask(0);
  common::Status made = MakeLogDir(dir.File("studies/s/logs/3"));
  Result<std::unique_ptr<CappedLog>> log =
      CappedLog::Open(dir.File("studies/s/logs/3/stdout.log"), CappedLog::Options{});
  ::umask(old_mask);
  REQUIRE(made.ok());
  REQUIRE(log.ok());
  struct stat st {};
  REQUIRE(::stat(dir.File("studies/s/logs/3").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0750);
  REQUIRE(::stat(dir.File("studies/s/logs/3/stdout.log").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);

  // A link where the folder should be is refused, not followed.
  REQUIRE(::symlink(dir.path().c_str(), dir.File("studies/s/logs/4").c_str()) == 0);
  common::Status linked = MakeLogDir(dir.File("studies/s/logs/4"));
  CHECK(linked.code() == Code::kFailedPrecondition);
  CHECK_THAT(linked.message(), Catch::Contains("logs/4"));
}

}  // namespace triald::launcher
