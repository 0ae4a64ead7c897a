// The layout of a state directory's study folders (daemon/model/records.h): every path below
// STATE_DIR/studies/ comes from these functions, absolute or relative to the state directory.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "daemon/model/records.h"

namespace triald::model {

TEST_CASE("the study folders' layout, absolute and relative to the state directory",
          "[daemon][layout]") {
  CHECK(std::string(kStudiesFolder) == "studies");
  CHECK(StudiesDir("/srv/triald") == "/srv/triald/studies/");
  CHECK(StudyDir("/srv/triald", "mnist") == "/srv/triald/studies/mnist");
  CHECK(TrialDir("/srv/triald", "mnist", 7) == "/srv/triald/studies/mnist/trials/7");
  CHECK(TrialLogDir("/srv/triald", "mnist", 7) == "/srv/triald/studies/mnist/logs/7");
  CHECK(ForkServerLog("/srv/triald", "mnist") == "/srv/triald/studies/mnist/fork-server.log");
  CHECK(TrialRelativeDir("mnist", 7) == "studies/mnist/trials/7");
  CHECK(TrialLogRelativeDir("mnist", 7) == "studies/mnist/logs/7");
  CHECK(TrialDirComponents("mnist", 7) ==
        std::vector<std::string>{"studies", "mnist", "trials", "7"});
}

TEST_CASE("each relative form names the same folder as its absolute form", "[daemon][layout]") {
  const std::string state = "/var/lib/triald";
  CHECK(state + "/" + TrialRelativeDir("s-1", 0) == TrialDir(state, "s-1", 0));
  CHECK(state + "/" + TrialLogRelativeDir("s-1", 12) == TrialLogDir(state, "s-1", 12));
  std::string joined = state;
  for (const std::string& part : TrialDirComponents("s-1", 3)) joined += "/" + part;
  CHECK(joined == TrialDir(state, "s-1", 3));
  CHECK(TrialDir(state, "s-1", 3).rfind(StudyDir(state, "s-1") + "/", 0) == 0);
  CHECK(StudyDir(state, "s-1").rfind(StudiesDir(state), 0) == 0);
}

}  // namespace triald::model
