#!/usr/bin/python3
"""Replays triald's pruning decisions through Optuna's own pruners and prints the agreement.

Input (--cases FILE): a JSON array of simulated studies, as tests/daemon/pruner_test.cc writes
them ("pruners agree with Optuna 3.1 on simulated studies"; run that test to produce and check
them, or keep the file with TRIALD_TEST_KEEP-style copying and pass it here):

    [{"pruner": {"kind": "median", "n_startup_trials": 2, ...},
      "direction": "minimize", "study_name": "sim-1",
      "events": [{"t": 0, "start": true},
                 {"t": 0, "step": 0, "value": 0.85, "prune": false},
                 {"t": 0, "complete": 0.6}, ...]}, ...]

Each study is replayed in an in-memory Optuna study with the same pruner: "start" asks a trial
(trial numbers follow ask order, as in triald), a report event calls trial.report() and
trial.should_prune() and compares Optuna's answer with triald's ("prune"), then follows
triald's answer (tell PRUNED) so that one difference does not cascade; "complete" tells the
value. Prints one line per disagreement and, last, one JSON line:

    {"optuna": "3.1.0", "decisions": N, "agree": M, "prunes": P,
     "by_study": {"sim-1": {"decisions": n, "agree": m}, ...}}

Exit status 0 when it ran (whatever the agreement), 2 on bad input, 3 without Optuna. Uses Debian's python3-optuna
(3.1), hence /usr/bin/python3.
"""

import argparse
import json
import logging
import sys
import warnings


def make_pruner(optuna, p):
    kind = p["kind"]
    if kind == "nop":
        return optuna.pruners.NopPruner()
    if kind == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=p["n_startup_trials"], n_warmup_steps=p["n_warmup_steps"],
            interval_steps=p["interval_steps"], n_min_trials=p["n_min_trials"])
    if kind == "percentile":
        return optuna.pruners.PercentilePruner(
            p["percentile"], n_startup_trials=p["n_startup_trials"],
            n_warmup_steps=p["n_warmup_steps"], interval_steps=p["interval_steps"],
            n_min_trials=p["n_min_trials"])
    if kind == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=p["min_resource"], reduction_factor=p["reduction_factor"],
            min_early_stopping_rate=p["min_early_stopping_rate"],
            bootstrap_count=p["bootstrap_count"])
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=p["min_resource"],
            max_resource=p["max_resource"] if p["max_resource"] > 0 else "auto",
            reduction_factor=p["reduction_factor"], bootstrap_count=p["bootstrap_count"])
    raise ValueError(f"unknown pruner kind {kind!r}")


def replay(optuna, case, report):
    from optuna.trial import TrialState

    study = optuna.create_study(
        study_name=case["study_name"], direction=case["direction"],
        pruner=make_pruner(optuna, case["pruner"]))
    trials = {}
    decisions = agree = prunes = 0
    for e in case["events"]:
        t = e["t"]
        if e.get("start"):
            trials[t] = study.ask()
            if trials[t].number != t:
                raise ValueError(f"trial {t} started out of order")
        elif "complete" in e:
            study.tell(trials[t], e["complete"])
        else:
            trial = trials[t]
            trial.report(e["value"], e["step"])
            ours = bool(e["prune"])
            theirs = bool(trial.should_prune())
            decisions += 1
            prunes += ours
            if ours == theirs:
                agree += 1
            else:
                report(f"{case['study_name']} ({case['pruner']['kind']}, {case['direction']}): "
                       f"trial {t} step {e['step']} value {e['value']}: triald "
                       f"{'prunes' if ours else 'keeps'}, Optuna "
                       f"{'prunes' if theirs else 'keeps'}")
            if ours:
                study.tell(trial, state=TrialState.PRUNED)
    return decisions, agree, prunes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", required=True, help="JSON file of simulated studies")
    args = parser.parse_args()

    warnings.simplefilter("ignore")
    try:
        import optuna
    except ImportError as e:
        print(f"check_pruners_against_optuna: {e}; install python3-optuna "
              "(scripts/install-deps.sh)", file=sys.stderr)
        return 3

    optuna.logging.set_verbosity(logging.ERROR)
    try:
        with open(args.cases) as f:
            cases = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_pruners_against_optuna: {args.cases}: {e}", file=sys.stderr)
        return 2
    total = {"decisions": 0, "agree": 0, "prunes": 0}
    by_study = {}
    for case in cases:
        d, a, p = replay(optuna, case, lambda line: print(line))
        total["decisions"] += d
        total["agree"] += a
        total["prunes"] += p
        by_study[case["study_name"]] = {"decisions": d, "agree": a}
    print(json.dumps({"optuna": optuna.__version__, **total, "by_study": by_study}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
