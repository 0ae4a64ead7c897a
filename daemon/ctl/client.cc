#include "daemon/ctl/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "proto/control.h"
#include "proto/socket_paths.h"

namespace triald::ctl {
using common::Result;

Result<std::string> ResolveSocket(const std::string& flag) {
  return proto::FindDaemonSocket(flag, proto::SocketEnv::FromProcess(), proto::ProbeSocket);
}

Result<Client> Client::Connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return common::InvalidArgument("socket path \"" + path + "\" is too long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return common::ErrnoError("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    return common::Unavailable("cannot reach triald at " + path + ": " + std::strerror(err) +
                               " (is triald running? set --socket or TRIALD_SOCKET)");
  }
  return Client(std::move(fd), path);
}

bool Client::ClosedByDaemon() const {
  // Between requests the daemon sends nothing unasked: anything readable (end of stream, an
  // error) means it closed the connection, e.g. idle past --request-timeout. Only a connection
  // that has served a request is re-opened: one closed before its first request was refused
  // (or is not triald's), and a new one would not fare better.
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  return answered_once_ && pending_.empty() && ::poll(&p, 1, 0) > 0;
}

Result<boost::json::value> Client::Call(const std::string& verb, boost::json::object args) {
  if (ClosedByDaemon()) {
    TRIALD_ASSIGN_OR_RETURN(Client fresh, Connect(path_));
    *this = std::move(fresh);
  }
  std::string req = proto::EncodeRequest(verb, std::move(args));
  if (req.size() > proto::kMaxRequestBytes) {
    return common::InvalidArgument("the " + verb + " request is " + std::to_string(req.size()) +
                                   " bytes; triald takes at most " +
                                   std::to_string(proto::kMaxRequestBytes));
  }
  common::Status st = common::WriteAll(fd_.get(), req.data(), req.size());
  if (!st.ok()) {
    // triald may have refused the request and closed (EPIPE, with SIGPIPE ignored): its reply,
    // if one came, says why.
    bool answered = false;
    Result<boost::json::value> reply = ReadReply(&answered);
    if (answered && !reply.ok()) return reply;
    return common::Unavailable("sending to triald at " + path_ + ": " + st.message());
  }
  bool answered = false;
  return ReadReply(&answered);
}

Result<boost::json::value> Client::ReadReply(bool* answered) {
  std::string line;
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      break;
    }
    if (pending_.size() > proto::kMaxResponseBytes) {
      return common::Internal("reply from triald exceeds the size limit");
    }
    char buf[65536];
    ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return common::ErrnoError("reading from triald", errno);
    if (n == 0) return common::Unavailable("triald closed the connection");
    pending_.append(buf, static_cast<size_t>(n));
  }
  TRIALD_ASSIGN_OR_RETURN(proto::Response resp, proto::ParseResponse(line));
  *answered = true;
  answered_once_ = true;
  if (!resp.ok) return resp.error;
  return resp.result;
}

}  // namespace triald::ctl
