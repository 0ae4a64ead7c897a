// AnswerClaim (daemon/control/answer_claim.h): exactly one answer to a request, the loop's or
// the server thread's from memory, whatever the order and the threads.
#include "daemon/control/answer_claim.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

namespace triald::daemon {
namespace {

TEST_CASE("AnswerClaim: the loop answers unless memory answered first, before or during its run",
          "[control]") {
  SECTION("the loop alone") {
    AnswerClaim c;
    CHECK(c.Open());
    CHECK(c.Takes());
    CHECK(c.Open());
    CHECK(c.Delivers());
    CHECK_FALSE(c.Open());
    CHECK_FALSE(c.AnswersFromMemory());
  }
  SECTION("memory before the loop got to it: the loop skips it") {
    AnswerClaim c;
    CHECK(c.AnswersFromMemory());
    CHECK_FALSE(c.Open());
    CHECK_FALSE(c.Takes());
    CHECK_FALSE(c.AnswersFromMemory());
  }
  SECTION("memory while the loop runs it: the loop's answer is dropped") {
    AnswerClaim c;
    CHECK(c.Takes());
    CHECK(c.AnswersFromMemory());
    CHECK_FALSE(c.Delivers());
  }
}

TEST_CASE("AnswerClaim: one answer when the loop and memory race on two threads", "[control]") {
  for (int i = 0; i < 2000; ++i) {
    AnswerClaim c;
    std::atomic<int> answers{0};
    std::thread loop([&] {
      if (c.Takes() && c.Delivers()) ++answers;
    });
    std::thread memory([&] {
      if (c.AnswersFromMemory()) ++answers;
    });
    loop.join();
    memory.join();
    REQUIRE(answers.load() == 1);
  }
}

}  // namespace
}  // namespace triald::daemon
