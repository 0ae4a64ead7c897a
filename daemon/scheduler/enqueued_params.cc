#include "daemon/scheduler/enqueued_params.h"

#include <algorithm>
#include <boost/json.hpp>

namespace triald::daemon {

bool HasGivenValues(const model::TrialRecord& t, const std::map<std::string, std::string>& given) {
  const std::map<std::string, std::string> enqueued = EnqueuedValues(t);
  for (const auto& [param, text] : given) {
    auto held = t.params.find(param);
    if (held != t.params.end()) {
      common::Result<double> v = config::InternalFromText(held->second.dist, text);
      if (!v.ok() || *v != held->second.internal) return false;
      continue;
    }
    auto e = enqueued.find(param);
    if (e == enqueued.end() || e->second != text) return false;
  }
  return true;
}

std::map<std::string, std::string> EnqueuedValues(const model::TrialRecord& trial) {
  std::map<std::string, std::string> out;
  auto it = trial.attrs.find(kEnqueuedAttr);
  if (it == trial.attrs.end()) return out;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(it->second, ec);
  if (ec || !v.is_object()) return out;
  for (const auto& [k, text] : v.as_object()) {
    if (text.is_string()) out[std::string(k)] = std::string(text.as_string());
  }
  return out;
}

common::Result<EnqueuedParams> ResolveEnqueuedParams(
    const std::string& name, const config::SweepSpec& spec, sampler::Sampler& sampler,
    const std::vector<model::TrialRecord>& trials,
    const std::map<std::string, std::string>& given) {
  std::string known;
  for (const config::ParamSpec& p : spec.space) known += (known.empty() ? "" : ", ") + p.name;
  config::ParamValues fixed;
  std::map<std::string, std::string> deferred;
  for (const auto& [param, text] : given) {
    auto found = std::find_if(spec.space.begin(), spec.space.end(),
                              [&](const config::ParamSpec& p) { return p.name == param; });
    if (found == spec.space.end() && spec.objective.define_by_run()) {
      // Suggested by the objective itself: checked when it asks, against its distribution.
      if (param.empty() || param.size() > 256 || text.empty() || text.size() > 4096) {
        return common::InvalidArgument("parameter \"" + param.substr(0, 256) +
                                       "\": expected a name of 1 to 256 bytes and a value of 1 "
                                       "to 4096");
      }
      deferred[param] = text;
      continue;
    }
    if (found == spec.space.end()) {
      return common::InvalidArgument("study \"" + name + "\" has no parameter \"" + param +
                                     "\"; expected one of: " + known);
    }
    common::Result<double> v = config::InternalFromText(found->dist, text);
    if (!v.ok()) return common::InvalidArgument("parameter " + param + ": " + v.status().message());
    fixed[param] = *v;
  }

  config::ParamValues values;
  if (fixed.size() < spec.space.size()) {
    sampler::StudyView view{spec.study.direction, &spec.space, &trials, spec.study.directions};
    common::Result<config::ParamValues> sampled =
        sampler::SampleParams(sampler, view, static_cast<int>(trials.size()));
    if (!sampled.ok()) {
      return sampled.status().WithContext("drawing the parameters not given for study \"" + name +
                                          "\"");
    }
    values = std::move(sampled).value();
  }
  for (const auto& [param, v] : fixed) values[param] = v;
  EnqueuedParams out;
  for (const config::ParamSpec& p : spec.space) {
    out.params[p.name] = model::ParamValue{values.at(p.name), p.dist};
  }
  for (const auto& [param, v] : fixed) {
    out.given += (out.given.empty() ? "" : " ") + param + "=" +
                 config::ExternalJson(out.params[param].dist, v);
  }
  for (const auto& [param, text] : deferred) {
    out.given += (out.given.empty() ? "" : " ") + param + "=" + text + " (when suggested)";
  }
  out.deferred = std::move(deferred);
  return out;
}

}  // namespace triald::daemon
