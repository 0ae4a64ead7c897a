// Status and Result<T>: the error values every component returns across its boundary.

#include "common/status.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace triald::common {
namespace {

TEST_CASE("a default Status is OK and prints as ok", "[common]") {
  Status st;
  CHECK(st.ok());
  CHECK(st.code() == Code::kOk);
  CHECK(st.message().empty());
  CHECK(st.ToString() == "ok");
  CHECK(Status::Ok().ok());
}

TEST_CASE("each Status helper carries its own code and the message", "[common]") {
  struct Case {
    Status status;
    Code code;
    const char* name;
  };
  std::vector<Case> cases = {
      {InvalidArgument("m"), Code::kInvalidArgument, "invalid_argument"},
      {NotFound("m"), Code::kNotFound, "not_found"},
      {AlreadyExists("m"), Code::kAlreadyExists, "already_exists"},
      {FailedPrecondition("m"), Code::kFailedPrecondition, "failed_precondition"},
      {Unavailable("m"), Code::kUnavailable, "unavailable"},
      {IoError("m"), Code::kIo, "io"},
      {Internal("m"), Code::kInternal, "internal"},
  };
  std::set<std::string> names;
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK_FALSE(c.status.ok());
    CHECK(c.status.code() == c.code);
    CHECK(c.status.message() == "m");
    CHECK(std::string(CodeName(c.code)) == c.name);
    // The log form names the code so that two failures with the same text can be told apart.
    CHECK(c.status.ToString() == std::string(c.name) + ": m");
    names.insert(CodeName(c.code));
  }
  CHECK(names.size() == cases.size());
}

TEST_CASE("WithContext prefixes the message and keeps the code", "[common]") {
  Status st = NotFound("no study \"mnist\"").WithContext("cancel");
  CHECK(st.code() == Code::kNotFound);
  CHECK(st.message() == "cancel: no study \"mnist\"");

  Status twice = st.WithContext("trialctl");
  CHECK(twice.message() == "trialctl: cancel: no study \"mnist\"");
  CHECK(twice.code() == Code::kNotFound);
}

TEST_CASE("WithContext on OK stays OK with no message", "[common]") {
  Status st = Status::Ok().WithContext("open");
  CHECK(st.ok());
  CHECK(st.message().empty());
}

TEST_CASE("ErrnoError is an I/O error naming the operation and the system's reason", "[common]") {
  Status st = ErrnoError("open /var/lib/triald/db", ENOENT);
  CHECK(st.code() == Code::kIo);
  CHECK(st.message() == std::string("open /var/lib/triald/db: ") + std::strerror(ENOENT));
}

TEST_CASE("Result holding a value gives it back through every accessor", "[common]") {
  Result<std::string> r(std::string("best"));
  REQUIRE(r.ok());
  CHECK(r.status().ok());
  CHECK(r.value() == "best");
  CHECK(*r == "best");
  CHECK(r->size() == 4);

  r.value() += "-trial";
  CHECK(*r == "best-trial");

  const Result<std::string>& cr = r;
  CHECK(cr.value() == "best-trial");
  CHECK(cr->size() == 10);
}

TEST_CASE("Result holding an error exposes that Status", "[common]") {
  Result<int> r(NotFound("no trial 7"));
  CHECK_FALSE(r.ok());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message() == "no trial 7");
}

TEST_CASE("Result built from an OK Status is an internal error, not a silent success", "[common]") {
  Result<int> r(Status::Ok());
  CHECK_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInternal);
  CHECK_FALSE(r.status().message().empty());
}

TEST_CASE("a move-only value can be moved out of a Result", "[common]") {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(42));
  REQUIRE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  REQUIRE(p != nullptr);
  CHECK(*p == 42);
}

TEST_CASE("value() of an error Result aborts and prints the error", "[common]") {
  int err_pipe[2];
  REQUIRE(::pipe(err_pipe) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(err_pipe[0]);
    ::signal(SIGABRT, SIG_DFL);  // not Catch's handler: the child must just die
    Result<int> r(NotFound("no study \"mnist\""));
    int v = r.value();  // must not return
    ::_exit(v == 0 ? 10 : 11);
  }
  ::close(err_pipe[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = ::read(err_pipe[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  ::close(err_pipe[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK_THAT(err, Catch::Contains("not_found: no study \"mnist\""));
}

// Helpers that use the propagation macros the way component code does. `reached` records
// whether the statement after the macro ran.
Result<int> Parse(bool good, int* calls) {
  ++*calls;
  if (!good) return InvalidArgument("bad number");
  return 7;
}

Status UseAssign(bool good, int* out, int* calls, bool* reached) {
  TRIALD_ASSIGN_OR_RETURN(int v, Parse(good, calls));
  *reached = true;
  *out = v;
  return Status::Ok();
}

Result<std::string> UseAssignInResult(bool good, int* calls) {
  TRIALD_ASSIGN_OR_RETURN(int v, Parse(good, calls));
  TRIALD_ASSIGN_OR_RETURN(int w, Parse(true, calls));  // a second use in the same scope
  return std::to_string(v + w);
}

Status Check(bool good, int* calls) {
  ++*calls;
  return good ? Status::Ok() : Unavailable("daemon not running");
}

Status UseReturnIfError(bool good, int* calls, bool* reached) {
  TRIALD_RETURN_IF_ERROR(Check(good, calls));
  *reached = true;
  return Status::Ok();
}

TEST_CASE("TRIALD_ASSIGN_OR_RETURN binds the value on success", "[common]") {
  int out = 0, calls = 0;
  bool reached = false;
  Status st = UseAssign(true, &out, &calls, &reached);
  CHECK(st.ok());
  CHECK(reached);
  CHECK(out == 7);
  CHECK(calls == 1);  // the expression is evaluated once
}

TEST_CASE("TRIALD_ASSIGN_OR_RETURN returns the error unchanged and skips the rest", "[common]") {
  int out = 0, calls = 0;
  bool reached = false;
  Status st = UseAssign(false, &out, &calls, &reached);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message() == "bad number");
  CHECK_FALSE(reached);
  CHECK(out == 0);
  CHECK(calls == 1);
}

TEST_CASE("TRIALD_ASSIGN_OR_RETURN works in a function returning Result", "[common]") {
  int calls = 0;
  Result<std::string> ok = UseAssignInResult(true, &calls);
  REQUIRE(ok.ok());
  CHECK(*ok == "14");
  CHECK(calls == 2);

  calls = 0;
  Result<std::string> bad = UseAssignInResult(false, &calls);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message() == "bad number");
  CHECK(calls == 1);  // the second Parse never ran
}

TEST_CASE("TRIALD_RETURN_IF_ERROR continues on OK and returns the error otherwise", "[common]") {
  int calls = 0;
  bool reached = false;
  CHECK(UseReturnIfError(true, &calls, &reached).ok());
  CHECK(reached);
  CHECK(calls == 1);

  calls = 0;
  reached = false;
  Status st = UseReturnIfError(false, &calls, &reached);
  CHECK(st.code() == Code::kUnavailable);
  CHECK(st.message() == "daemon not running");
  CHECK_FALSE(reached);
  CHECK(calls == 1);
}

}  // namespace
}  // namespace triald::common
