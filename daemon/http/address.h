#pragma once
// The dashboard's listening address (--http, [daemon] http): "HOST:PORT" with HOST an IPv4
// address, "[IPv6]" or "localhost", or a bare PORT (then 127.0.0.1). Only a loopback address
// keeps the dashboard to this host; any other must be written out (there is no default that
// listens on the network) and the daemon warns when it starts.
//
// Thread-safety: pure functions.

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace triald::daemon::http {

struct ListenAddress {
  boost::asio::ip::address address;
  uint16_t port = 0;  // 0: any free port (tests)
  std::string host;   // as written ("localhost", "127.0.0.1", "::1")
  bool loopback() const { return address.is_loopback(); }
  // "http://127.0.0.1:8080" (IPv6 in brackets).
  std::string Url() const;
};

// Errors say what was wrong and what is expected.
common::Result<ListenAddress> ParseListenAddress(std::string_view text);

// Whether a request's Host header names this server in a way that a DNS-rebinding page cannot:
// an IP literal, "localhost" (any port), or the host the server was given. Refusing other
// names keeps a web page that points its own domain at 127.0.0.1 from reading the API.
bool HostAllowed(std::string_view host_header, const ListenAddress& listen);

}  // namespace triald::daemon::http
