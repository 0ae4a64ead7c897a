#pragma once
// A blocking HTTP/1.1 client for the dashboard tests: one request per connection
// ("Connection: close"), the answer read to the end, with a timeout.

#include <map>
#include <string>

#include "common/fd.h"

namespace triald::testing {

struct HttpAnswer {
  int status = 0;                              // 0: no status line came back
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string raw;
};

// A TCP connection to 127.0.0.1:`port`; fails the test when it cannot connect.
common::UniqueFd ConnectLoopback(int port);
// Sends `bytes` as they are, then reads until the server closes (or `timeout_s`).
HttpAnswer SendRaw(int port, const std::string& bytes, double timeout_s = 15);
// Reads whatever answer comes on `fd` until it closes (or `timeout_s`).
HttpAnswer ReadAnswer(int fd, double timeout_s = 15);
// METHOD target with an optional bearer token and body (JSON).
HttpAnswer Http(int port, const std::string& method, const std::string& target,
                const std::string& token = "", const std::string& body = "",
                const std::string& host = "127.0.0.1");

// The port in the log line "dashboard: http://127.0.0.1:PORT/"; fails the test when absent.
int DashboardPort(const std::string& daemon_log);

}  // namespace triald::testing
