#!/usr/bin/python3
"""Checks that a kind = "python" study stored what Optuna 3.1 stores for the same suggest calls.

usage: check_optuna_aliases.py STORAGE.db STUDY OBJECTIVE.py FUNCTION

STORAGE.db is `trialctl export STUDY --format optuna` of a study whose trials ran FUNCTION of
OBJECTIVE.py through triald. Each trial's parameters are enqueued into an in-memory Optuna study
that then runs the same function with Optuna's own Trial: the parameters (values and their
Python types) and distributions Optuna records must equal those triald stored. Run by
tests/integration/python_requests_test.cc (with the deprecated suggest aliases); exits 0 when
everything matches, 1 with one line per difference otherwise.
"""

import importlib.util
import sys
import warnings

import optuna


def load_function(path, name):
    spec = importlib.util.spec_from_file_location("objective_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def main():
    db, name, path, function = sys.argv[1:5]
    objective = load_function(path, function)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stored = optuna.load_study(study_name=name, storage="sqlite:///" + db)
    trials = stored.get_trials(deepcopy=False)
    errors = []
    for ours in trials:
        reference = optuna.create_study()
        reference.enqueue_trial(ours.params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference.optimize(objective, n_trials=1)
        theirs = reference.trials[0]
        where = "trial %d" % ours.number
        if theirs.state != optuna.trial.TrialState.COMPLETE:
            errors.append("%s: Optuna's run ended %s" % (where, theirs.state.name))
        if set(ours.params) != set(theirs.params):
            errors.append("%s: parameters %s, Optuna's %s" % (where, sorted(ours.params),
                                                              sorted(theirs.params)))
        for param in sorted(set(ours.params) & set(theirs.params)):
            mine, expected = ours.params[param], theirs.params[param]
            if mine != expected or type(mine) is not type(expected):
                errors.append("%s: %s = %r (%s), Optuna's %r (%s)" % (
                    where, param, mine, type(mine).__name__, expected, type(expected).__name__))
            if ours.distributions[param] != theirs.distributions[param]:
                errors.append("%s: %s has %r, Optuna's %r" % (
                    where, param, ours.distributions[param], theirs.distributions[param]))
        if ours.value != theirs.value:
            errors.append("%s: value %r, Optuna's %r" % (where, ours.value, theirs.value))
    for e in errors:
        print("check_optuna_aliases: " + e)
    if errors or not trials:
        return 1
    print("check_optuna_aliases: %d trials match (Optuna %s)" % (len(trials), optuna.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
