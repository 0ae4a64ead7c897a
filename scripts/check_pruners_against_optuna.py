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
import math
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
    if kind == "threshold":
        return optuna.pruners.ThresholdPruner(
            lower=p["lower"], upper=p["upper"], n_warmup_steps=p["n_warmup_steps"],
            interval_steps=p["interval_steps"])
    if kind == "patient":
        wrapped = p["wrapped"]
        return optuna.pruners.PatientPruner(
            make_pruner(optuna, wrapped) if wrapped is not None else None,
            patience=p["patience"], min_delta=p["min_delta"])
    if kind == "wilcoxon":
        # Optuna 3.1 has no WilcoxonPruner (it came in 3.6): a transcription of Optuna 4's, with
        # SciPy's test transcribed too (SciPy is not a dependency here).
        return wilcoxon_pruner_transcription(optuna, p["p_threshold"], p["n_startup_steps"])
    raise ValueError(f"unknown pruner kind {kind!r}")


def wilcoxon_zsplit_pvalue(d, alternative):
    """scipy.stats.wilcoxon(d, zero_method="zsplit", alternative=alternative).pvalue with SciPy
    1.15's defaults (method "auto", correction=False), transcribed from scipy/stats/_wilcoxon.py
    for one-sided alternatives. Ranks are handled in quarter units, where every quantity is an
    integer."""
    n = len(d)
    order = sorted(range(n), key=lambda i: abs(d[i]))
    rank4 = [0] * n  # 4 * the average rank
    ties = []  # tie group sizes
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j + 1):
            rank4[order[k]] = 2 * (i + 1 + j + 1)
        ties.append(j - i + 1)
        i = j + 1
    has_ties = any(t > 1 for t in ties)
    n_zero = sum(1 for x in d if x == 0)
    r_plus4 = sum(r for x, r in zip(d, rank4) if x > 0) + sum(r for x, r in zip(d, rank4)
                                                            if x == 0) // 2
    greater = alternative == "greater"
    if n <= 50 and not has_ties and n_zero == 0:
        # SciPy's _get_wilcoxon_distr: the pmf of the statistic, built by halving.
        pmf = [1.0]
        for k in range(1, n + 1):
            prev = pmf
            pmf = [0.0] * (k * (k + 1) // 2 + 1)
            for s, v in enumerate(prev):
                pmf[s] += v * 0.5
                pmf[s + k] += v * 0.5
        r = r_plus4 // 4
        mean = n * (n + 1) / 4
        if greater:  # sf(r) = P(T >= r)
            return sum(pmf[r:]) if r <= mean else 1 - sum(pmf[:r])
        return sum(pmf[:r + 1]) if r <= mean else 1 - sum(pmf[r + 1:])
    if n <= 13:
        # SciPy's permutation test over all 2^n sign flips; zeros never change the statistic,
        # so count over the non-zero entries' signs: the distribution of sums of their ranks.
        nonzero = [r for x, r in zip(d, rank4) if x != 0]
        base = r_plus4 - sum(r for x, r in zip(d, rank4) if x > 0)  # the zeros' half ranks
        counts = {0: 1}
        for r in nonzero:
            nxt = dict(counts)
            for s, c in counts.items():
                nxt[s + r] = nxt.get(s + r, 0) + c
            counts = nxt
        total = 2 ** len(nonzero)
        if greater:
            hits = sum(c for s, c in counts.items() if base + s >= r_plus4)
        else:
            hits = sum(c for s, c in counts.items() if base + s <= r_plus4)
        return hits / total
    mn = n * (n + 1) * 0.25
    se = math.sqrt((n * (n + 1) * (2 * n + 1) - sum(t ** 3 - t for t in ties) / 2) / 24)
    z = (r_plus4 / 4 - mn) / se
    return 0.5 * math.erfc(z / math.sqrt(2)) if greater else 0.5 * math.erfc(-z / math.sqrt(2))


def wilcoxon_pruner_transcription(optuna, p_threshold, n_startup_steps):
    """optuna.pruners.WilcoxonPruner.prune as Optuna 4 writes it, for Optuna 3.1's study."""
    from optuna.study import StudyDirection

    class WilcoxonPruner(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            values = trial.intermediate_values
            if not values or not all(math.isfinite(v) for v in values.values()):
                return False
            try:
                best = study.best_trial
            except ValueError:
                return False
            best_values = best.intermediate_values
            if not best_values or not all(math.isfinite(v) for v in best_values.values()):
                return False
            d = [v - best_values[s] for s, v in sorted(values.items()) if s in best_values]
            if len(d) < max(2, n_startup_steps):
                return False
            mean = sum(values.values()) / len(values)
            best_mean = sum(best_values.values()) / len(best_values)
            if study.direction == StudyDirection.MAXIMIZE:
                alternative, average_is_best = "less", best_mean <= mean
            else:
                alternative, average_is_best = "greater", best_mean >= mean
            p = wilcoxon_zsplit_pvalue(d, alternative)
            if p < p_threshold and average_is_best:
                return False
            return p < p_threshold

    return WilcoxonPruner()


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
