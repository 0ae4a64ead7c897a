#!/usr/bin/python3
"""Checks triald's TPE split (several objectives, constraints) against Optuna 3.1's own functions.

Input (--cases FILE): a JSON array of study histories with triald's answers, as
tests/daemon/tpe_split_test.cc writes them ("tpe split agrees with Optuna 3.1 on generated
histories"; run that test to produce and check them, TRIALD_TEST_KEEP=1 keeps the file):

    [{"name": "case-0", "directions": ["minimize", "maximize"], "constant_liar": true,
      "constrained": true, "n_below": 3,
      "trials": [{"number": 0, "state": "COMPLETE", "values": [0.5, 1.0],
                  "intermediate": [[0, 0.7]], "constraints": [-0.2]}, ...],
      "below": [0, 4, 7], "weights": [1.0, 0.25, 1e-12]}, ...]

Each history becomes an in-memory Optuna study (trials added with their state, values,
intermediate values and the system attr "constraints"; parameter "x" holds the trial number).
Then Optuna's TPE functions, as TPESampler calls them: _get_observation_pairs (constant_liar,
constraints enabled when triald's "constrained" says so), gamma = default_gamma(n) with n the
trials that are not running, _split_observation_pairs and, with several objectives,
_calculate_weights_below_for_multi_objective. A case agrees when gamma(n) is triald's n_below,
the below trials are triald's and the weights are within 1e-9; or, where the greedy hypervolume
selection met two equal points (only one of which fits), when the below trials hold the same
values and weights (counted apart as "agree_up_to_equal_points"). Prints one line per
disagreement and, last, one JSON line:

    {"optuna": "3.1.0", "cases": N, "agree": M, "agree_up_to_equal_points": K}

Exit status 0 when it ran (whatever the agreement), 2 on bad input, 3 without Optuna. Uses
Debian's python3-optuna (3.1), hence /usr/bin/python3.
"""

import argparse
import json
import logging
import math
import sys
import warnings


def build_study(optuna, case):
    directions = case["directions"]
    study = optuna.create_study(directions=directions)
    dist = optuna.distributions.IntDistribution(0, 1 << 20)
    states = {
        "COMPLETE": optuna.trial.TrialState.COMPLETE,
        "PRUNED": optuna.trial.TrialState.PRUNED,
        "FAIL": optuna.trial.TrialState.FAIL,
        "RUNNING": optuna.trial.TrialState.RUNNING,
    }
    for t in case["trials"]:
        state = states[t["state"]]
        system_attrs = {}
        if "constraints" in t:
            system_attrs["constraints"] = tuple(t["constraints"])
        frozen = optuna.trial.create_trial(
            state=state,
            values=t.get("values") if state == optuna.trial.TrialState.COMPLETE else None,
            params={"x": t["number"]},
            distributions={"x": dist},
            intermediate_values={int(s): float(v) for s, v in t["intermediate"]},
            system_attrs=system_attrs,
        )
        study.add_trial(frozen)
    return study


def below_values(case, numbers):
    by_number = {t["number"]: t for t in case["trials"]}
    return sorted(tuple(by_number[n].get("values", [])) for n in numbers)


def check(optuna, case, report):
    """0: disagrees; 1: agrees; 2: agrees up to which of two equal points is below."""
    from optuna.samplers._tpe import sampler as tpe

    study = build_study(optuna, case)
    values, scores, violations = tpe._get_observation_pairs(
        study, ["x"], case["constant_liar"], case["constrained"])
    n = sum(s < float("inf") for s, _ in scores)
    n_below = tpe.default_gamma(n)
    name = case["name"]
    if n_below != case["n_below"]:
        report(f"{name}: gamma({n}) = {n_below}, triald used {case['n_below']}")
        return 0
    indices_below, _ = tpe._split_observation_pairs(scores, n_below, violations)
    numbers = [int(values["x"][i]) for i in indices_below]
    weights = []
    if study._is_multi_objective():
        weights = list(tpe._calculate_weights_below_for_multi_objective(
            scores, indices_below, violations))
    ours = dict(zip(case["below"], case["weights"])) if case["weights"] else {}
    theirs = dict(zip(numbers, weights))

    def close(a, b):
        return len(a) == len(b) and all(abs(x - y) <= 1e-9 for x, y in zip(a, b))

    if sorted(numbers) == sorted(case["below"]):
        if close([theirs[k] for k in sorted(theirs)], [ours[k] for k in sorted(ours)]):
            return 1
        report(f"{name}: below {sorted(numbers)}: weights differ: Optuna "
               f"{[theirs[k] for k in sorted(theirs)]}, triald {[ours[k] for k in sorted(ours)]}")
        return 0
    if (below_values(case, numbers) == below_values(case, case["below"])
            and close(sorted(theirs.values()), sorted(ours.values()))):
        return 2
    report(f"{name}: below: Optuna {sorted(numbers)}, triald {sorted(case['below'])}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", required=True, help="JSON file of histories")
    args = parser.parse_args()

    warnings.simplefilter("ignore")
    try:
        import optuna
    except ImportError as e:
        print(f"check_tpe_split_against_optuna: {e}; install python3-optuna "
              "(scripts/install-deps.sh)", file=sys.stderr)
        return 3
    optuna.logging.set_verbosity(logging.ERROR)
    try:
        with open(args.cases) as f:
            cases = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_tpe_split_against_optuna: {args.cases}: {e}", file=sys.stderr)
        return 2
    total = {"cases": 0, "agree": 0, "agree_up_to_equal_points": 0}
    for case in cases:
        r = check(optuna, case, lambda line: print(line))
        total["cases"] += 1
        total["agree"] += 1 if r else 0
        total["agree_up_to_equal_points"] += 1 if r == 2 else 0
    print(json.dumps({"optuna": optuna.__version__, **total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
