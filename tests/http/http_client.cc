#include "tests/http/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <regex>

namespace triald::testing {

common::UniqueFd ConnectLoopback(int port) {
  common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

HttpAnswer ReadAnswer(int fd, double timeout_s) {
  HttpAnswer out;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.raw.append(buf, static_cast<size_t>(n));
  }
  const size_t head_end = out.raw.find("\r\n\r\n");
  if (out.raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return out;
  out.status = std::stoi(out.raw.substr(9, 3));
  size_t pos = out.raw.find("\r\n") + 2;
  while (pos < head_end) {
    size_t eol = out.raw.find("\r\n", pos);
    std::string line = out.raw.substr(pos, eol - pos);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      out.headers[name] = value;
    }
    pos = eol + 2;
  }
  out.body = out.raw.substr(head_end + 4);
  return out;
}

HttpAnswer SendRaw(int port, const std::string& bytes, double timeout_s) {
  common::UniqueFd fd = ConnectLoopback(port);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early (an oversized request)
    off += static_cast<size_t>(n);
  }
  return ReadAnswer(fd.get(), timeout_s);
}

HttpAnswer Http(int port, const std::string& method, const std::string& target,
                const std::string& token, const std::string& body, const std::string& host) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + host + ":" +
                    std::to_string(port) + "\r\nConnection: close\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty() || method == "POST") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  return SendRaw(port, req);
}

int DashboardPort(const std::string& daemon_log) {
  std::smatch m;
  const std::regex line("dashboard: http://127\\.0\\.0\\.1:([0-9]+)/");
  INFO(daemon_log);
  REQUIRE(std::regex_search(daemon_log, m, line));
  return std::stoi(m[1].str());
}

}  // namespace triald::testing
