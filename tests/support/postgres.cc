#include "tests/support/postgres.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

namespace triald::testing {
namespace {

using Conn = std::unique_ptr<PGconn, decltype(&PQfinish)>;

Conn Connect(const std::string& url) {
  Conn conn(PQconnectdb(url.c_str()), &PQfinish);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    FAIL("cannot connect to the test PostgreSQL server at " << url << ": "
                                                            << PQerrorMessage(conn.get()));
  }
  return conn;
}

// The admin URL with its database replaced by `db`.
std::string WithDatabase(const std::string& url, const std::string& db) {
  size_t scheme = url.find("://");
  size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  size_t query = url.find('?');
  std::string base = url.substr(0, std::min(path, query));
  std::string rest = query == std::string::npos ? "" : url.substr(query);
  return base + "/" + db + rest;
}

std::string NewDatabase() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  std::string name = "triald_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) +
                     "_" + std::to_string(rd() % 1000000);
  // template0 and an explicit encoding: independent of what template1 holds.
  PostgresQuery(PostgresAdminUrl(),
                "CREATE DATABASE " + name + " TEMPLATE template0 ENCODING 'UTF8'");
  return name;
}

}  // namespace

std::string PostgresAdminUrl() {
  const char* url = std::getenv("TRIALD_TEST_PG");
  if (url == nullptr || *url == '\0') {
    FAIL(
        "TRIALD_TEST_PG is not set: run this test through CTest, whose `postgres` fixture "
        "starts a server (scripts/pg_test_server.sh), or start one by hand and export its URL");
  }
  return url;
}

std::string PostgresQuery(const std::string& url, const std::string& sql) {
  Conn conn = Connect(url);
  std::unique_ptr<PGresult, decltype(&PQclear)> res(PQexec(conn.get(), sql.c_str()), &PQclear);
  ExecStatusType st = PQresultStatus(res.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    FAIL(sql << " on " << url << ": " << PQresultErrorMessage(res.get()));
  }
  if (st != PGRES_TUPLES_OK || PQntuples(res.get()) == 0 || PQnfields(res.get()) == 0 ||
      PQgetisnull(res.get(), 0, 0)) {
    return "";
  }
  return PQgetvalue(res.get(), 0, 0);
}

std::string CreateTestDatabase() { return WithDatabase(PostgresAdminUrl(), NewDatabase()); }

TestDatabase::TestDatabase()
    : name_(NewDatabase()), url_(WithDatabase(PostgresAdminUrl(), name_)) {}

TestDatabase::~TestDatabase() {
  if (std::getenv("TRIALD_TEST_KEEP") != nullptr) return;
  // No FAIL here (a destructor may run during unwinding): a database left behind is removed
  // with the server.
  const char* admin = std::getenv("TRIALD_TEST_PG");
  if (admin == nullptr) return;
  Conn conn(PQconnectdb(admin), &PQfinish);
  if (PQstatus(conn.get()) != CONNECTION_OK) return;
  std::string sql = "DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)";
  PQclear(PQexec(conn.get(), sql.c_str()));
}

}  // namespace triald::testing
