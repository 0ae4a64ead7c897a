#include "daemon/ctl/report.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

namespace triald::ctl {
namespace json = boost::json;
using exports::PairwiseFront;

extern const std::string_view kReportTemplate;  // generated from report_template.html

namespace {
constexpr std::string_view kDataMarker = "__TRIALD_STUDY_DATA__";
}  // namespace

std::string RenderReport(const exports::StudyData& study) {
  // The stderr tails of failed trials are left out: they can be large, and the page shows the
  // failure reason and detail.
  json::value data = study.reply;
  if (json::array* trials = data.as_object()["trials"].if_array()) {
    for (json::value& t : *trials) {
      if (json::object* o = t.if_object()) o->erase("stderr_tail");
    }
  }
  // The best trials by `trialctl best`'s rule, so that the page and `best` agree, and for three
  // or more objectives the front of every pair of objectives.
  json::object& o = data.as_object();
  json::array best;
  for (int n : study.best) best.push_back(n);
  o["triald_best"] = std::move(best);
  o["directions"] = json::array(study.directions.begin(), study.directions.end());
  json::array pairs;
  for (size_t a = 0; study.directions.size() > 1 && a < study.directions.size(); ++a) {
    for (size_t b = a + 1; b < study.directions.size(); ++b) {
      json::array front;
      for (int n : PairwiseFront(study, a, b)) front.push_back(n);
      pairs.push_back(json::object{{"x", a}, {"y", b}, {"front", std::move(front)}});
    }
  }
  o["pareto_pairs"] = std::move(pairs);
  const std::string text = exports::WriteJson(data, {.html_safe = true});
  std::string page(kReportTemplate);
  const size_t at = page.find(kDataMarker);
  if (at != std::string::npos) page.replace(at, kDataMarker.size(), text);
  return page;
}

common::Status WriteReport(const exports::StudyData& study, const std::string& path) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return common::ErrnoError("cannot create report " + tmp, errno);
    f << RenderReport(study);
    f.close();
    if (!f) return common::IoError("writing report " + tmp + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return common::IoError("cannot write report " + path + ": " + why);
  }
  return common::Status::Ok();
}

}  // namespace triald::ctl
