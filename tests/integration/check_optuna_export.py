#!/usr/bin/python3
"""Checks an Optuna storage written by `trialctl export --format optuna` with Optuna itself.

usage: check_optuna_export.py STORAGE.db EXPORT.json [BEST.json]

EXPORT.json is `trialctl export STUDY --format json` of the same study. Optuna (python3-optuna,
3.1 on Debian 12) must load the study from the storage without complaint and see its directions
and every trial with the same state, parameters (values and distributions), value or values,
constraints (system attribute "constraints", where Optuna's samplers read them), intermediate
values, attributes, datetimes, and the resources triald measured as the user attributes
triald_peak_memory_bytes, triald_peak_gpu_memory_bytes (ints), triald_cpu_time_s,
triald_wall_s (floats), triald_memory_source, triald_cpu_source (strings): each present exactly
when the trial's "resources" has that value.

BEST.json is `trialctl best STUDY --json`: its trials must be the ones Optuna's own code finds
best among the feasible COMPLETE trials (for several objectives the Pareto front, Optuna's
_get_pareto_front_trials_by_trials); where every COMPLETE trial is feasible, exactly
study.best_trial / study.best_trials (Optuna 3.1 does not filter those by feasibility).

Run by tests/integration/export_test.cc; exits 0 when everything matches, 1 with one line per
difference otherwise.
"""

import datetime
import json
import math
import sys

import optuna
from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                  IntDistribution)
from optuna.study._multi_objective import _get_pareto_front_trials_by_trials
from optuna.trial import TrialState


def number(v):
    """A value as triald's JSON carries it: a number, or "nan" / "inf" / "-inf"."""
    return float(v) if isinstance(v, str) else v


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) == type(b)


def distribution(d):
    """triald's distribution JSON (config::Distribution::ToJson) as Optuna's object."""
    if d["type"] == "float":
        return FloatDistribution(d["low"], d["high"], log=d["log"],
                                 step=d["step"] if d["step"] else None)
    if d["type"] == "int":
        return IntDistribution(int(d["low"]), int(d["high"]), log=d["log"],
                               step=int(d["step"]) if d["step"] else 1)
    return CategoricalDistribution(d["choices"])


# The trial's "resources" key -> the Optuna user attribute that carries it (study_export.h).
RESOURCE_ATTRS = (("peak_memory_bytes", "triald_peak_memory_bytes", int),
                  ("peak_gpu_memory_bytes", "triald_peak_gpu_memory_bytes", int),
                  ("cpu_time_s", "triald_cpu_time_s", float),
                  ("wall_s", "triald_wall_s", float),
                  ("memory_source", "triald_memory_source", str),
                  ("cpu_source", "triald_cpu_source", str))


def check_resources(got, want, where, check):
    """The measured resources as user attributes: present when measured, absent (never 0)
    otherwise."""
    resources = want.get("resources") or {}
    for key, attr, kind in RESOURCE_ATTRS:
        expected = resources.get(key)
        if expected is None or expected == "":
            check(attr not in got.user_attrs,
                  where + "user attr %s = %r for a value not measured"
                  % (attr, got.user_attrs.get(attr)))
            continue
        value = got.user_attrs.get(attr)
        check(isinstance(value, kind) and value == expected,
              where + "user attr %s = %r, expected %r" % (attr, value, expected))


def feasible(trial):
    """Optuna's definition: every value of the "constraints" system attribute <= 0."""
    return all(c <= 0 for c in trial.system_attrs.get("constraints") or [])


def check_best(study, best, check):
    """`trialctl best --json` against what Optuna computes from the storage."""
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    ok = [t for t in complete if feasible(t)]
    if len(study.directions) > 1:
        got = [t["number"] for t in best["best_trials"]]
        front = sorted(t.number for t in _get_pareto_front_trials_by_trials(ok, study.directions))
        check(got == front, "best_trials %s, Optuna's front of the feasible trials %s"
              % (got, front))
        if len(ok) == len(complete):
            optuna_best = sorted(t.number for t in study.best_trials)
            check(got == optuna_best, "best_trials %s, study.best_trials %s" % (got, optuna_best))
        by_number = {t.number: t for t in trials}
        for t in best["best_trials"]:
            values = [number(v) for v in t["values"]]
            check(by_number[t["number"]].values == values,
                  "best trial %d: values %r in Optuna, %r from trialctl best"
                  % (t["number"], by_number[t["number"]].values, values))
        check(best.get("feasible") == len(ok),
              "best: %r feasible, Optuna's storage has %d" % (best.get("feasible"), len(ok)))
        return
    sign = -1 if study.direction.name == "MAXIMIZE" else 1
    values = [t for t in ok if not math.isnan(t.value)]
    want = min(values, key=lambda t: (sign * t.value, t.number)).number if values else None
    got = best["number"] if best is not None else None
    check(got == want, "best trial %r, Optuna's best feasible trial %r" % (got, want))
    if len(ok) == len(complete) and complete:
        check(got == study.best_trial.number,
              "best trial %r, study.best_trial %d" % (got, study.best_trial.number))


def main():
    db, exported = sys.argv[1], sys.argv[2]
    with open(exported) as f:
        data = json.load(f)
    errors = []

    def check(cond, what):
        if not cond:
            errors.append(what)

    name = data["study"]["name"]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage("sqlite:///" + db)
    check(storage.get_current_version() == storage.get_head_version(),
          "schema version %s, Optuna's head is %s" % (storage.get_current_version(),
                                                      storage.get_head_version()))
    study = optuna.load_study(study_name=name, storage=storage)
    directions = data["study"].get("directions") or [data["study"]["direction"]]
    check([d.name for d in study.directions] == [d.upper() for d in directions],
          "directions %s, expected %s" % ([d.name for d in study.directions], directions))
    multi = len(directions) > 1
    trials = study.get_trials(deepcopy=False)
    check(len(trials) == len(data["trials"]),
          "%d trials in Optuna, %d exported" % (len(trials), len(data["trials"])))
    by_number = {t.number: t for t in trials}

    for want in data["trials"]:
        n = want["number"]
        got = by_number.get(n)
        if got is None:
            errors.append("trial %d missing" % n)
            continue
        where = "trial %d: " % n
        check(got.state == TrialState[want["state"]],
              where + "state %s, expected %s" % (got.state.name, want["state"]))
        # Parameters: Optuna's external values and distributions.
        check(set(got.params) == set(want["params"]),
              where + "params %s, expected %s" % (sorted(got.params), sorted(want["params"])))
        for pname, pvalue in want["params"].items():
            dist = distribution(want["distributions"][pname])
            check(got.distributions.get(pname) == dist,
                  where + "%s distribution %r, expected %r"
                  % (pname, got.distributions.get(pname), dist))
            expected = pvalue
            if isinstance(dist, FloatDistribution):
                expected = float(number(pvalue))
            check(same(got.params.get(pname), expected),
                  where + "%s = %r, expected %r" % (pname, got.params.get(pname), expected))
            check(dist.to_internal_repr(got.params.get(pname))
                  == number(want["params_internal"][pname]),
                  where + "%s internal value differs" % pname)
        # The objective: COMPLETE and PRUNED trials keep theirs (a pruned trial's is its last
        # intermediate value, in Optuna as in triald); failed trials have none.
        if multi:
            values = None
            if want["state"] == "COMPLETE":
                values = [number(v) for v in want["values"]]
            check(got.values == values, where + "values %r, expected %r" % (got.values, values))
        else:
            value = number(want["value"]) if want["value"] is not None else None
            if want["state"] == "FAIL":
                value = None
            check(same(got.value, value), where + "value %r, expected %r" % (got.value, value))
        constraints = [number(c) for c in want.get("constraints") or []] or None
        check(got.system_attrs.get("constraints") == constraints,
              where + "system attr constraints %r, expected %r"
              % (got.system_attrs.get("constraints"), constraints))
        inter = {int(s): number(v) for s, v in want["intermediate"]}
        check(len(got.intermediate_values) == len(inter)
              and all(same(got.intermediate_values.get(s), v) for s, v in inter.items()),
              where + "intermediate values differ (%d in Optuna, %d exported)"
              % (len(got.intermediate_values), len(inter)))
        for key, v in want["attrs"].items():
            check(got.user_attrs.get(key) == v,
                  where + "user attr %s = %r, expected %r" % (key, got.user_attrs.get(key), v))
        check_resources(got, want, where, check)
        if want["state"] == "FAIL":
            check(got.user_attrs.get("triald_fail_reason") == want["fail_reason"],
                  where + "triald_fail_reason %r" % got.user_attrs.get("triald_fail_reason"))
        # Datetimes: Optuna keeps naive local times to the microsecond.
        for attr, key in (("datetime_start", "started_at"), ("datetime_complete", "finished_at")):
            t = getattr(got, attr)
            if want[key] is None:
                check(t is None, where + "%s %s, expected none" % (attr, t))
                continue
            expected = datetime.datetime.fromtimestamp(want[key])
            check(t is not None and abs((t - expected).total_seconds()) < 2e-6,
                  where + "%s %s, expected %s" % (attr, t, expected))

    if len(sys.argv) > 3:
        with open(sys.argv[3]) as f:
            check_best(study, json.load(f), check)
    elif not multi:  # the study summary's best, by the same rule as `trialctl best`
        check_best(study, data["study"]["best"], check)
    # What optuna-dashboard lists first: the study summaries of the storage.
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=True)
    check([s.study_name for s in summaries] == [name],
          "study summaries name %s" % [s.study_name for s in summaries])
    check(summaries[0].n_trials == len(data["trials"]),
          "summary counts %d trials" % summaries[0].n_trials)
    # And a copy into a fresh in-memory storage reads every trial back through Optuna's API.
    copy = optuna.storages.InMemoryStorage()
    optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=copy)
    check(len(optuna.load_study(study_name=name, storage=copy).trials) == len(data["trials"]),
          "copy_study lost trials")

    for e in errors:
        print("check_optuna_export: " + e)
    if errors:
        return 1
    print("check_optuna_export: %d trials match (Optuna %s)" % (len(trials), optuna.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
