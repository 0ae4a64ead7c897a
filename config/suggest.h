#pragma once
// The distributions that define-by-run objectives request at run time (a `suggest` line on the
// trial channel, proto/report.h), made into the config::Distribution the samplers, storage and
// exports use, with the same rules as a `[space]` parameter in a sweep file.
//
// It lives in its own target, triald_suggest (linking triald_config and triald_proto), because
// triald_config links only triald_common and triald_proto must not depend on config: neither
// library gains an edge, and the fuzz build, which has common, proto and config, still builds it.
//
// Thread-safety: pure functions.

#include <string>
#include <string_view>

#include "common/status.h"
#include "config/space.h"
#include "proto/report.h"

namespace triald::config {

// The distribution a worker asked for under `name`, or kInvalidArgument with a message naming
// the field at fault and what was expected, e.g.
//   suggest "lr": distribution.low = 0.5 is greater than distribution.high = 0.1; expected
//   low <= high
// Refused: an unknown type; a field the type does not have (choices of a float, low of a
// categorical) or one it needs missing; float: low > high, step <= 0, log with low <= 0, log and
// step together, a step that does not divide high - low; int: bounds or step that are not JSON
// integers within +-2^53, low > high, step < 1, log with low < 1 or step != 1, a step that does
// not divide high - low; categorical: no choices, two equal choices (1 and 1.0 are equal, true
// and 1 are not, as in Python). high - low must be a whole multiple of step, as in a sweep file:
// the Python runner lowers `high` to the last grid point before it asks, as Optuna does.
// The cost is O(n log n) in the number of choices.
common::Result<Distribution> DistributionFromSuggest(std::string_view name,
                                                     const proto::SuggestDistribution& requested);

// The message for a parameter asked again with a distribution that differs from the one it
// was first suggested with (Optuna's semantics give a name one distribution per trial):
//   suggest "lr": distribution float [0.001, 0.1] differs from float [1e-05, 0.1] (log), the
//   distribution "lr" already has in this trial; a parameter keeps one distribution per trial
std::string DistributionConflictMessage(std::string_view name, const Distribution& before,
                                        const Distribution& now);

}  // namespace triald::config
