#pragma once
// NodeRegistry: the daemons (nodes) that use a storage, with their heartbeats. Part of Storage
// (storage.h states the contract every part shares, shared storage included).
//
// Contract (tests/daemon/storage/node_registry_test.cc, on every backend):
// - A storage is opened with this daemon's node name and instance; Heartbeat records both.
// - GetNodes tells how long each node has been silent, by the storage's own clock.
//
// Thread-safety: implementations are not thread-safe (see storage.h).

#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::storage {

class NodeRegistry {
 public:
  virtual ~NodeRegistry() = default;

  // Whether other daemons may change this storage (see storage.h).
  virtual bool shared() const { return false; }
  // This daemon's node name, recorded by ClaimTrial and MarkRunning, and where it runs
  // (model::NodeRecord::instance), recorded by Heartbeat.
  virtual const std::string& node() const = 0;
  virtual const std::string& instance() const = 0;

  // Records that this node is alive (creating its row on first use), with the storage's
  // instance (see model::NodeRecord), at `at` (SQLite) or at the server's time (PostgreSQL).
  virtual common::Status Heartbeat(double at) = 0;
  // Every node that ever beat, with the seconds since its last heartbeat by the same clock
  // (`now` for SQLite).
  virtual common::Result<std::vector<model::NodeRecord>> GetNodes(double now) = 0;
};

}  // namespace triald::storage
