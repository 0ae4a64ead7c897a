"""The define-by-run Python runner (python3 -m triald run) against a fake daemon.

Each test starts the runner as triald would (a subprocess whose TRIALD_REPORT_FD is one end of a
Unix stream socketpair) and plays the daemon's side from a script: it answers suggests and
should_prune, records every line, and may stop the trial with SIGTERM. Where Optuna defines the
behaviour (distributions, validation messages, deprecated aliases, the messages for objective
values it refuses), python3-optuna 3.1 itself is the reference.

Run: python3 -m unittest discover -s tests/proto -p python_runner_test.py  (CTest: python_runner)
"""

import io
import hashlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_DIR = os.path.join(HERE, "..", "..", "proto", "client", "python")
OBJECTIVES = os.path.join(HERE, "python_objectives")
sys.path.insert(0, CLIENT_DIR)

import optuna  # noqa: E402  (python3-optuna: the reference these tests compare with)
import triald  # noqa: E402
from triald._optuna import ReplayAnswers  # noqa: E402
from triald._wire import LineWriter  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)

# How long any one runner may take before the test fails instead of hanging.
TIMEOUT_S = 60


def objective_file(name):
    return os.path.join(OBJECTIVES, name)


class FakeDaemon:
    """The daemon's side of the trial channel, scripted.

    values: name -> the value a suggest for that name gets. prune: answers to should_prune, in
    order (False once used up). A name asked again with another distribution, or a name without
    a value, gets an error answer, as the daemon ends such a trial FAIL(protocol).
    `on_line(message, process)` may act on a line first (e.g. SIGTERM the runner) and return
    False to leave it unanswered; `close_on` closes the channel on the first line of that type.
    """

    def __init__(self, values=None, prune=(), on_line=None, close_on=None):
        self.values = dict(values or {})
        self.prune = list(prune)
        self.on_line = on_line
        self.close_on = close_on
        self.distributions = {}

    def answer(self, message):
        if message["type"] == "suggest":
            name, distribution = message["name"], message["distribution"]
            known = self.distributions.setdefault(name, distribution)
            if known != distribution:
                return {"type": "error", "message": f"parameter {name!r} was suggested with "
                        f"{json.dumps(known)} and now with {json.dumps(distribution)}"}
            if name not in self.values:
                return {"type": "error", "message": f"no value scripted for {name!r}"}
            return {"type": "suggestion", "name": name, "value": self.values[name]}
        if message["type"] == "should_prune":
            return {"type": "should_prune", "value": self.prune.pop(0) if self.prune else False}
        return None


def is_code_line(message):
    """The runner's first line: which code the trial runs (the "triald.code" attribute)."""
    return message.get("type") == "attr" and message.get("key") == "triald.code"


class Result:
    def __init__(self, returncode, lines, stdout, stderr):
        self.returncode = returncode
        # The code line is checked by its own test; the others read the lines after it.
        self.code = [line for line in lines if is_code_line(line)]
        self.lines = [line for line in lines if not is_code_line(line)]
        self.stdout = stdout
        self.stderr = stderr

    def types(self):
        return [line["type"] for line in self.lines]

    def suggested(self):
        return [line["name"] for line in self.lines if line["type"] == "suggest"]

    def attrs(self):
        return {line["key"]: line["value"] for line in self.lines if line["type"] == "attr"}


def runner_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = CLIENT_DIR + (os.pathsep + env["PYTHONPATH"]
                                      if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def run_with_daemon(spec, daemon, cwd=None, env=None, args=()):
    """Runs `python3 -m triald run SPEC [ARGS]` with `daemon` on the other end of its
    channel."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.settimeout(TIMEOUT_S)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = runner_env(dict({"TRIALD_TRIAL": "7"}, **(env or {}),
                              TRIALD_REPORT_FD=str(theirs.fileno())))
        process = subprocess.Popen([sys.executable, "-m", "triald", "run", spec] + list(args),
                                   pass_fds=[theirs.fileno()], stdout=out, stderr=err,
                                   env=env, cwd=cwd or tempfile.gettempdir())
        theirs.close()
        lines = []
        try:
            reader = ours.makefile("rb")
            for raw in reader:
                message = json.loads(raw)
                lines.append(message)
                if daemon.close_on == message["type"]:
                    break
                if daemon.on_line is not None and daemon.on_line(message, process) is False:
                    continue
                answer = daemon.answer(message)
                if answer is not None:
                    ours.sendall(json.dumps(answer).encode() + b"\n")
            reader.close()
            ours.close()
            returncode = process.wait(timeout=TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        out.seek(0)
        err.seek(0)
        return Result(returncode, lines, out.read().decode(), err.read().decode())


def run_by_hand(args, cwd=None, env=None):
    """`python3 -m triald ARGS` without a daemon (replay or check)."""
    completed = subprocess.run([sys.executable, "-m", "triald"] + args, capture_output=True,
                               env=runner_env(env), cwd=cwd or tempfile.gettempdir(),
                               timeout=TIMEOUT_S)
    lines = [json.loads(line) for line in completed.stdout.decode().splitlines()
             if line.startswith("{")]
    return Result(completed.returncode, lines, completed.stdout.decode(),
                  completed.stderr.decode())


def replay_trial(params):
    """An OptunaTrial in this process, answered from `params`; its lines go to the StringIO."""
    out = io.StringIO()
    writer = LineWriter(None, out)
    return triald.OptunaTrial(writer, ReplayAnswers(params, writer), replay=True), out


def sent(out):
    return [json.loads(line) for line in out.getvalue().splitlines()]


def optuna_tell_message(value):
    """The message Optuna 3.1 gives for an objective value it does not accept (study.tell warns
    it when no state is given, as Study.optimize records it)."""
    study = optuna.create_study()
    trial = study.ask()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study.tell(trial, value)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    return str(caught[-1].message)


class ConditionalSpaceTest(unittest.TestCase):
    def test_parameters_of_the_branch_not_taken_are_never_asked(self):
        daemon = FakeDaemon({"optimizer": "adam", "lr": 0.01, "momentum": 0.9, "layers": 1,
                             "width_0": 32, "width_1": 64, "width_2": 128})
        result = run_with_daemon(objective_file("conditional.py") + ":objective", daemon)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.suggested(), ["optimizer", "lr", "layers", "width_0"])
        self.assertEqual(result.lines[-1], {"type": "final", "value": -2 + 32 / 1000})
        attrs = result.attrs()
        self.assertEqual(attrs["params"], {"optimizer": "adam", "lr": 0.01, "layers": 1,
                                           "width_0": 32})
        self.assertEqual(attrs["number"], 7)  # TRIALD_TRIAL
        self.assertEqual(attrs["units"], 64)  # the sibling module units.py was imported

    def test_the_other_branch_asks_its_own_parameters(self):
        daemon = FakeDaemon({"optimizer": "sgd", "lr": 0.001, "momentum": 0.5, "layers": 2,
                             "width_0": 16, "width_1": 48})
        result = run_with_daemon(objective_file("conditional.py") + ":objective", daemon)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.suggested(),
                         ["optimizer", "lr", "momentum", "layers", "width_0", "width_1"])
        distributions = {line["name"]: line["distribution"] for line in result.lines
                         if line["type"] == "suggest"}
        self.assertEqual(distributions["optimizer"],
                         {"type": "categorical", "choices": ["adam", "sgd"]})
        self.assertEqual(distributions["lr"],
                         {"type": "float", "low": 1e-5, "high": 0.1, "log": True})
        self.assertEqual(distributions["momentum"],
                         {"type": "float", "low": 0.0, "high": 0.99, "log": False})
        self.assertEqual(distributions["width_1"],
                         {"type": "int", "low": 16, "high": 128, "step": 16, "log": False})

    def test_the_main_block_does_not_run(self):
        with tempfile.TemporaryDirectory() as mark_dir:
            daemon = FakeDaemon({"optimizer": "adam", "lr": 0.01, "layers": 1, "width_0": 16})
            result = run_with_daemon(objective_file("conditional.py") + ":objective", daemon,
                                     env={"MAIN_BLOCK_MARK_DIR": mark_dir})
            self.assertEqual(result.returncode, 0, result.stderr)
            checked = run_by_hand(["check", objective_file("conditional.py") + ":objective"],
                                  env={"MAIN_BLOCK_MARK_DIR": mark_dir})
            self.assertEqual(checked.returncode, 0, checked.stderr)
            self.assertEqual(os.listdir(mark_dir), [])

    def test_a_module_spec_imports_from_the_working_directory(self):
        result = run_with_daemon("endings:returns_float", FakeDaemon({"k": 2}), cwd=OBJECTIVES)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-1], {"type": "final", "value": 2.25})

    def test_the_objective_imports_the_runners_own_module(self):
        result = run_with_daemon(objective_file("endings.py") + ":same_module", FakeDaemon())
        self.assertEqual(result.lines, [{"type": "final", "value": 1.0}], result.stderr)


class CodeLineTest(unittest.TestCase):
    def test_the_first_line_says_which_code_the_trial_runs(self):
        spec = objective_file("endings.py") + ":same_module"
        result = run_with_daemon(spec, FakeDaemon())
        self.assertEqual(result.returncode, 0, result.stderr)
        path = os.path.abspath(objective_file("endings.py"))
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(result.code, [{"type": "attr", "key": "triald.code",
                                        "value": {"objective": {"path": path,
                                                                "sha256": digest}}}])

    def test_check_reports_the_files_the_functions_came_from(self):
        result = run_by_hand(["check", objective_file("objectives.py") + ":two_values",
                              "--constraints", objective_file("endings.py") + ":same_module",
                              "--report"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-1]["files"],
                         [os.path.abspath(objective_file("objectives.py")),
                          os.path.abspath(objective_file("endings.py"))])

    def test_a_replay_sends_no_code_line(self):
        result = run_by_hand(["run", objective_file("endings.py") + ":same_module",
                              "--params", "{}"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-1]["type"], "final")  # its lines go to stdout
        self.assertEqual(result.code, [])


class SameNameTest(unittest.TestCase):
    def test_same_name_and_distribution_is_one_request_and_one_value(self):
        result = run_with_daemon(objective_file("conditional.py") + ":same_name",
                                 FakeDaemon({"x": 0.375}))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.suggested(), ["x"])
        self.assertEqual(result.attrs(), {"same": True})
        self.assertEqual(result.lines[-1], {"type": "final", "value": 0.75})

    def test_a_conflicting_distribution_is_sent_and_the_daemons_refusal_ends_the_run(self):
        result = run_with_daemon(objective_file("conditional.py") + ":conflicting",
                                 FakeDaemon({"x": 0.5}))
        self.assertEqual(result.returncode, 1)
        asked = [line for line in result.lines if line["type"] == "suggest"]
        self.assertEqual([line["distribution"]["high"] for line in asked], [1.0, 2.0])
        self.assertEqual(result.lines[-1]["type"], "error")
        self.assertIn("triald refused the suggest request: parameter 'x' was suggested with",
                      result.lines[-1]["message"])
        self.assertNotIn("final", result.types())

    def test_a_conflicting_distribution_in_replay_names_both(self):
        result = run_by_hand(["run", objective_file("conditional.py") + ":conflicting",
                              "--params", '{"x": 0.5}'])
        self.assertEqual(result.returncode, 1)
        message = result.lines[-1]["message"]
        self.assertIn("parameter 'x' was suggested with FloatDistribution(high=1.0, log=False, "
                      "low=-1.0, step=None) and now with FloatDistribution(high=2.0, log=False, "
                      "low=-1.0, step=None)", message)
        self.assertEqual(result.suggested(), ["x"])  # the conflict is not sent


class OptunaSemanticsTest(unittest.TestCase):
    """Each call against optuna.trial.FixedTrial given the same values."""

    CALLS = [
        ("suggest_uniform", ("a", 0.0, 1.0), {}, 0.5),
        ("suggest_loguniform", ("b", 1e-3, 1.0), {}, 0.01),
        ("suggest_discrete_uniform", ("c", 0.0, 1.0, 0.3), {}, 0.6),
        ("suggest_int", ("d", 1, 10, 3), {}, 4),  # step by position
        ("suggest_int", ("e", 1, 16, 1, True), {}, 8),  # log by position
        ("suggest_int", ("f", 0, 9), {"step": 2}, 2),
        ("suggest_float", ("g", 0, 1), {"step": 0.25}, 0.75),
        ("suggest_float", ("h", 0.1, 0.95), {"step": 0.1}, 0.3),
        ("suggest_float", ("i", 1e-4, 1.0), {"log": True}, 0.001),
        ("suggest_categorical", ("j", ["x", 2, 2.5, True]), {}, 2.5),
    ]

    def test_aliases_map_and_warn_as_optuna(self):
        params = {call[1][0]: call[3] for call in self.CALLS}
        ours, out = replay_trial(params)
        reference = optuna.trial.FixedTrial(params)
        for method, args, kwargs, value in self.CALLS:
            with self.subTest(method=method, args=args, kwargs=kwargs):
                results = []
                for trial in (ours, reference):
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        got = getattr(trial, method)(*args, **kwargs)
                    results.append((got, sorted(w.category.__name__ for w in caught)))
                self.assertEqual(results[0], results[1])
                self.assertEqual(type(results[0][0]), type(results[1][0]))
                name = args[0]
                mine, theirs = ours.distributions[name], reference.distributions[name]
                self.assertEqual(type(mine).__name__, type(theirs).__name__)
                for field in ("low", "high", "step", "log", "choices"):
                    if hasattr(theirs, field):
                        self.assertEqual(getattr(mine, field), getattr(theirs, field), field)
                        self.assertEqual(type(getattr(mine, field)),
                                         type(getattr(theirs, field)), field)
                # What went on the wire is that distribution.
                line = [m for m in sent(out) if m.get("name") == name][-1]
                for field, wire_value in line["distribution"].items():
                    if field != "type":
                        expected = getattr(theirs, field)
                        self.assertEqual(wire_value, list(expected) if field == "choices"
                                         else expected, field)
        self.assertEqual(ours.params, reference.params)

    def test_deprecated_aliases_warn_futurewarning_naming_the_replacement(self):
        ours, _ = replay_trial({"a": 0.5})
        with self.assertWarns(FutureWarning) as caught:
            ours.suggest_uniform("a", 0.0, 1.0)
        self.assertIn("suggest_uniform has been deprecated in v3.0.0", str(caught.warning))
        self.assertIn("suggest_float", str(caught.warning))

    def test_suggest_float_takes_step_and_log_by_keyword_only(self):
        ours, _ = replay_trial({"x": 0.5})
        with self.assertRaises(TypeError):
            ours.suggest_float("x", 0.0, 1.0, 0.1)
        with self.assertRaises(TypeError):
            optuna.trial.FixedTrial({"x": 0.5}).suggest_float("x", 0.0, 1.0, 0.1)

    def test_invalid_distributions_raise_optunas_valueerror(self):
        bad = [
            ("suggest_float", ("x", 1.0, 0.0), {}),
            ("suggest_float", ("x", 0.0, 1.0), {"log": True}),
            ("suggest_float", ("x", -1.0, 1.0), {"log": True}),
            ("suggest_float", ("x", 0.1, 1.0), {"log": True, "step": 0.1}),
            ("suggest_float", ("x", 0.0, 1.0), {"step": 0}),
            ("suggest_float", ("x", 0.0, 1.0), {"step": -0.5}),
            ("suggest_int", ("n", 5, 1), {}),
            ("suggest_int", ("n", 0, 5), {"log": True}),
            ("suggest_int", ("n", 1, 5), {"log": True, "step": 2}),
            ("suggest_int", ("n", 1, 5), {"step": 0}),
            ("suggest_categorical", ("c", []), {}),
            ("suggest_uniform", ("x", 2.0, 1.0), {}),
            ("suggest_loguniform", ("x", 0.0, 1.0), {}),
            ("suggest_discrete_uniform", ("x", 0.0, 1.0, 0.0), {}),
        ]
        for method, args, kwargs in bad:
            with self.subTest(method=method, args=args, kwargs=kwargs):
                ours, out = replay_trial({"x": 0.5, "n": 2, "c": 1})
                reference = optuna.trial.FixedTrial({"x": 0.5, "n": 2, "c": 1})
                messages = []
                for trial in (ours, reference):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        with self.assertRaises(ValueError) as raised:
                            getattr(trial, method)(*args, **kwargs)
                    messages.append(str(raised.exception))
                self.assertEqual(messages[0], messages[1])
                self.assertEqual(out.getvalue(), "")  # refused before anything is sent

    def test_what_the_wire_cannot_carry_is_refused_before_sending(self):
        for call in (lambda t: t.suggest_categorical("c", ["a", None]),
                     lambda t: t.suggest_categorical("c", [1, 1.0]),
                     lambda t: t.suggest_categorical("c", [float("nan")]),
                     lambda t: t.suggest_float("x", 0.0, float("inf")),
                     lambda t: t.report(float("nan"), 0),
                     lambda t: t.set_user_attr("", 1),
                     lambda t: t.set_user_attr("k", float("inf"))):
            ours, out = replay_trial({"c": "a", "x": 0.5})
            with self.assertRaises(ValueError):
                call(ours)
            self.assertEqual(out.getvalue(), "")

    def test_bools_and_numbers_are_distinct_choices(self):
        ours, out = replay_trial({"c": True})
        self.assertIs(ours.suggest_categorical("c", [1, True]), True)
        self.assertEqual(sent(out)[0]["distribution"]["choices"], [1, True])

    def test_report_takes_optunas_argument_order_and_ignores_a_repeated_step(self):
        ours, out = replay_trial({})
        ours.report(0.5, 3)
        with self.assertWarns(UserWarning):
            ours.report(0.25, 3)
        with self.assertRaises(TypeError):
            ours.report("high", 4)
        with self.assertRaises(ValueError):
            ours.report(0.5, -1)
        self.assertEqual(sent(out), [{"type": "report", "step": 3, "value": 0.5}])
        self.assertFalse(ours.should_prune())  # replay: never pruned

    def test_heartbeat_sends_a_heartbeat_line(self):
        ours, out = replay_trial({})
        ours.heartbeat()
        self.assertEqual(sent(out), [{"type": "heartbeat"}])

    def test_user_attrs_params_distributions_are_copies(self):
        ours, out = replay_trial({"x": 0.5})
        ours.set_user_attr("meta", {"a": [1, 2]})
        ours.suggest_float("x", 0.0, 1.0)
        ours.user_attrs["meta"]["a"].append(3)
        ours.params["x"] = 9
        self.assertEqual(ours.user_attrs, {"meta": {"a": [1, 2]}})
        self.assertEqual(ours.params, {"x": 0.5})
        self.assertEqual(ours.distributions, {"x": triald.FloatDistribution(0.0, 1.0)})
        self.assertEqual(ours.number, 0)
        self.assertIsNotNone(ours.datetime_start)
        self.assertEqual(sent(out)[0], {"type": "attr", "key": "meta", "value": {"a": [1, 2]}})

    def test_the_legacy_trial_sends_constraints_and_several_values(self):
        read_end, write_end = os.pipe()
        try:
            legacy = triald.Trial(handle_sigterm=False,
                                  environ={"TRIALD_REPORT_FD": str(write_end)})
            with self.assertRaisesRegex(ValueError, "^Constraint values cannot be NaN.$"):
                legacy.constraints([0.0, math.nan])
            with self.assertRaisesRegex(ValueError, "constraints\\[0\\] is a bool"):
                legacy.constraints([True])
            legacy.constraints((-1, 0.5))
            legacy.finish(values=[0.25, 812])
            with self.assertRaisesRegex(RuntimeError, "must come before finish"):
                legacy.constraints([1.0])
            os.close(write_end)
            write_end = None
            with os.fdopen(read_end, "rb") as f:
                read_end = None
                lines = [json.loads(line) for line in f]
        finally:
            for fd in (read_end, write_end):
                if fd is not None:
                    os.close(fd)
        self.assertEqual(lines, [{"type": "constraints", "values": [-1.0, 0.5]},
                                 {"type": "final", "values": [0.25, 812.0]}])


def legacy_lines(calls):
    """The lines a triald.Trial (the helper of exec scripts) sends while calls(trial) runs."""
    read_end, write_end = os.pipe()
    try:
        legacy = triald.Trial(handle_sigterm=False, environ={"TRIALD_REPORT_FD": str(write_end)})
        calls(legacy)
        os.close(write_end)
        write_end = None
        with os.fdopen(read_end, "rb") as f:
            read_end = None
            return [json.loads(line) for line in f]
    finally:
        for fd in (read_end, write_end):
            if fd is not None:
                os.close(fd)


def reports(lines):
    return [(line["step"], line["value"]) for line in lines if line["type"] == "report"]


class LegacyTrialReportTest(unittest.TestCase):
    """triald.Trial.report: Optuna's order, report(value, step), and its own old order,
    report(step, value), where the arguments tell which is which."""

    def test_it_is_not_the_optuna_trial(self):
        self.assertIsNot(triald.Trial, triald.OptunaTrial)

    def test_value_then_step_records_what_optunas_report_records(self):
        calls = [(0.5, 0), (0.25, 3), (2.5, 7), (3, 10)]  # (3, 10): two ints, as Optuna reads them
        study = optuna.create_study()
        reference = study.ask()
        for value, step in calls:
            reference.report(value, step)
        study.tell(reference, 0.0)
        expected = sorted(study.trials[0].intermediate_values.items())

        def report_all(trial):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (3, 10)'s
                for value, step in calls:
                    trial.report(value, step)
        self.assertEqual(reports(legacy_lines(report_all)), expected)
        self.assertEqual(expected, [(0, 0.5), (3, 0.25), (7, 2.5), (10, 3.0)])

    def test_the_old_order_is_still_read_as_step_then_value(self):
        import numpy

        def old_calls(trial):
            trial.report(2, 0.5)  # (step, value), as before
            trial.report(numpy.int64(3), numpy.float64(0.25))
            trial.report(4, value=0.125)
            trial.report(step=5, value=1.0)
            trial.finish(0.25)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # none of these is ambiguous
            lines = legacy_lines(old_calls)
        self.assertEqual(lines, [{"type": "report", "step": 2, "value": 0.5},
                                 {"type": "report", "step": 3, "value": 0.25},
                                 {"type": "report", "step": 4, "value": 0.125},
                                 {"type": "report", "step": 5, "value": 1.0},
                                 {"type": "final", "value": 0.25}])

    def test_two_integers_are_read_in_optunas_order_with_a_warning(self):
        def ambiguous(trial):
            with self.assertWarnsRegex(UserWarning, r"report\(7, 8\): two integers are read "
                                                    r"in Optuna's order, value 7 at step 8"):
                trial.report(7, 8)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                trial.report(7.0, 9)  # a float value: not ambiguous
                trial.report(9, value=7)  # by keyword: not ambiguous
        self.assertEqual(reports(legacy_lines(ambiguous)), [(8, 7.0), (9, 7.0), (9, 7.0)])

    def test_what_is_no_step_and_value_is_refused_before_sending(self):
        def refused(trial):
            for call, error in ((lambda: trial.report(1, True), ValueError),  # a bool: no value
                                (lambda: trial.report(True, 1.0), ValueError),  # nor a step
                                (lambda: trial.report(0.5, 0.25), ValueError),
                                (lambda: trial.report(0.5, -1), ValueError),
                                (lambda: trial.report(-1, 0.5), ValueError),
                                (lambda: trial.report(1, float("nan")), ValueError),
                                (lambda: trial.report(0.5), TypeError),
                                (lambda: trial.report(0.5, 1, 2), TypeError),
                                (lambda: trial.report(0.5, stp=1), TypeError)):
                with self.assertRaises(error):
                    call()
        self.assertEqual(legacy_lines(refused), [])


class PackageTest(unittest.TestCase):
    def test_no_module_imports_one_that_imports_it_back(self):
        """The package's modules import one another one way only (a lazy import inside a
        function counts too): triald._cli -> triald._forkserver -> triald._runner -> ..."""
        import ast
        package = os.path.join(CLIENT_DIR, "triald")
        graph = {}
        for file in sorted(os.listdir(package)):
            if not (file.startswith("_") and file.endswith(".py")) or file == "__init__.py":
                continue
            name = file[:-3]
            with open(os.path.join(package, file)) as f:
                tree = ast.parse(f.read())
            imported = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "triald":
                    imported.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triald."):
                    imported.add(node.module.split(".")[1])
                elif isinstance(node, ast.Import):
                    imported.update(alias.name.split(".")[1] for alias in node.names
                                    if alias.name.startswith("triald."))
            graph[name] = imported & {f[:-3] for f in os.listdir(package)}
        self.assertIn("_forkserver", graph["_cli"])  # the walk sees a lazy import

        def reaches(start, target, seen=()):
            return any(n == target or (n not in seen and reaches(n, target, seen + (n,)))
                       for n in graph.get(start, ()))
        cycles = sorted(name for name in graph if reaches(name, name))
        self.assertEqual(cycles, [], graph)


class EndingsTest(unittest.TestCase):
    def run_ending(self, name, values=None):
        return run_with_daemon(objective_file("endings.py") + ":" + name, FakeDaemon(values))

    def test_a_number_is_the_final_value(self):
        result = self.run_ending("returns_float", {"k": 1})
        self.assertEqual((result.returncode, result.lines[-1]),
                         (0, {"type": "final", "value": 1.25}))
        result = self.run_ending("returns_int")
        self.assertEqual((result.returncode, result.lines), (0, [{"type": "final", "value": 3.0}]))

    def test_none_nan_and_a_string_fail_with_optunas_message(self):
        cases = [("returns_none", optuna_tell_message(None)),
                 ("returns_nan", optuna_tell_message(math.nan)),
                 ("returns_str", "The value 'abc' could not be cast to float.")]
        self.assertEqual(cases[0][1], "The value None could not be cast to float.")
        self.assertEqual(cases[1][1], "The value nan is not acceptable.")
        for name, message in cases:
            with self.subTest(name=name):
                result = self.run_ending(name, {"x": 0.5})
                self.assertEqual(result.returncode, 1)
                self.assertEqual(result.lines[-1], {"type": "error", "message": message})
                self.assertNotIn("final", result.types())

    def test_an_exception_sends_the_tail_of_its_traceback(self):
        result = self.run_ending("raises")
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.types(), ["error"])
        message = result.lines[0]["message"]
        self.assertTrue(message.startswith("Traceback (most recent call last):"), message)
        self.assertTrue(message.endswith("RuntimeError: the data loader broke"), message)
        self.assertIn("in inner", message)
        self.assertNotIn("_runner.py", message)  # the user's frames, not the runner's
        self.assertIn("RuntimeError: the data loader broke", result.stderr)  # full traceback

    def test_triald_and_optuna_trialpruned_end_the_trial_pruned(self):
        for name in ("raises_pruned", "raises_optuna_pruned"):
            with self.subTest(name=name):
                result = self.run_ending(name)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.lines, [{"type": "report", "step": 0, "value": 0.5},
                                                {"type": "pruned"}])

    def test_should_prune_answered_true_ends_the_trial_pruned(self):
        daemon = FakeDaemon({"x": 0.5}, prune=[False, True])
        result = run_with_daemon(objective_file("conditional.py") + ":pruned_when_told", daemon)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.types(), ["suggest", "report", "should_prune", "report",
                                          "should_prune", "pruned"])

    def test_sigterm_stops_the_trial_at_the_next_report(self):
        def stop_after_first_report(message, process):
            if message["type"] == "report" and message["step"] == 0:
                process.send_signal(signal.SIGTERM)

        daemon = FakeDaemon(on_line=stop_after_first_report)
        result = run_with_daemon(objective_file("endings.py") + ":reports_until_stopped", daemon)
        self.assertEqual(result.returncode, 128 + signal.SIGTERM, result.stderr)
        self.assertNotIn("final", result.types())
        self.assertNotIn("Traceback", result.stderr)

    def test_sigterm_while_waiting_for_an_answer_stops_at_once(self):
        def stop_instead_of_answering(message, process):
            if message["type"] == "should_prune":
                process.send_signal(signal.SIGTERM)
                return False
            return True

        daemon = FakeDaemon(on_line=stop_instead_of_answering)
        result = run_with_daemon(objective_file("endings.py") + ":asks_until_stopped", daemon)
        self.assertEqual(result.returncode, 128 + signal.SIGTERM, result.stderr)
        self.assertEqual(result.types(), ["report", "should_prune"])

    def test_a_channel_closed_without_an_answer_fails_the_run(self):
        result = run_with_daemon(objective_file("endings.py") + ":returns_float",
                                 FakeDaemon({"k": 1}, close_on="suggest"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("triald closed the trial channel without answering a suggest request",
                      result.stderr)


class ForkTest(unittest.TestCase):
    def test_a_forked_child_gets_the_default_sigterm_action(self):
        result = run_with_daemon(objective_file("forks.py") + ":terminated_child", FakeDaemon())
        self.assertEqual((result.returncode, result.lines),
                         (0, [{"type": "final", "value": -float(signal.SIGTERM)}]), result.stderr)

    def test_the_helpers_trial_leaves_forked_children_the_default_sigterm_action(self):
        code = ("import multiprocessing, time, triald\n"
                "trial = triald.Trial()\n"
                "child = multiprocessing.get_context('fork').Process(target=time.sleep, "
                "args=(60,))\n"
                "child.start()\n"
                "child.terminate()\n"
                "child.join(10)\n"
                "print(child.exitcode)\n")
        completed = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                   env=runner_env(), timeout=TIMEOUT_S)
        self.assertEqual((completed.returncode, completed.stdout.decode().strip()),
                         (0, str(-signal.SIGTERM)), completed.stderr.decode())


class SpecTest(unittest.TestCase):
    BAD = [
        ("no-such-file.py:objective", "no such file"),
        (objective_file("conditional.py") + ":objectiv",
         "conditional.py has no attribute 'objectiv' (did you mean 'objective'?)"),
        (objective_file("conditional.py") + ":NOT_CALLABLE",
         "'NOT_CALLABLE' is not callable (it is a int)"),
        ("no_such_package.module:objective", "no module named 'no_such_package'"),
        (objective_file("conditional.py"), "expected PATH.py:NAME or package.module:NAME"),
    ]

    def test_bad_specs_exit_2_naming_the_spec(self):
        for spec, what in self.BAD:
            with self.subTest(spec=spec):
                checked = run_by_hand(["check", spec])
                self.assertEqual(checked.returncode, 2)
                self.assertIn(f"objective {spec!r}: ", checked.stderr)
                self.assertIn(what, checked.stderr)
                result = run_with_daemon(spec, FakeDaemon())
                self.assertEqual(result.returncode, 2)
                self.assertEqual(result.types(), ["error"])  # the daemon learns why
                self.assertIn(what, result.lines[0]["message"])

    def test_a_good_spec_checks_silently(self):
        for spec, cwd in ((objective_file("conditional.py") + ":objective", None),
                          ("endings:returns_float", OBJECTIVES)):
            checked = run_by_hand(["check", spec], cwd=cwd)
            self.assertEqual((checked.returncode, checked.stdout, checked.stderr), (0, "", ""))

    def test_run_without_a_channel_or_params_says_how_to_replay(self):
        env = runner_env()
        env.pop("TRIALD_REPORT_FD", None)
        result = subprocess.run(
            [sys.executable, "-m", "triald", "run", objective_file("endings.py") + ":raises"],
            capture_output=True, env=env, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 2)
        self.assertIn(b"TRIALD_REPORT_FD is not set", result.stderr)
        self.assertIn(b"--params", result.stderr)

    def test_a_one_way_pipe_cannot_answer_and_says_so(self):
        read_end, write_end = os.pipe()
        with os.fdopen(read_end, "rb") as reader:
            process = subprocess.Popen(
                [sys.executable, "-m", "triald", "run",
                 objective_file("endings.py") + ":returns_float"],
                pass_fds=[write_end], stderr=subprocess.PIPE,
                env=runner_env({"TRIALD_REPORT_FD": str(write_end)}))
            os.close(write_end)
            lines = [json.loads(line) for line in reader]
            stderr = process.communicate(timeout=TIMEOUT_S)[1].decode()
        self.assertEqual(process.returncode, 1)
        self.assertEqual([line["type"] for line in lines if not is_code_line(line)],
                         ["suggest", "error"])
        self.assertIn("must be the two-way trial channel (a socketpair)", stderr)


class ReplayTest(unittest.TestCase):
    def test_replay_prints_the_lines_a_real_run_sends(self):
        values = {"optimizer": "sgd", "lr": 0.001, "momentum": 0.5, "layers": 2, "width_0": 16,
                  "width_1": 48}
        spec = objective_file("conditional.py") + ":objective"
        real = run_with_daemon(spec, FakeDaemon(values))
        replayed = run_by_hand(["run", spec, "--params", json.dumps(values)],
                               env={"TRIALD_TRIAL": "7"})
        self.assertEqual(real.returncode, 0, real.stderr)
        self.assertEqual(replayed.returncode, 0, replayed.stderr)
        self.assertEqual(replayed.lines, real.lines)
        self.assertEqual(len(real.lines), 10)  # 6 suggests, 3 attrs, final

    def test_replay_never_prunes_and_names_a_missing_parameter(self):
        spec = objective_file("conditional.py") + ":pruned_when_told"
        result = run_by_hand(["run", spec, "--params", '{"x": 0.5}'])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.types(), ["suggest"] + ["report", "should_prune"] * 5 + ["final"])
        result = run_by_hand(["run", spec, "--params", '{"y": 0.5}'])
        self.assertEqual(result.returncode, 1)
        self.assertIn("The value of the parameter 'x' is not found in --params (it has: y).",
                      result.lines[-1]["message"])

    def test_params_must_be_a_json_object(self):
        spec = objective_file("conditional.py") + ":same_name"
        for bad in ("[1]", "{x"):
            result = run_by_hand(["run", spec, "--params", bad])
            self.assertEqual(result.returncode, 2)
            self.assertIn("--params", result.stderr)


def optuna_values_message(directions, value_or_values):
    """Optuna 3.1's message for objective values it refuses in a study with `directions`."""
    study = optuna.create_study(directions=directions)
    trial = study.ask()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study.tell(trial, value_or_values)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    return str(caught[-1].message)


def optuna_constraints_calls(objective, constraints_func):
    """Which trials' states Optuna 3.1 calls a constraints_func for, and the system attr it
    stores for each trial: [(state name, called, constraints attr or None)]."""
    called = []

    def recording(frozen):
        called.append(frozen.number)
        return constraints_func(frozen)

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(constraints_func=recording))
    study.optimize(objective, n_trials=1, catch=(Exception,))
    return [(t.state.name, t.number in called, t.system_attrs.get("constraints"))
            for t in study.trials]


class MultiObjectiveTest(unittest.TestCase):
    SPEC = objective_file("objectives.py")

    def run_objective(self, name, n, values=None, args=()):
        env = {} if n is None else {"TRIALD_N_OBJECTIVES": str(n)}
        return run_with_daemon(f"{self.SPEC}:{name}", FakeDaemon(values), env=env, args=args)

    def test_a_tuple_or_list_sends_values_in_order(self):
        result = self.run_objective("two_values", 2, {"x": 0.5})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-1], {"type": "final", "values": [0.25, 2.25]})
        result = self.run_objective("two_values_list", 2)
        self.assertEqual(result.lines, [{"type": "final", "values": [0.5, 3.0]}])
        result = self.run_objective("three_values", 3)
        self.assertEqual(result.lines, [{"type": "final", "values": [1.0, 2.0, 3.0]}])

    def test_one_objective_stays_value_whatever_the_shape(self):
        for n in (None, 1):
            with self.subTest(n=n):
                self.assertEqual(self.run_objective("scalar", n).lines,
                                 [{"type": "final", "value": 1.5}])
                self.assertEqual(self.run_objective("one_value_in_a_list", n).lines,
                                 [{"type": "final", "value": 0.25}])

    def test_a_wrong_count_fails_with_optunas_message(self):
        cases = [("scalar", 2, 1.5), ("two_values_list", 3, [0.5, 3]),
                 ("three_values", 2, (1.0, 2.0, 3.0)), ("two_values_list", None, [0.5, 3])]
        for name, n, returned in cases:
            with self.subTest(name=name, n=n):
                message = optuna_values_message(["minimize"] * (n or 1), returned)
                self.assertIn("did not match the number of the objectives", message)
                result = self.run_objective(name, n)
                self.assertEqual(result.returncode, 1)
                self.assertEqual(result.lines, [{"type": "error", "message": message}])
                self.assertIn(message, result.stderr)

    def test_none_nan_and_non_numbers_inside_fail_with_optunas_message(self):
        cases = [("none_inside", (1.0, None)), ("nan_inside", (math.nan, 1.0)),
                 ("str_inside", (1.0, "abc"))]
        for name, returned in cases:
            with self.subTest(name=name):
                message = optuna_values_message(["minimize", "maximize"], returned)
                result = self.run_objective(name, 2)
                self.assertEqual(result.returncode, 1)
                self.assertEqual(result.lines, [{"type": "error", "message": message}])
        message = optuna_values_message(["minimize", "maximize"], None)
        result = run_with_daemon(objective_file("endings.py") + ":returns_none",
                                 FakeDaemon({"x": 0.5}), env={"TRIALD_N_OBJECTIVES": "2"})
        self.assertEqual(result.lines[-1], {"type": "error", "message": message})

    def test_a_malformed_objective_count_is_refused(self):
        for bad in ("0", "two", "-1"):
            with self.subTest(bad=bad):
                result = run_with_daemon(f"{self.SPEC}:scalar", FakeDaemon(),
                                         env={"TRIALD_N_OBJECTIVES": bad})
                self.assertEqual(result.returncode, 2)
                self.assertIn(f"TRIALD_N_OBJECTIVES={bad!r} is not a positive integer",
                              result.lines[-1]["message"])

    def test_replay_prints_values_and_takes_the_count_returned(self):
        spec = f"{self.SPEC}:two_values"
        replayed = run_by_hand(["run", spec, "--params", '{"x": 0.5}'])
        self.assertEqual(replayed.returncode, 0, replayed.stderr)
        self.assertEqual(replayed.lines[-1], {"type": "final", "values": [0.25, 2.25]})
        replayed = run_by_hand(["run", spec, "--params", '{"x": 0.5}'],
                               env={"TRIALD_N_OBJECTIVES": "3"})
        self.assertEqual(replayed.returncode, 1)
        self.assertEqual(replayed.lines[-1]["message"], "The number of the values 2 did not "
                         "match the number of the objectives 3.")


class FoldersTest(unittest.TestCase):
    def test_a_retry_sees_the_folder_it_resumes_from(self):
        with tempfile.TemporaryDirectory() as own, tempfile.TemporaryDirectory() as failed:
            result = run_with_daemon(objective_file("objectives.py") + ":folders", FakeDaemon(),
                                     env={"TRIALD_TRIAL_DIR": own, "TRIALD_RESUME_DIR": failed})
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.attrs(), {"dir": own, "resume_dir": failed})

    def test_a_first_attempt_has_no_resume_folder(self):
        # Empty counts as unset, as for TRIALD_TRIAL_DIR.
        result = run_with_daemon(objective_file("objectives.py") + ":folders", FakeDaemon(),
                                 env={"TRIALD_TRIAL_DIR": "/srv/t/3", "TRIALD_RESUME_DIR": ""})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.attrs(), {"dir": "/srv/t/3", "resume_dir": None})
        trial, _ = replay_trial({})
        self.assertIsNone(trial.resume_dir)
        self.assertEqual(trial.dir, os.getcwd())

    def test_the_legacy_trial_has_resume_dir_too(self):
        retry = triald.Trial(handle_sigterm=False, environ={"TRIALD_TRIAL_DIR": "/srv/t/4",
                                                            "TRIALD_RESUME_DIR": "/srv/t/3"})
        self.assertEqual((retry.dir, retry.resume_dir), ("/srv/t/4", "/srv/t/3"))
        first = triald.Trial(handle_sigterm=False, environ={"TRIALD_TRIAL_DIR": "/srv/t/3"})
        self.assertIsNone(first.resume_dir)


class RetryHistoryTest(unittest.TestCase):
    def test_a_retry_knows_the_attempts_before_it_as_optuna_s_callback_says(self):
        result = run_with_daemon(objective_file("objectives.py") + ":retries", FakeDaemon(),
                                 env={"TRIALD_RETRY_HISTORY": "3,5"})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.attrs(), {"first": 3, "history": [3, 5]})
        trial, _ = replay_trial({})
        self.assertEqual(trial.system_attrs, {})
        retried = triald.OptunaTrial(None, None, retry_history=[3, 5])
        self.assertEqual(retried.system_attrs, {"failed_trial": 3, "retry_history": [3, 5]})
        # Optuna's own helpers read the same attributes.
        callback = optuna.storages.RetryFailedTrialCallback
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertEqual(callback.retried_trial_number(retried), 3)
            self.assertEqual(callback.retry_history(retried), [3, 5])

    def test_a_first_attempt_has_no_history(self):
        for text in ("", "not,numbers"):
            result = run_with_daemon(objective_file("objectives.py") + ":retries", FakeDaemon(),
                                     env={"TRIALD_RETRY_HISTORY": text})
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.attrs(), {"first": None, "history": []})


class ConstraintsTest(unittest.TestCase):
    SPEC = objective_file("objectives.py")

    def run_objective(self, name, constraints=None, values=None, n=2):
        args = ["--constraints", f"{self.SPEC}:{constraints}"] if constraints else []
        return run_with_daemon(f"{self.SPEC}:{name}", FakeDaemon(values),
                               env={"TRIALD_N_OBJECTIVES": str(n)}, args=args)

    def test_set_constraints_sends_the_last_values_just_before_final(self):
        result = self.run_objective("with_set_constraints", values={"x": 0.75})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-2:], [{"type": "constraints", "values": [0.5, -1.0]},
                                             {"type": "final", "values": [0.75, 0.25]}])

    def test_set_constraints_of_a_pruned_trial_go_before_pruned(self):
        result = self.run_objective("set_constraints_then_pruned")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.types(), ["report", "constraints", "pruned"])

    def test_set_constraints_refuses_nan_at_the_call(self):
        result = self.run_objective("bad_set_constraints", n=1)
        self.assertEqual(result.returncode, 1)
        self.assertIn("ValueError: Constraint values cannot be NaN.", result.lines[-1]["message"])
        self.assertNotIn("final", result.types())

    def test_the_function_sees_the_finished_trial_and_its_values(self):
        result = self.run_objective("two_values", "seen_constraint", {"x": 0.5})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-2:], [{"type": "constraints", "values": [-1.0, 0.5]},
                                             {"type": "final", "values": [0.25, 2.25]}])
        seen = [line for line in result.stdout.splitlines() if line.startswith("SEEN ")]
        self.assertEqual(seen, ["SEEN " + repr((
            7, {"x": 0.5}, [0.25, 2.25],
            "This attribute is not available during multi-objective optimization.",
            {"memory": 812.0}, ["x"], None, 1))])
        # Optuna's FrozenTrial says the same for `value` with several objectives.
        frozen = optuna.trial.create_trial(values=[0.25, 2.25], params={},
                                           distributions={})
        with self.assertRaisesRegex(RuntimeError, "^This attribute is not available during "
                                                  "multi-objective optimization.$"):
            frozen.value

    def test_one_objective_reads_value(self):
        result = self.run_objective("single_with_memory", "memory_constraint", {"x": 0.5}, n=1)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-2:], [{"type": "constraints", "values": [1.5]},
                                             {"type": "final", "value": 0.5}])
        result = self.run_objective("scalar", "seen_constraint", n=1)
        seen = [line for line in result.stdout.splitlines() if line.startswith("SEEN ")]
        self.assertEqual(seen, ["SEEN " + repr((7, {}, [1.5], 1.5, {}, [], None, 1))])

    def test_called_for_pruned_trials_and_not_for_failed_ones_as_optuna(self):
        def pruned(trial):
            trial.suggest_float("x", 0.0, 1.0)
            trial.report(0.75, 3)
            raise optuna.TrialPruned()

        def failed(trial):
            raise RuntimeError("the objective broke")

        def constraint(frozen):
            return (-1.0, 0.5)

        self.assertEqual(optuna_constraints_calls(pruned, constraint),
                         [("PRUNED", True, (-1.0, 0.5))])
        self.assertEqual(optuna_constraints_calls(failed, constraint), [("FAIL", False, None)])
        result = self.run_objective("reports_then_pruned", "seen_constraint", {"x": 0.5})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.types(), ["suggest", "report", "constraints", "pruned"])
        self.assertIn("SEEN " + repr((7, {"x": 0.5}, None, None, {}, ["x"], 3, 1)),
                      result.stdout)
        result = self.run_objective("raises", "seen_constraint")
        self.assertEqual((result.returncode, result.types()), (1, ["error"]))
        self.assertNotIn("SEEN", result.stdout)
        # Values Optuna refuses fail the trial before any constraints are computed.
        result = self.run_objective("scalar", "seen_constraint")
        self.assertEqual((result.returncode, result.types()), (1, ["error"]))
        self.assertNotIn("SEEN", result.stdout)

    def test_an_empty_sequence_sends_no_line(self):
        result = self.run_objective("two_values_list", "empty_constraints")
        self.assertEqual(result.lines, [{"type": "final", "values": [0.5, 3.0]}])

    def test_bad_results_fail_the_trial_naming_the_function(self):
        where = f"the constraints function {self.SPEC}:"
        cases = [("constraints_scalar", where + "constraints_scalar must return a sequence of "
                  "floats (e.g. [c1, c2]), got float 0.5"),
                 ("constraints_nan", "Constraint values cannot be NaN."),
                 ("constraints_inf", where + "constraints_inf: constraints[1] = inf is not "
                  "finite (triald records finite values only)"),
                 ("constraints_str", where + "constraints_str: constraints[1] = 'x' could not "
                  "be cast to float")]
        for name, message in cases:
            with self.subTest(name=name):
                result = self.run_objective("two_values_list", name)
                self.assertEqual(result.returncode, 1)
                self.assertEqual(result.lines, [{"type": "error", "message": message}])
        result = self.run_objective("two_values_list", "constraints_raise")
        self.assertEqual(result.returncode, 1)
        message = result.lines[-1]["message"]
        self.assertTrue(message.startswith(where + "constraints_raise raised:\nTraceback"),
                        message)
        self.assertTrue(message.endswith("KeyError: 'memory_gb'"), message)

    def test_set_constraints_and_a_function_together_are_refused(self):
        result = self.run_objective("with_set_constraints", "empty_constraints", {"x": 0.5})
        self.assertEqual(result.returncode, 1)
        self.assertIn("called set_constraints() and the sweep names a constraints function",
                      result.lines[-1]["message"])

    def test_a_bad_constraints_spec_exits_2_naming_it(self):
        for name, what in (("no_such", "objectives.py has no attribute 'no_such'"),
                           ("NOT_CALLABLE", "'NOT_CALLABLE' is not callable (it is a int)")):
            spec = f"{self.SPEC}:{name}"
            with self.subTest(name=name):
                checked = run_by_hand(["check", f"{self.SPEC}:scalar", "--constraints", spec])
                self.assertEqual(checked.returncode, 2)
                self.assertIn(f"constraints {spec!r}: {what}", checked.stderr)
                result = self.run_objective("scalar", name)
                self.assertEqual((result.returncode, result.types()), (2, ["error"]))
                self.assertIn(what, result.lines[0]["message"])
        missing = "/nonexistent/c.py:fn"
        result = run_with_daemon(f"{self.SPEC}:scalar", FakeDaemon(),
                                 args=["--constraints", missing])
        self.assertEqual(result.returncode, 2)
        self.assertIn(f"constraints {missing!r}: no such file", result.lines[0]["message"])

    def test_a_module_spec_works_and_shares_nothing_it_should_not(self):
        result = run_with_daemon("objectives:scalar", FakeDaemon(), cwd=OBJECTIVES,
                                 env={"TRIALD_N_OBJECTIVES": "1"},
                                 args=["--constraints", "objectives:seen_constraint"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.lines[-2]["type"], "constraints")
        self.assertIn("SEEN " + repr((7, {}, [1.5], 1.5, {}, [], None, 1)), result.stdout)

    def test_replay_prints_the_constraints_line(self):
        replayed = run_by_hand(["run", f"{self.SPEC}:single_with_memory", "--constraints",
                                f"{self.SPEC}:memory_constraint", "--params", '{"x": 0.5}'])
        self.assertEqual(replayed.returncode, 0, replayed.stderr)
        self.assertEqual(replayed.lines[-2:], [{"type": "constraints", "values": [1.5]},
                                               {"type": "final", "value": 0.5}])


if __name__ == "__main__":
    unittest.main()
