#pragma once
// Test databases on the PostgreSQL server of the `postgres` CTest fixture
// (scripts/pg_test_server.sh, registered in tests/CMakeLists.txt). A test that needs the server
// is registered with FIXTURES_REQUIRED postgres and TRIALD_TEST_PG=<admin URL> in its
// environment (${TRIALD_TEST_PG_PROPERTIES}); it then creates a database of its own, so tests
// running in parallel never see each other's studies.
//
// Every function here FAILs the running Catch test on error — a missing server is a failure,
// never a skip.
//
// Thread-safety: call from the test's thread.

#include <string>

namespace triald::testing {

// The admin URL (TRIALD_TEST_PG), e.g. postgresql://postgres@127.0.0.1:PORT/postgres.
std::string PostgresAdminUrl();

// Creates a fresh, uniquely named, empty UTF8 database and returns its URL. It is left on the
// server (which the fixture removes with everything in it); see TestDatabase to drop it.
std::string CreateTestDatabase();

// Runs `sql` on `url` and returns the first column of the first row as text ("" when there is
// no row or it is NULL).
std::string PostgresQuery(const std::string& url, const std::string& sql);

// A database for one test, dropped (with any sessions still connected) when it goes out of
// scope, unless TRIALD_TEST_KEEP is set.
class TestDatabase {
 public:
  TestDatabase();
  ~TestDatabase();
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;

  const std::string& url() const { return url_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string url_;
};

}  // namespace triald::testing
