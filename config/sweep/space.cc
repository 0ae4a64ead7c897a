// [space]: one [space.NAME] table per parameter, whose keys depend on its type; with
// [objective] kind = "lm", each parameter must be one of the worker's tunable hyperparameters.

#include <algorithm>
#include <string_view>
#include <variant>

#include "config/lm_fields.h"
#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::InvalidArgument;
using common::Status;
using D = Distribution;

constexpr int64_t kMaxExactInt = int64_t{1} << 53;
const char* const kTypeExpected = "\"float\", \"int\" or \"categorical\"";

bool IsParamName(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return alpha(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
  });
}

// low, high and step of a float or int parameter: an int parameter takes integers (exactly
// representable as internal doubles), a float one any number.
Status ReadBound(const TableContext& ctx, const Field& f, const std::string& expected, D* out,
                 double* dst) {
  const bool is_int = out->type == ParamType::kInt;
  if (const auto* i = f.node->as_integer()) {
    // Internal values are doubles: beyond 2^53 an int parameter would lose its exact value.
    if (is_int && (i->get() > kMaxExactInt || i->get() < -kMaxExactInt)) {
      return ctx.reader.ValueError(f, "too large", "an integer between -2^53 and 2^53");
    }
    *dst = static_cast<double>(i->get());
  } else if (const auto* d = f.node->as_floating_point(); d != nullptr && !is_int) {
    *dst = d->get();
  } else {
    return ctx.reader.ValueError(f, "", expected);
  }
  return Status::Ok();
}

std::string NumberExpected(const D& d) {
  return d.type == ParamType::kInt ? "an integer (type = \"int\")" : "a number";
}

Key<D> BoundKey(const char* name, double D::*m, std::string doc) {
  return CustomKey<D>(name, std::move(doc), [m](const TableContext& ctx, const Field& f, D* out) {
    return ReadBound(ctx, f, NumberExpected(*out), out, &(out->*m));
  });
}

Key<D> StepKey() {
  Key<D> k = CustomKey<D>(
      "step",
      "values low, low + step, ... (must divide high - low); float: > 0, default continuous; "
      "int: >= 1, default 1",
      [](const TableContext& ctx, const Field& f, D* out) {
        const std::string expected = out->type == ParamType::kInt
                                         ? "an integer >= 1"
                                         : "a number > 0 (omit step for a continuous range)";
        TRIALD_RETURN_IF_ERROR(ReadBound(ctx, f, expected, out, &out->step));
        // For a float, Validate reads step 0 as "continuous"; written out it is a mistake.
        if (!(out->step > 0)) return ctx.reader.ValueError(f, "", expected);
        return Status::Ok();
      });
  k.absent = [](const TableContext&, D* out) {
    out->step = out->type == ParamType::kInt ? 1 : 0;
    return Status::Ok();
  };
  return k;
}

const char* const kChoicesExpected = "a non-empty array of strings, integers, floats or booleans";

Status ReadChoices(const TableContext& ctx, const Field& f, D* out) {
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr) return ctx.reader.ValueError(f, "", kChoicesExpected);
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& elem = *arr->get(i);
    if (const auto* s = elem.as_string()) {
      out->choices.emplace_back(s->get());
    } else if (const auto* b = elem.as_boolean()) {
      out->choices.emplace_back(b->get());
    } else if (const auto* in = elem.as_integer()) {
      out->choices.emplace_back(in->get());
    } else if (const auto* d = elem.as_floating_point()) {
      out->choices.emplace_back(d->get());
    } else {
      return ctx.reader.ValueError({f.table, "choices[" + std::to_string(i) + "]", &elem}, "",
                                   "a string, integer, float or boolean");
    }
  }
  return Status::Ok();
}

// `type`, the parameter's kind: read by ParseParam before the rows of its type.
Key<D> TypeKey() {
  Key<D> k;
  k.name = "type";
  k.doc = "required: " + std::string(kTypeExpected);
  return k;
}

Status ParseParam(const SweepReader& r, const std::string& name, const toml::table& t, D* out) {
  const std::string tn = "[space." + KeyText(name) + "]";
  const TableContext ctx{r, tn, t};
  const std::vector<KindNames> types = KindKeyNames(ParamTypes());
  // Keys no parameter takes are reported before a missing type: a misspelt key often is the type.
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(ctx, types, nullptr));
  const toml::node* type_node = t.get("type");
  if (type_node == nullptr)
    return r.MissingKey(tn, t, "type", "type = " + std::string(kTypeExpected));
  std::string type;
  Field type_field{tn, "type", type_node};
  TRIALD_RETURN_IF_ERROR(r.ReadString(type_field, kTypeExpected, &type));
  if (type == "float") {
    out->type = ParamType::kFloat;
  } else if (type == "int") {
    out->type = ParamType::kInt;
  } else if (type == "categorical") {
    out->type = ParamType::kCategorical;
  } else {
    return r.ValueError(type_field, "", kTypeExpected);
  }
  const Kind<D>& kind = *FindKind(ParamTypes(), type);
  TRIALD_RETURN_IF_ERROR(r.CheckKeys(
      tn, t, KeyNames(kind.keys), (type == "int" ? " for an " : " for a ") + type + " parameter"));
  if (out->type != ParamType::kCategorical) {
    // Both bounds are required, and their absence is reported before a bad value of either.
    for (const char* key : {"low", "high"}) {
      if (t.get(key) == nullptr) return r.MissingKey(tn, t, key, NumberExpected(*out));
    }
  }
  TRIALD_RETURN_IF_ERROR(ReadKeys(ctx, kind.keys, out));

  Status st = out->Validate();
  if (st.ok()) return st;
  // Validate names the field at fault first ("low = 5.0 is greater than ..."): point there.
  const std::string& msg = st.message();
  std::string key = msg.substr(0, msg.find(" = "));
  const toml::node* at = t.get(key);
  return InvalidArgument(r.Where(at != nullptr ? at->source() : t.source()) + ": " + tn + " " +
                         msg);
}

// With kind = "lm", [space] may only override the worker's tunable hyperparameters, with
// values each of them accepts.
Status CheckLmParam(const SweepReader& r, const TomlEntry& e, const ParamSpec& spec) {
  const std::string tn = "[space." + KeyText(spec.name) + "]";
  const LmField* field = FindLmField(spec.name);
  if (field == nullptr || !field->tunable()) {
    std::string note;
    if (field != nullptr) {
      note = " (" + spec.name + " is fixed for the whole study: set it in [objective])";
    }
    return InvalidArgument(r.Where(e.key->source()) + ": " + tn + " kind = \"lm\" tunes only: " +
                           JoinList(LmFieldNames(true)) + "; expected one of those names" + note);
  }
  const toml::table& param = *e.node->as_table();
  ParamType want = ParamType::kCategorical;
  std::string takes = "one of " + field->expected;
  if (std::holds_alternative<double LmObjectiveConfig::*>(field->member)) {
    want = ParamType::kFloat;
    takes = "numbers";
  } else if (!std::holds_alternative<std::string LmObjectiveConfig::*>(field->member)) {
    want = ParamType::kInt;
    takes = "integers";
  }
  // A numeric hyperparameter may also be tuned over a list of values of its kind
  // (type = "categorical", choices = [1e-5, 3e-4]); each choice is checked below.
  const bool numeric_choices =
      want != ParamType::kCategorical && spec.dist.type == ParamType::kCategorical;
  if (spec.dist.type != want && !numeric_choices) {
    std::string expected = std::string("type = \"") + ParamTypeName(want) + "\"";
    if (want == ParamType::kCategorical) {
      expected += " with choices among " + field->expected;
    } else {
      expected += ", or \"categorical\" with " + takes + " as choices";
    }
    return r.ValueError({tn, "type", param.get("type")},
                        spec.name + " takes " + takes + " with kind = \"lm\"", expected);
  }
  if (numeric_choices) {
    for (const Choice& c : spec.dist.choices) {
      const auto* i = std::get_if<int64_t>(&c);
      const auto* d = std::get_if<double>(&c);
      const bool ok = want == ParamType::kInt
                          ? i != nullptr && field->AcceptsInt(*i)
                          : (i != nullptr && field->number.Accepts(static_cast<double>(*i))) ||
                                (d != nullptr && field->number.Accepts(*d));
      if (!ok) {
        const auto* str = std::get_if<std::string>(&c);
        return r.ValueError(
            {tn, "choices", param.get("choices")},
            (str != nullptr ? Quoted(*str) : ChoiceToString(c)) + " is not a value of " + spec.name,
            "choices that are each " + field->expected);
      }
    }
    return Status::Ok();
  }
  const std::string outside = "outside the values " + spec.name + " accepts";
  switch (want) {
    case ParamType::kFloat:
      if (!field->number.Accepts(spec.dist.low)) {
        return r.ValueError({tn, "low", param.get("low")}, outside, field->expected);
      }
      if (!field->number.Accepts(spec.dist.high)) {
        return r.ValueError({tn, "high", param.get("high")}, outside, field->expected);
      }
      break;
    case ParamType::kInt:
      if (spec.dist.low < static_cast<double>(field->int_min)) {
        return r.ValueError({tn, "low", param.get("low")}, outside, field->expected);
      }
      if (spec.dist.high > static_cast<double>(field->int_max())) {
        return r.ValueError({tn, "high", param.get("high")}, outside,
                            field->expected + " and <= " + std::to_string(field->int_max()));
      }
      break;
    case ParamType::kCategorical:
      for (const Choice& c : spec.dist.choices) {
        const auto* s = std::get_if<std::string>(&c);
        if (s == nullptr || !field->AcceptsString(*s)) {
          return r.ValueError(
              {tn, "choices", param.get("choices")},
              (s != nullptr ? Quoted(*s) : ChoiceToString(c)) + " is not a value of " + spec.name,
              "choices among " + field->expected);
        }
      }
      break;
  }
  return Status::Ok();
}

}  // namespace

const std::vector<Kind<Distribution>>& ParamTypes() {
  static const std::vector<Kind<D>> kTypes = [] {
    std::vector<Key<D>> numeric = {
        TypeKey(),
        BoundKey("low", &D::low, "required: the lowest value, inclusive (an integer for int)"),
        BoundKey("high", &D::high, "required: the highest value, inclusive (an integer for int)"),
        BoolKey("log", Of(&D::log),
                "log-uniform (low > 0); not with step for floats (default false)"),
        StepKey(),
    };
    return std::vector<Kind<D>>{
        {"float", numeric},
        {"int", numeric},
        {"categorical",
         {TypeKey(), Required(CustomKey<D>("choices",
                                           "required: the values, a non-empty array of strings, "
                                           "integers, floats or booleans",
                                           ReadChoices),
                              std::string("choices = ") + kChoicesExpected)}},
    };
  }();
  return kTypes;
}

Status ParseSpace(const SweepReader& r, const toml::table& t, bool lm, SearchSpace* out) {
  const std::vector<TomlEntry> entries = InFileOrder(t);
  if (entries.empty()) {
    return InvalidArgument(r.Where(t.source()) +
                           ": [space] has no parameters; expected at least one [space.NAME] table");
  }
  for (const TomlEntry& e : entries) {
    const std::string name(e.key->str());
    if (!IsParamName(name)) {
      return InvalidArgument(r.Where(e.key->source()) + ": [space] parameter name " + Quoted(name) +
                             " is not valid; expected a name matching [A-Za-z_][A-Za-z0-9_.-]*");
    }
    const toml::table* param = e.node->as_table();
    if (param == nullptr) {
      return r.ValueError({"[space]", KeyText(name), e.node}, "",
                          "a table such as [space." + KeyText(name) +
                              "] with type = \"float\", \"int\" or \"categorical\"");
    }
    ParamSpec spec;
    spec.name = name;
    TRIALD_RETURN_IF_ERROR(ParseParam(r, name, *param, &spec.dist));
    if (lm) TRIALD_RETURN_IF_ERROR(CheckLmParam(r, e, spec));
    out->push_back(std::move(spec));
  }
  // Every trial receives its parameters as one JSON object in TRIALD_PARAMS: a space whose
  // largest draw cannot be passed would fail every start ("Argument list too long").
  size_t most = 2;  // {}
  for (const ParamSpec& p : *out) most += p.name.size() + 4 + MaxExternalJsonBytes(p.dist);
  if (most > kMaxParamsJsonBytes) {
    return InvalidArgument(r.Where(t.source()) + ": [space] has " + std::to_string(out->size()) +
                           " parameters whose values can take " + std::to_string(most) +
                           " bytes as JSON; a trial receives them in one environment variable "
                           "(TRIALD_PARAMS), which Linux limits to 128 KiB; expected at most " +
                           std::to_string(kMaxParamsJsonBytes) +
                           " bytes (fewer parameters, shorter names or choices)");
  }
  return Status::Ok();
}

}  // namespace triald::config::sweep
