// The read verbs on a study larger than one page: `trials` and `export` are streamed a page at a
// time (and `trials` pages by offset and limit), `studies`, `status` and `best` come from the
// storage's counting and best-trial queries. Runs the verb table in-process on SQLite in memory.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/json.h"
#include "daemon/control/verbs.h"
#include "daemon/storage/sqlite_storage.h"

namespace triald::daemon {
namespace {

namespace json = boost::json;
using model::TrialState;

constexpr int kReadTrials = 600;  // more than two pages (kTrialsPerPiece)

struct ReadFixture {
  std::unique_ptr<storage::Storage> storage;
  VerbContext context;
  int64_t study_id = 0;

  // `long_curve`: trials 300 and kReadTrials - 3 (the best) report that many intermediate values.
  explicit ReadFixture(int64_t long_curve = 0) {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(*opened);
    context.storage = storage.get();
    context.state_dir = "/nonexistent";
    model::NewStudy ns;
    ns.name = "big";
    ns.direction = config::Direction::kMinimize;
    ns.n_trials = kReadTrials;
    ns.spec_toml = "[study]\n";
    ns.spec_path = "/big.toml";
    auto study = storage->CreateStudy(ns, 1);
    REQUIRE(study.ok());
    study_id = study->id;
    config::Distribution d;
    d.type = config::ParamType::kFloat;
    d.low = 0;
    d.high = 1000;
    REQUIRE(storage->BeginBatch().ok());
    for (int i = 0; i < kReadTrials; ++i) {
      auto t = storage->CreateTrial(study_id, {{"x", {static_cast<double>(i), d}}}, 10);
      REQUIRE(t.ok());
      if (i % 3 == 2) continue;  // WAITING
      REQUIRE(storage->MarkRunning(t->id, {100, 100, 1}, 20).ok());
      REQUIRE(storage->AddIntermediate(t->id, 0, 1.0).ok());
      if (i == 300 || i == kReadTrials - 3) {
        for (int64_t step = 1; step < long_curve; ++step) {
          REQUIRE(storage->AddIntermediate(t->id, step, 0.5).ok());
        }
      }
      model::TrialOutcome o;
      o.state = i % 3 == 0 ? TrialState::kComplete : TrialState::kPruned;
      o.value = 1000.0 - i;  // the best (lowest) is the last COMPLETE trial
      REQUIRE(storage->FinishTrial(t->id, o, 22).ok());
    }
    REQUIRE(storage->CommitBatch().ok());
  }

  json::value Call(const std::string& verb, json::object args = {}) {
    args["study"] = "big";
    auto r = HandleVerb(context, verb, args);
    INFO(verb << ": " << r.status().ToString());
    REQUIRE(r.ok());
    return std::move(*r);
  }
};

std::vector<int64_t> Numbers(const json::value& trials) {
  std::vector<int64_t> out;
  for (const json::value& t : trials.as_array()) out.push_back(t.at("number").as_int64());
  return out;
}

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t i = from; i < to; ++i) out.push_back(i);
  return out;
}

}  // namespace

TEST_CASE("read verbs: trials is streamed in pages and pages by offset and limit", "[control]") {
  ReadFixture f;
  CHECK(Numbers(f.Call("trials")) == Range(0, kReadTrials));
  CHECK(Numbers(f.Call("trials", {{"offset", 250}, {"limit", 300}})) == Range(250, 550));
  CHECK(Numbers(f.Call("trials", {{"offset", 590}, {"limit", 100}})) == Range(590, kReadTrials));
  CHECK(Numbers(f.Call("trials", {{"offset", 256}})) == Range(256, kReadTrials));
  CHECK(f.Call("trials", {{"limit", 0}}).as_array().empty());
  CHECK(f.Call("trials", {{"offset", 5000000000LL}}).as_array().empty());
  CHECK(f.Call("trials", {{"offset", 9223372036854775807LL}, {"limit", 9223372036854775807LL}})
            .as_array()
            .empty());
  CHECK(Numbers(f.Call("trials", {{"offset", 599}, {"limit", 9223372036854775807LL}})) ==
        Range(599, kReadTrials));
  // Full records, as a whole reply had them.
  json::value page = f.Call("trials", {{"offset", 3}, {"limit", 1}});
  const json::object& t3 = page.as_array()[0].as_object();
  CHECK(t3.at("state").as_string() == "COMPLETE");
  CHECK(t3.at("intermediate").as_array().size() == 1);

  for (const json::object& bad : {json::object{{"limit", -1}}, json::object{{"offset", "x"}}}) {
    json::object args = bad;
    args["study"] = "big";
    auto r = HandleVerb(f.context, "trials", args);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == common::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(args.contains("limit") ? "limit" : "offset"));
  }

  // On the wire: one piece per page, put together one JSON value.
  auto stream = StartVerb(f.context, "trials", {{"study", "big"}});
  REQUIRE(stream.ok());
  std::vector<std::string> pieces;
  for (;;) {
    auto piece = (*stream)->Next();
    REQUIRE(piece.ok());
    if (piece->empty()) break;
    pieces.push_back(*piece);
  }
  // 256 + 256 + 88 trials: the short last page carries the closing bracket.
  CHECK(pieces.size() == 3);
  std::string text;
  for (const std::string& p : pieces) text += p;
  CHECK(Numbers(json::parse(text)) == Range(0, kReadTrials));
}

TEST_CASE("read verbs: export streams every trial after the summary", "[control]") {
  ReadFixture f;
  json::value e = f.Call("export");
  CHECK(Numbers(e.at("trials")) == Range(0, kReadTrials));
  CHECK(e.at("study").at("complete").as_int64() == kReadTrials / 3);
  const json::object& t0 = e.at("trials").as_array()[0].as_object();
  CHECK(t0.contains("distributions"));
  CHECK(t0.at("params_internal").at("x").as_double() == 0.0);
}

TEST_CASE("read verbs: studies, status and best from counts and the best-trial query",
          "[control]") {
  ReadFixture f;
  json::object s = f.Call("status").as_object();
  CHECK(s.at("complete").as_int64() == kReadTrials / 3);
  CHECK(s.at("pruned").as_int64() == kReadTrials / 3);
  CHECK(s.at("waiting").as_int64() == kReadTrials / 3);
  CHECK(s.at("running").as_int64() == 0);
  CHECK(s.at("finished").as_int64() == 2 * kReadTrials / 3);
  CHECK(s.at("mean_duration_s").as_double() == Approx(2.0));
  CHECK(s.at("best").at("number").as_int64() == kReadTrials - 3);  // the last COMPLETE one
  CHECK(f.Call("best").at("number").as_int64() == kReadTrials - 3);
  auto studies = HandleVerb(f.context, "studies", {});
  REQUIRE(studies.ok());
  REQUIRE(studies->as_array().size() == 1);
  // status adds the study's spawn state (null: nothing failed to start) to the summary.
  CHECK(s.at("spawn").is_null());
  s.erase("spawn");
  // and its sampler (null: this study's stored sweep, "[study]" alone, does not parse).
  CHECK(s.at("sampler").is_null());
  s.erase("sampler");
  // and the size of the Pareto front, null with one objective.
  CHECK(s.at("pareto_front_size").is_null());
  s.erase("pareto_front_size");
  // and its fork server (null: the study has none).
  CHECK(s.at("fork_server").is_null());
  s.erase("fork_server");
  // and storage refusing writes (null: it takes them).
  CHECK(s.at("storage").is_null());
  s.erase("storage");
  // and its Slurm jobs (null: none of its trials is one).
  CHECK(s.at("slurm").is_null());
  s.erase("slurm");
  // and how its trials failed (null: none did).
  CHECK(s.at("failures").is_null());
  s.erase("failures");
  CHECK(studies->as_array()[0].as_object() == s);
}

TEST_CASE("read verbs: summaries carry no curve, trials pages by the curves' size", "[control]") {
  // Trials 597 (COMPLETE, the best) and 300 report long curves: 3 x kCurveValuesPerPiece / 2.
  const int64_t long_curve = 3 * kCurveValuesPerPiece / 2;
  ReadFixture f(long_curve);

  json::object s = f.Call("status").as_object();
  const json::object& best = s.at("best").as_object();
  CHECK(best.at("number").as_int64() == kReadTrials - 3);
  CHECK_FALSE(best.contains("intermediate"));
  CHECK(best.at("intermediate_steps").as_int64() == long_curve);
  CHECK(common::SerializeJson(s).size() < 4096);
  json::object b = f.Call("best").as_object();
  CHECK_FALSE(b.contains("intermediate"));
  CHECK(b.at("intermediate_steps").as_int64() == long_curve);

  // trials --json: every curve whole, in pieces of at most kCurveValuesPerPiece values unless
  // one trial alone has more.
  auto stream = StartVerb(f.context, "trials", {{"study", "big"}});
  REQUIRE(stream.ok());
  std::string text;
  int pieces = 0;
  for (;;) {
    auto piece = (*stream)->Next();
    REQUIRE(piece.ok());
    if (piece->empty()) break;
    ++pieces;
    // A value is "[step,0.5]" or "[0,1.0]": at most 16 bytes; a trial's other fields < 1 KiB.
    CHECK(piece->size() < static_cast<size_t>(long_curve * 16 + 256 * 1024));
    text += *piece;
  }
  const json::value all = json::parse(text);
  CHECK(Numbers(all) == Range(0, kReadTrials));
  CHECK(all.as_array()[300].at("intermediate").as_array().size() ==
        static_cast<size_t>(long_curve));
  CHECK(all.as_array()[300].at("intermediate_steps").as_int64() == long_curve);
  // 0-255, 256-299 (the page cut before 300), 300 alone, 301-556, 557-596, 597 alone, 598-599.
  CHECK(pieces == 7);
}

}  // namespace triald::daemon
