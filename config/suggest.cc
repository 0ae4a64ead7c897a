#include "config/suggest.h"

#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "common/json_text.h"

namespace triald::config {

namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;
using proto::SuggestChoice;
using proto::SuggestDistribution;
using proto::SuggestNumber;

// Integers up to 2^53 are exactly representable in a double, the internal representation.
constexpr int64_t kMaxExactInt = int64_t{1} << 53;
// "Is high - low a whole number of steps", with the tolerance the sweep parser allows (Validate).
constexpr double kGridTolerance = 1e-9;

// A number as the worker wrote it: an integer exactly, a float as Python's repr.
std::string NumberText(const SuggestNumber& n) {
  return n.is_integer ? std::to_string(n.integer) : DoubleRepr(n.value);
}

std::string ChoiceText(const SuggestChoice& c) {
  if (const auto* b = std::get_if<bool>(&c)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&c)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&c)) return DoubleRepr(*d);
  return common::JsonQuote(std::get<std::string>(c));
}

// Refuses the fields a distribution of `type` does not have; `expected` lists those it has.
Status NoOtherFields(const SuggestDistribution& d, bool allow_numbers, const char* type,
                     const char* expected) {
  auto refuse = [&](const char* field) {
    return InvalidArgument(std::string("distribution.") + field + " is not a field of " + type +
                           " distributions; expected " + expected);
  };
  if (!allow_numbers) {
    if (d.low) return refuse("low");
    if (d.high) return refuse("high");
    if (d.step || d.step_null) return refuse("step");
    if (d.log) return refuse("log");
  }
  if (type != std::string_view("categorical") && d.choices) return refuse("choices");
  return Status::Ok();
}

Result<SuggestNumber> Required(const std::optional<SuggestNumber>& n, const char* field,
                               const char* type) {
  if (!n) {
    return InvalidArgument(std::string("distribution.") + field + " is missing; a " + type +
                           " distribution needs low and high");
  }
  return *n;
}

bool NearInteger(double k) {
  return std::fabs(k - std::round(k)) <= kGridTolerance * std::max(1.0, std::fabs(k));
}

Result<Distribution> FloatFrom(const SuggestDistribution& r) {
  TRIALD_RETURN_IF_ERROR(NoOtherFields(r, true, "float", "low, high, step and log"));
  TRIALD_ASSIGN_OR_RETURN(SuggestNumber low, Required(r.low, "low", "float"));
  TRIALD_ASSIGN_OR_RETURN(SuggestNumber high, Required(r.high, "high", "float"));
  Distribution d;
  d.type = ParamType::kFloat;
  d.low = low.value;
  d.high = high.value;
  d.log = r.log.value_or(false);
  if (d.low > d.high) {
    return InvalidArgument("distribution.low = " + DoubleRepr(d.low) +
                           " is greater than distribution.high = " + DoubleRepr(d.high) +
                           "; expected low <= high");
  }
  if (r.step) {
    d.step = r.step->value;
    if (!(d.step > 0)) {
      return InvalidArgument("distribution.step = " + DoubleRepr(d.step) +
                             ": expected a number > 0, or null for none");
    }
    if (d.log) {
      return InvalidArgument("distribution.step = " + DoubleRepr(d.step) +
                             " with distribution.log = true: expected either a step or log = "
                             "true, not both");
    }
  }
  if (d.log && d.low <= 0) {
    return InvalidArgument("distribution.low = " + DoubleRepr(d.low) +
                           " with distribution.log = true: a log distribution needs low > 0");
  }
  if (d.step > 0 && !NearInteger((d.high - d.low) / d.step)) {
    return InvalidArgument(
        "distribution.step = " + DoubleRepr(d.step) +
        " does not divide distribution.high - distribution.low = " + DoubleRepr(d.high - d.low) +
        "; expected high - low to be a whole multiple of step");
  }
  return d;
}

Result<int64_t> IntField(const SuggestNumber& n, const char* field) {
  if (!n.is_integer || n.integer < -kMaxExactInt || n.integer > kMaxExactInt) {
    return InvalidArgument(std::string("distribution.") + field + " = " + NumberText(n) +
                           ": expected an integer between -2^53 and 2^53");
  }
  return n.integer;
}

Result<Distribution> IntFrom(const SuggestDistribution& r) {
  TRIALD_RETURN_IF_ERROR(NoOtherFields(r, true, "int", "low, high, step and log"));
  TRIALD_ASSIGN_OR_RETURN(SuggestNumber low_n, Required(r.low, "low", "int"));
  TRIALD_ASSIGN_OR_RETURN(SuggestNumber high_n, Required(r.high, "high", "int"));
  TRIALD_ASSIGN_OR_RETURN(int64_t low, IntField(low_n, "low"));
  TRIALD_ASSIGN_OR_RETURN(int64_t high, IntField(high_n, "high"));
  int64_t step = 1;
  if (r.step_null) {
    return InvalidArgument(
        "distribution.step = null: expected an integer >= 1 (or no step, "
        "which is 1)");
  }
  if (r.step) {
    if (!r.step->is_integer || r.step->integer < 1 || r.step->integer > kMaxExactInt) {
      return InvalidArgument("distribution.step = " + NumberText(*r.step) +
                             ": expected an integer >= 1");
    }
    step = r.step->integer;
  }
  bool log = r.log.value_or(false);
  if (low > high) {
    return InvalidArgument("distribution.low = " + std::to_string(low) +
                           " is greater than distribution.high = " + std::to_string(high) +
                           "; expected low <= high");
  }
  if (log && step != 1) {
    return InvalidArgument("distribution.step = " + std::to_string(step) +
                           " with distribution.log = true: expected step = 1 with log = true");
  }
  if (log && low < 1) {
    return InvalidArgument("distribution.low = " + std::to_string(low) +
                           " with distribution.log = true: a log distribution needs low >= 1");
  }
  // Both within +-2^53, so the difference fits and is exact.
  if ((high - low) % step != 0) {
    return InvalidArgument(
        "distribution.step = " + std::to_string(step) +
        " does not divide distribution.high - distribution.low = " + std::to_string(high - low) +
        "; expected high - low to be a whole multiple of step");
  }
  Distribution d;
  d.type = ParamType::kInt;
  d.low = static_cast<double>(low);
  d.high = static_cast<double>(high);
  d.step = static_cast<double>(step);
  d.log = log;
  return d;
}

// Choices compare as the Python runner compares them: numbers by value (1 == 1.0, 0.0 == -0.0),
// bools only with bools, strings only with strings.
class ChoiceIndex {
 public:
  // The index of an earlier choice equal to `c`, after recording `c` as choice `i` if none.
  std::optional<size_t> Add(const SuggestChoice& c, size_t i) {
    if (const auto* b = std::get_if<bool>(&c)) return Insert(bools_, *b, i);
    if (const auto* s = std::get_if<std::string>(&c)) return Insert(strings_, *s, i);
    if (const auto* n = std::get_if<int64_t>(&c)) {
      // The double nearest n equals n only when it converts back to n.
      double x = static_cast<double>(*n);
      if (x < 9223372036854775808.0 && static_cast<int64_t>(x) == *n) {
        if (auto it = doubles_.find(x); it != doubles_.end()) return it->second;
      }
      return Insert(ints_, *n, i);
    }
    double x = std::get<double>(c);
    if (x == std::floor(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0) {
      if (auto it = ints_.find(static_cast<int64_t>(x)); it != ints_.end()) return it->second;
    }
    return Insert(doubles_, x == 0 ? 0.0 : x, i);
  }

 private:
  template <typename Map, typename Key>
  static std::optional<size_t> Insert(Map& map, const Key& key, size_t i) {
    auto [it, inserted] = map.emplace(key, i);
    if (inserted) return std::nullopt;
    return it->second;
  }

  std::map<bool, size_t> bools_;
  std::unordered_map<std::string, size_t> strings_;
  std::map<int64_t, size_t> ints_;
  std::map<double, size_t> doubles_;
};

Result<Distribution> CategoricalFrom(const SuggestDistribution& r) {
  TRIALD_RETURN_IF_ERROR(NoOtherFields(r, false, "categorical", "choices"));
  if (!r.choices) {
    return InvalidArgument(
        "distribution.choices is missing; a categorical distribution needs "
        "choices");
  }
  if (r.choices->empty()) {
    return InvalidArgument("distribution.choices = []: expected at least one choice");
  }
  Distribution d;
  d.type = ParamType::kCategorical;
  d.choices.reserve(r.choices->size());
  ChoiceIndex seen;
  for (size_t i = 0; i < r.choices->size(); ++i) {
    const SuggestChoice& c = (*r.choices)[i];
    if (std::optional<size_t> j = seen.Add(c, i)) {
      return InvalidArgument("distribution.choices[" + std::to_string(i) + "] = " + ChoiceText(c) +
                             " equals distribution.choices[" + std::to_string(*j) +
                             "] = " + ChoiceText((*r.choices)[*j]) + "; expected distinct choices");
    }
    std::visit([&d](const auto& x) { d.choices.emplace_back(x); }, c);
  }
  return d;
}

}  // namespace

Result<Distribution> DistributionFromSuggest(std::string_view name,
                                             const SuggestDistribution& requested) {
  Result<Distribution> d = InvalidArgument("");
  if (requested.type == "float") {
    d = FloatFrom(requested);
  } else if (requested.type == "int") {
    d = IntFrom(requested);
  } else if (requested.type == "categorical") {
    d = CategoricalFrom(requested);
  } else {
    d = InvalidArgument("distribution.type = " + common::JsonQuote(requested.type) +
                        ": expected \"float\", \"int\" or \"categorical\"");
  }
  if (!d.ok())
    return InvalidArgument("suggest " + common::JsonQuote(name) + ": " + d.status().message());
  // The checks above are the sweep parser's (Validate) and more; a disagreement is a bug here.
  // Validate compares every pair of choices, so categoricals were checked above in its stead.
  if (d->type != ParamType::kCategorical) {
    if (Status st = d->Validate(); !st.ok()) {
      return common::Internal("suggest " + common::JsonQuote(name) + ": distribution " +
                              DistributionText(*d) + " passed the suggest checks but not " +
                              "Validate: " + st.message());
    }
  }
  return d;
}

std::string DistributionConflictMessage(std::string_view name, const Distribution& before,
                                        const Distribution& now) {
  return "suggest " + common::JsonQuote(name) + ": distribution " + DistributionText(now) +
         " differs from " + DistributionText(before) + ", the distribution " +
         common::JsonQuote(name) +
         " already has in this trial; a parameter keeps one distribution per trial";
}

}  // namespace triald::config
