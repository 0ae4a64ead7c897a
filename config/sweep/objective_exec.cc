// [objective] kind = "exec": the worker is a command the user gives.

#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::Status;
using O = ObjectiveConfig;

const char* const kCommandExpected =
    "a non-empty array of strings, e.g. [\"python3\", \"train.py\"]";

Status ReadCommand(const TableContext& ctx, const Field& f, O* out) {
  const SweepReader& r = ctx.reader;
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr || arr->empty()) return r.ValueError(f, "", kCommandExpected);
  for (size_t i = 0; i < arr->size(); ++i) {
    Field ef{f.table, f.key + "[" + std::to_string(i) + "]", arr->get(i)};
    std::string arg;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, "a string", &arg));
    // exec() takes NUL-terminated strings: an embedded NUL would silently cut the argument.
    if (arg.find('\0') != std::string::npos) {
      return r.ValueError(ef, "contains a NUL character", "a string without NUL");
    }
    if (i == 0 && arg.empty()) return r.ValueError(ef, "", "the program to run");
    out->command.push_back(std::move(arg));
  }
  return Status::Ok();
}

}  // namespace

std::vector<Key<ObjectiveConfig>> ExecObjectiveKeys() {
  return {
      ObjectiveKindKey(),
      Required(CustomKey<O>("command",
                            "required: the worker's argv, a non-empty array of strings; "
                            "command[0] is looked up in PATH when it has no '/'",
                            ReadCommand),
               "a non-empty array of strings, e.g. command = [\"python3\", \"train.py\"]"),
      EnvKey(),
      WorkdirKey(),
  };
}

}  // namespace triald::config::sweep
