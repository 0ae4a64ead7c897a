#include "daemon/storage/backend_util.h"

#include <boost/json.hpp>
#include <cmath>
#include <limits>

#include "common/json.h"
#include "config/space.h"
#include "daemon/model/resources_json.h"

namespace triald::storage::backend {

std::string DirectionsText(const std::vector<config::Direction>& directions) {
  if (directions.size() <= 1) return "";
  std::string out;
  for (config::Direction d : directions) {
    if (!out.empty()) out += ",";
    out += DirectionText(d);
  }
  return out;
}

common::Result<std::vector<config::Direction>> ParseDirectionsText(const std::string& text,
                                                                   config::Direction first,
                                                                   const std::string& op) {
  if (text.empty()) return std::vector<config::Direction>{first};
  std::vector<config::Direction> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string name = text.substr(begin, end - begin);
    if (name == "MINIMIZE") {
      out.push_back(config::Direction::kMinimize);
    } else if (name == "MAXIMIZE") {
      out.push_back(config::Direction::kMaximize);
    } else {
      return common::Internal(op + ": stored directions \"" + text + "\" name an unknown one");
    }
    begin = end + 1;
  }
  if (out.size() < 2 || out.front() != first) {
    return common::Internal(op + ": stored directions \"" + text +
                            "\" disagree with the study's direction");
  }
  return out;
}

common::Result<std::vector<config::Direction>> NewStudyDirections(const model::NewStudy& study,
                                                                  const std::string& op) {
  if (study.directions.empty()) return std::vector<config::Direction>{study.direction};
  if (study.directions.front() != study.direction) {
    return common::InvalidArgument(op + ": direction is not directions[0]");
  }
  return study.directions;
}

std::string DoublesText(const std::vector<double>& values) {
  if (values.empty()) return "";
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ",";
    out += std::isfinite(values[i]) ? config::DoubleRepr(values[i]) : "null";
  }
  return out + "]";
}

common::Result<std::vector<double>> ParseDoublesText(const std::string& text,
                                                     const std::string& op) {
  std::vector<double> out;
  if (text.empty()) return out;
  auto bad = [&] {
    return common::Internal(op + ": stored numbers \"" + text.substr(0, 200) +
                            "\" are not a JSON array of numbers");
  };
  common::Result<boost::json::value> v = common::ParseJsonExact(text, /*max_depth=*/2);
  if (!v.ok() || !v->is_array()) return bad();
  for (const boost::json::value& e : v->get_array()) {
    if (e.is_double()) {
      out.push_back(e.get_double());
    } else if (e.is_int64()) {
      out.push_back(static_cast<double>(e.get_int64()));
    } else if (e.is_uint64()) {
      out.push_back(static_cast<double>(e.get_uint64()));
    } else if (e.is_null()) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
    } else {
      return bad();
    }
  }
  return out;
}

std::string StoredValuesText(const model::TrialOutcome& outcome) {
  if (outcome.values.empty()) return "";
  if (outcome.value && outcome.values.size() == 1 &&
      (outcome.values[0] == *outcome.value ||
       (std::isnan(outcome.values[0]) && std::isnan(*outcome.value)))) {
    return "";
  }
  return DoublesText(outcome.values);
}

std::string ResourcesText(const std::optional<model::TrialResources>& resources) {
  if (!resources || resources->empty()) return "";
  return boost::json::serialize(model::ResourcesToJson(*resources));
}

common::Result<std::optional<model::TrialResources>> ParseResourcesText(const std::string& text,
                                                                        const std::string& op) {
  if (text.empty()) return std::optional<model::TrialResources>();
  common::Result<boost::json::value> v = common::ParseJsonExact(text, /*max_depth=*/2);
  if (!v.ok()) {
    return common::Internal(op + ": stored resources \"" + text.substr(0, 200) +
                            "\" are not JSON: " + v.status().message());
  }
  common::Result<model::TrialResources> r = model::ResourcesFromJson(*v, op);
  if (!r.ok()) return common::Internal(r.status().message());
  return std::optional<model::TrialResources>(std::move(r).value());
}

std::string SubmitChoicesText(const config::SubmitChoices& c) {
  if (c.empty()) return "";
  boost::json::object o;
  if (!c.name.empty()) o["name"] = c.name;
  if (!c.python.empty()) o["python"] = c.python;
  if (!c.python_version.empty()) o["python_version"] = c.python_version;
  if (!c.metric_names.empty()) {
    boost::json::array names;
    for (const std::string& n : c.metric_names) names.emplace_back(n);
    o["metric_names"] = std::move(names);
  }
  if (!c.code.empty()) {
    boost::json::array code;
    for (const config::CodeFile& f : c.code) {
      code.push_back(boost::json::object{
          {"path", f.path}, {"sha256", f.sha256}, {"bytes", f.bytes}, {"source", f.source}});
    }
    o["code"] = std::move(code);
  }
  return boost::json::serialize(o);
}

common::Result<config::SubmitChoices> ParseSubmitChoicesText(const std::string& text,
                                                             const std::string& where) {
  config::SubmitChoices c;
  if (text.empty()) return c;
  common::Result<boost::json::value> v = common::ParseJsonExact(text, /*max_depth=*/3);
  if (!v.ok() || !v->is_object()) {
    return common::Internal(where + ": stored submit choices \"" + text.substr(0, 200) +
                            "\" are not a JSON object");
  }
  for (const auto& [key, field] : v->as_object()) {
    if (key == "metric_names" && field.is_array()) {
      for (const boost::json::value& n : field.as_array()) {
        if (n.is_string()) c.metric_names.emplace_back(n.as_string());
      }
      continue;
    }
    if (key == "code" && field.is_array()) {
      for (const boost::json::value& e : field.as_array()) {
        if (!e.is_object()) continue;
        const boost::json::object& f = e.as_object();
        config::CodeFile file;
        auto str = [&f](const char* k) {
          const boost::json::value* s = f.if_contains(k);
          return s != nullptr && s->is_string() ? std::string(s->as_string()) : std::string();
        };
        file.path = str("path");
        file.sha256 = str("sha256");
        file.source = str("source");
        if (const boost::json::value* b = f.if_contains("bytes"); b != nullptr) {
          if (b->is_uint64()) file.bytes = b->as_uint64();
          if (b->is_int64() && b->as_int64() >= 0) file.bytes = b->as_int64();
        }
        c.code.push_back(std::move(file));
      }
      continue;
    }
    if (!field.is_string()) continue;
    const std::string value(field.as_string());
    if (key == "name") c.name = value;
    if (key == "python") c.python = value;
    if (key == "python_version") c.python_version = value;
  }
  return c;
}

std::vector<double> TrialValues(const model::TrialRecord& t, std::vector<double> stored) {
  if (!stored.empty()) return stored;
  if (t.state == model::TrialState::kComplete && t.value) return {*t.value};
  return {};
}

common::Status CheckStudyControl(int n_trials, int parallelism, const std::string& op) {
  if (n_trials < 1) {
    return common::InvalidArgument(op + ": n_trials " + std::to_string(n_trials) +
                                   "; expected 1 or more");
  }
  if (parallelism < 0) {
    return common::InvalidArgument(op + ": parallelism " + std::to_string(parallelism) +
                                   "; expected 0 (the sweep's) or more");
  }
  return common::Status::Ok();
}

model::StudyRecord NewStudyRecord(const model::NewStudy& study,
                                  const std::vector<config::Direction>& directions, int64_t id,
                                  double at) {
  model::StudyRecord r;
  r.id = id;
  r.name = study.name;
  r.direction = study.direction;
  r.directions = directions;
  r.n_trials = study.n_trials;
  r.state = model::StudyState::kRunning;
  r.spec_toml = study.spec_toml;
  r.spec_path = study.spec_path;
  r.seed = study.seed;
  r.created_at = at;
  r.submitter = study.submitter;
  r.submit = study.submit;
  return r;
}

common::Status CheckNewParams(const model::ParamMap& params, const std::string& op) {
  for (const auto& [name, p] : params) {
    if (std::isnan(p.internal)) {
      return common::InvalidArgument(op + ": parameter \"" + name +
                                     "\" has internal value NaN; expected a number");
    }
  }
  return common::Status::Ok();
}

common::Status CheckFinishedOutcome(const model::TrialOutcome& outcome, const std::string& op) {
  if (model::IsFinished(outcome.state)) return common::Status::Ok();
  return common::InvalidArgument(op + ": outcome state " + model::TrialStateName(outcome.state) +
                                 " is not a finished state; expected COMPLETE, PRUNED or FAIL");
}

}  // namespace triald::storage::backend
