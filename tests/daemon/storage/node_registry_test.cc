// The NodeRegistry contract (daemon/storage/node_registry.h), on every backend
// (backend_fixture.h).

#include "tests/daemon/storage/backend_fixture.h"

namespace triald::storage {
namespace {

using namespace contract;  // NOLINT: the suites' shared fixture

TEMPLATE_TEST_CASE("Heartbeat records this node and GetNodes how long it has been silent",
                   "[storage]", TRIALD_STORAGE_BACKENDS) {
  TestType backend;
  auto s = backend.Open();
  CHECK(Unwrap(s->GetNodes(1000)).empty());

  // SQLite measures with the caller's times, PostgreSQL with the server's clock (ignoring
  // them): the checks hold for both.
  REQUIRE_OK(s->Heartbeat(1000));
  auto first = Unwrap(s->GetNodes(1005));
  REQUIRE(first.size() == 1);
  CHECK(first[0].name == kNode);
  CHECK(first[0].instance == kInstance);
  CHECK(first[0].first_beat == first[0].last_beat);
  CHECK(first[0].silent_for >= 0);

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto later = Unwrap(s->GetNodes(1006));
  REQUIRE(later.size() == 1);
  CHECK(later[0].silent_for > first[0].silent_for);
  CHECK(later[0].last_beat == first[0].last_beat);

  REQUIRE_OK(s->Heartbeat(1010));
  auto beat = Unwrap(s->GetNodes(1010));
  REQUIRE(beat.size() == 1);
  CHECK(beat[0].first_beat == first[0].first_beat);
  CHECK(beat[0].last_beat > first[0].last_beat);
  CHECK(beat[0].silent_for >= 0);

  // Heartbeats inside a batch count too.
  REQUIRE_OK(s->BeginBatch());
  REQUIRE_OK(s->Heartbeat(1020));
  REQUIRE_OK(s->CommitBatch());
  CHECK(Unwrap(s->GetNodes(1020))[0].last_beat >= beat[0].last_beat);
}

TEMPLATE_TEST_CASE("a node name beaten for from elsewhere records the new instance", "[storage]",
                   SqliteFileBackend, PostgresBackend) {
  TestType backend;
  auto here = backend.Open();
  REQUIRE_OK(here->Heartbeat(1000));
  const NodeRecord before = Unwrap(here->GetNodes(1000)).at(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto elsewhere = backend.OpenAs(kNode, "host-b:/var/lib/triald");
  CHECK(elsewhere->instance() == "host-b:/var/lib/triald");
  REQUIRE_OK(elsewhere->Heartbeat(1030));
  std::vector<NodeRecord> nodes = Unwrap(here->GetNodes(1030));
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].instance == "host-b:/var/lib/triald");
  CHECK(nodes[0].first_beat > before.first_beat);  // a new daemon under the old name
}

}  // namespace
}  // namespace triald::storage
