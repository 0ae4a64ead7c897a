#include "daemon/http/address.h"

#include <charconv>

namespace triald::daemon::http {
namespace ip = boost::asio::ip;

std::string ListenAddress::Url() const {
  const std::string a = address.to_string();
  return "http://" + (address.is_v6() ? "[" + a + "]" : a) + ":" + std::to_string(port);
}

namespace {

common::Status Bad(std::string_view text, const std::string& why) {
  return common::InvalidArgument("--http \"" + std::string(text) + "\": " + why +
                                 "; expected HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080, "
                                 "localhost:8080) or a port alone (127.0.0.1)");
}

}  // namespace

common::Result<ListenAddress> ParseListenAddress(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  std::string_view host = "127.0.0.1";
  std::string_view port_text = text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Bad(text, "an IPv6 address must be written [ADDRESS]:PORT");
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else if (size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return Bad(text, "an IPv6 address must be written in brackets");
    }
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535 ||
      port_text.empty()) {
    return Bad(text, "the port \"" + std::string(port_text) + "\" is not a number from 0 to 65535");
  }
  ListenAddress out;
  out.port = static_cast<uint16_t>(port);
  out.host = std::string(host);
  if (host == "localhost") {
    out.address = ip::make_address_v4("127.0.0.1");
    return out;
  }
  boost::system::error_code bad;
  out.address = ip::make_address(std::string(host), bad);
  if (bad) {
    return Bad(text, "\"" + std::string(host) +
                         "\" is not an IP address (host names other than localhost are not "
                         "resolved)");
  }
  return out;
}

bool HostAllowed(std::string_view host_header, const ListenAddress& listen) {
  std::string_view h = host_header;
  if (h.empty()) return false;
  if (h.front() == '[') {
    size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view rest = h.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    h = h.substr(1, close - 1);
    boost::system::error_code ec;
    (void)ip::make_address_v6(std::string(h), ec);
    return !ec;
  }
  if (size_t colon = h.rfind(':'); colon != std::string_view::npos) h = h.substr(0, colon);
  if (h == "localhost" || h == listen.host) return true;
  boost::system::error_code ec;
  (void)ip::make_address_v4(std::string(h), ec);
  return !ec;
}

}  // namespace triald::daemon::http
