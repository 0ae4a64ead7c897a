#pragma once
// Client: a blocking connection to triald's control socket (protocol in proto/control.h).
//
// Thread-safety: one Client per thread.

#include <boost/json.hpp>
#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace triald::ctl {

class Client {
 public:
  // kUnavailable with a hint when nothing listens at `socket_path`.
  static common::Result<Client> Connect(const std::string& socket_path);

  // Sends one request and waits for its reply; a daemon-side error comes back as its Status.
  // A connection the daemon closed while it was idle (it closes connections that send no
  // request within its --request-timeout) is replaced by a new one first, so a client may wait
  // between calls as long as it likes.
  common::Result<boost::json::value> Call(const std::string& verb, boost::json::object args = {});

 private:
  bool ClosedByDaemon() const;
  // Reads one reply line; *answered says whether triald's reply (ok or not) was read.
  common::Result<boost::json::value> ReadReply(bool* answered);

  explicit Client(common::UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(path) {}
  common::UniqueFd fd_;
  std::string path_;
  std::string pending_;         // bytes read past the last reply
  bool answered_once_ = false;  // a reply came on this connection (it may since have idled out)
};

// The socket trialctl talks to: `flag` (--socket), else $TRIALD_SOCKET, else the first place
// of proto::SocketSearchOrder where a daemon answers (proto/socket_paths.h); kUnavailable
// listing the places tried when none does.
common::Result<std::string> ResolveSocket(const std::string& flag);

}  // namespace triald::ctl
