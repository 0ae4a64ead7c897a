"""The Python client (triald.client) against a real triald started for these tests.

TRIALD_BIN names the daemon (set by tests/proto/CMakeLists.txt); each test class starts one
with a state folder of its own and stops it at the end.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "proto", "client", "python"))

import triald.client  # noqa: E402
from triald.client import TrialdError, TrialStopped  # noqa: E402


class Daemon:
    """A triald on a temporary state folder."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="triald-client-")
        self.state = os.path.join(self.dir, "state")
        self.socket = os.path.join(self.state, "triald.sock")
        self.log = open(os.path.join(self.dir, "triald.log"), "wb")
        binary = os.environ.get("TRIALD_BIN")
        assert binary, "TRIALD_BIN must name the triald executable"
        self.process = subprocess.Popen([binary, "--state-dir", self.state, "--max-workers", "2",
                                         "--log-level", "debug"],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError("triald exited during start-up:\n" + self.log_text())
            try:
                triald.client.Client(self.socket).ping()
                return
            except TrialdError:
                time.sleep(0.05)
        raise AssertionError("triald did not answer within 30 s:\n" + self.log_text())

    def log_text(self) -> str:
        self.log.flush()
        with open(os.path.join(self.dir, "triald.log"), encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def client_study(name: str, n_trials: int, **study: Any) -> Dict[str, Any]:
    sweep: Dict[str, Any] = {"study": {"name": name, "n_trials": n_trials, **study},
                             "objective": {"kind": "client"}}
    return sweep


class ClientTest(unittest.TestCase):
    daemon: Daemon
    client: triald.client.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = Daemon()
        cls.client = triald.client.connect(cls.daemon.socket)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.daemon.stop()

    def wait_trial(self, study: triald.client.Study, number: int,
                   state: Optional[str] = None) -> triald.client.TrialRecord:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for t in study.trials():
                if t.number == number and t.state not in ("RUNNING", "WAITING") and \
                        (state is None or t.state == state):
                    return t
            time.sleep(0.05)
        self.fail(f"trial {number} did not end{' ' + state if state else ''}: "
                  f"{[(t.number, t.state) for t in study.trials()]}\n{self.daemon.log_text()}")

    # -- ask and tell --------------------------------------------------------------------------

    def test_ask_and_tell_drive_a_study_to_complete(self) -> None:
        study = self.client.submit(client_study("ask-loop", 8, parallelism=2),
                                   name="ask-loop")
        told = {}
        for _ in range(8):
            trial = study.ask()
            self.assertIs(trial.study, study)
            x = trial.suggest_float("x", -10.0, 10.0)
            kind = trial.suggest_categorical("kind", ["a", "b"])
            self.assertEqual(trial.params, {"x": x, "kind": kind})
            trial.report((x - 2) ** 2 + 1, 0)
            trial.set_user_attr("note", {"told": True})
            study.tell(trial, (x - 2) ** 2)
            told[trial.number] = (x, kind, (x - 2) ** 2)
        status = study.wait(timeout=20)
        self.assertEqual(status["state"], "COMPLETE")
        self.assertEqual(status["complete"], 8)
        records = {t.number: t for t in study.trials()}
        self.assertEqual(sorted(records), list(range(8)))
        for number, (x, kind, value) in told.items():
            t = records[number]
            self.assertEqual(t.state, "COMPLETE")
            self.assertEqual(t.params, {"x": x, "kind": kind})
            self.assertEqual(t.value, value)
            self.assertEqual(t.user_attrs, {"note": {"told": True}})
            self.assertEqual(t.intermediate_values, {0: value + 1})
            self.assertIsNotNone(t.datetime_start)
        best = min(told.values(), key=lambda v: v[2])
        self.assertEqual(study.best_value, best[2])
        self.assertEqual(study.best_params, {"x": best[0], "kind": best[1]})
        # All n_trials were asked: one more is refused, saying why.
        with self.assertRaises(TrialdError) as e:
            study.ask()
        self.assertEqual(e.exception.code, "failed_precondition")
        self.assertIn("COMPLETE", e.exception.message)
        self.assertIn("trialctl extend ask-loop", e.exception.message)

    def test_parallelism_bounds_trials_asked_and_not_told(self) -> None:
        study = self.client.submit(client_study("ask-parallel", 5, parallelism=2))
        first, second = study.ask(), study.ask()
        self.assertEqual({first.number, second.number}, {0, 1})
        with self.assertRaises(TrialdError) as e:
            study.ask()
        self.assertEqual(e.exception.code, "failed_precondition")
        self.assertIn("2 trial(s) asked and not yet told", e.exception.message)
        self.assertIn("trialctl set ask-parallel parallelism=N", e.exception.message)
        second.tell(1.5)
        third = study.ask()
        self.assertEqual(third.number, 2)
        study.pause()
        with self.assertRaises(TrialdError) as e:
            study.ask()
        self.assertIn("paused", e.exception.message)
        study.resume()
        first.tell(2.5)
        third.tell(0.5)
        self.assertEqual(self.wait_trial(study, 2).value, 0.5)
        study.cancel()

    def test_a_program_that_goes_away_loses_its_trial_and_the_retry_is_asked_next(self) -> None:
        study = self.client.submit(client_study("ask-lost", 3, retries=1))
        trial = study.ask()
        x = trial.suggest_int("units", 1, 512, log=True)
        trial._socket.close()  # the notebook's kernel died
        lost = self.wait_trial(study, trial.number, "FAIL")
        self.assertEqual(lost.fail_reason, "lost")
        self.assertIn("closed before it told", lost.fail_summary or "")
        retry = study.ask()
        self.assertEqual(retry.system_attrs, {"failed_trial": trial.number,
                                              "retry_history": [trial.number]})
        self.assertEqual(retry.suggest_int("units", 1, 512, log=True), x)
        retry.tell(float(x))
        done = self.wait_trial(study, retry.number, "COMPLETE")
        self.assertEqual(done.retry_of, trial.number)
        study.cancel()

    def test_pruned_failed_and_the_with_block(self) -> None:
        study = self.client.submit(client_study("ask-ends", 6))
        pruned = study.ask()
        pruned.report(3.0, 1)
        pruned.report(2.0, 4)
        study.tell(pruned, state="PRUNED")
        t = self.wait_trial(study, pruned.number, "PRUNED")
        self.assertEqual(t.value, 2.0)
        failed = study.ask()
        study.tell(failed, state="FAIL")
        t = self.wait_trial(study, failed.number, "FAIL")
        self.assertEqual(t.fail_reason, "exit")
        self.assertIn("the client told FAIL", t.raw["fail_detail"])
        with self.assertRaises(ValueError):
            study.tell(failed, 1.0)  # told already
        with self.assertRaises(ZeroDivisionError):
            with study.ask() as trial:
                trial.suggest_float("x", 0, 1)
                raise ZeroDivisionError()
        self.assertEqual(self.wait_trial(study, 2).state, "FAIL")
        with study.ask() as trial:
            raise triald.TrialPruned()
        self.assertEqual(self.wait_trial(study, 3).state, "PRUNED")
        with self.assertRaises(ValueError):
            study.ask().tell(None)  # a value is needed (the trial is still open)
        study.cancel()

    def test_a_stopped_trial_raises_at_its_next_request(self) -> None:
        study = self.client.submit(client_study("ask-timeout", 4, trial_timeout=0.3,
                                                kill_grace=0.5))
        trial = study.ask()
        trial.suggest_float("lr", 1e-5, 1e-1, log=True)
        time.sleep(0.6)
        with self.assertRaises(TrialStopped) as e:
            trial.suggest_float("momentum", 0.0, 1.0)
        self.assertIn("trial_timeout", str(e.exception))
        t = self.wait_trial(study, trial.number, "FAIL")
        self.assertEqual(t.fail_reason, "timeout")
        other = study.ask()
        study.cancel()
        with self.assertRaises(TrialStopped) as e:
            other.should_prune()
        self.assertIn("cancelled", str(e.exception))

    def test_enqueued_values_answer_the_next_ask(self) -> None:
        study = self.client.submit(client_study("ask-enqueue", 4, metric_names=["loss"]))
        self.assertEqual(study.metric_names, ["loss"])
        number = study.enqueue({"x": 0.25, "opt": "sgd"})
        trial = study.ask()
        self.assertEqual(trial.number, number)
        self.assertEqual(trial.suggest_float("x", 0.0, 1.0), 0.25)
        self.assertEqual(trial.suggest_categorical("opt", ["adam", "sgd"]), "sgd")
        trial.tell(0.25)
        self.assertEqual(study.enqueue({"x": 0.25, "opt": "sgd"}, skip_if_exists=True), number)
        # Optuna's column for a named objective; renamed as Optuna's set_metric_names does.
        self.assertEqual(study.records()[0]["value_loss"], 0.25)
        study.set_metric_names(["val_loss"])
        self.assertEqual(study.metric_names, ["val_loss"])
        self.assertEqual(study.records()[0]["value_val_loss"], 0.25)
        with self.assertRaises(TrialdError) as e:
            study.set_metric_names(["a", "b"])
        self.assertEqual(e.exception.code, "invalid_argument")
        study.cancel()

    def test_ask_is_for_client_studies_and_names_what_is_wrong(self) -> None:
        with self.assertRaises(TrialdError) as e:
            self.client.study("no-such-study")
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(TrialdError) as e:
            triald.client.Study(self.client, "no-such-study").ask()
        self.assertEqual(e.exception.code, "not_found")
        d = tempfile.mkdtemp(prefix="triald-client-exec-")
        self.addCleanup(shutil.rmtree, d, True)
        script = os.path.join(d, "slow.sh")
        with open(script, "w") as f:
            f.write("sleep 30\n")
        study = self.client.submit({"study": {"name": "exec-study", "n_trials": 1},
                                    "objective": {"kind": "exec", "command": ["sh", script]},
                                    "space": {"x": {"type": "float", "low": 0, "high": 1}}})
        with self.assertRaises(TrialdError) as e:
            study.ask()
        self.assertEqual(e.exception.code, "failed_precondition")
        self.assertIn("kind = \"exec\"", e.exception.message)
        study.cancel()
        with self.assertRaises(TrialdError) as e:
            self.client.submit({"study": {"name": "client-gpu", "n_trials": 1,
                                          "gpus_per_trial": 1},
                                "objective": {"kind": "client"}})
        self.assertIn("gpus_per_trial", e.exception.message)

    # -- the rest of the client ----------------------------------------------------------------

    def test_submit_a_file_wait_with_progress_and_read_records(self) -> None:
        d = tempfile.mkdtemp(prefix="triald-client-py-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "objective.py"), "w") as f:
            f.write(textwrap.dedent("""\
                def objective(trial):
                    x = trial.suggest_float("x", -5, 5)
                    trial.set_user_attr("square", x * x)
                    study = trial.study  # read from the daemon that runs the trial
                    trial.set_user_attr("study", study.study_name)
                    trial.set_user_attr("direction", study.direction)
                    trial.set_user_attr("seen", [t.number for t in study.trials])
                    try:
                        trial.set_user_attr("best_before", study.best_value)
                    except ValueError:
                        trial.set_user_attr("best_before", None)
                    return (x - 1) ** 2
                """))
        sweep = os.path.join(d, "sweep.toml")
        with open(sweep, "w") as f:
            f.write(textwrap.dedent("""\
                [study]
                name = "client-file"
                n_trials = 4
                parallelism = 2

                [objective]
                kind = "python"
                function = "objective.py:objective"
                """))
        study = self.client.submit(sweep)
        self.assertEqual(study.name, "client-file")
        seen: List[Dict[str, Any]] = []
        final = study.wait(progress=seen.append, interval=0.05, timeout=60)
        self.assertEqual(final["state"], "COMPLETE", self.daemon.log_text())
        self.assertGreaterEqual(len(seen), 2)
        self.assertEqual(seen[-1]["complete"], 4)
        # The trials ran this interpreter, as trialctl's submit runs the submitter's.
        self.assertEqual(study.status()["python"]["path"], os.path.abspath(sys.executable))
        rows = study.records()
        self.assertEqual([r["number"] for r in rows], [0, 1, 2, 3])
        self.assertEqual(list(rows[0]), ["number", "value", "datetime_start", "datetime_complete",
                                         "duration", "params_x", "user_attrs_best_before",
                                         "user_attrs_direction", "user_attrs_seen",
                                         "user_attrs_square", "user_attrs_study", "state"])
        for r in rows:
            self.assertAlmostEqual(r["value"], (r["params_x"] - 1) ** 2)
            self.assertEqual(r["state"], "COMPLETE")
            # trial.study, read inside the trial: its study, and every trial so far.
            self.assertEqual(r["user_attrs_study"], "client-file")
            self.assertEqual(r["user_attrs_direction"], "minimize")
            self.assertIn(r["number"], r["user_attrs_seen"])
            if r["number"] >= 2:  # started once an earlier trial had completed
                self.assertIsNotNone(r["user_attrs_best_before"])
        if importlib.util.find_spec("pandas") is not None:
            df = study.trials_dataframe()
            self.assertEqual(list(df["number"]), [0, 1, 2, 3])
        else:
            with self.assertRaisesRegex(ImportError, "needs pandas"):
                study.trials_dataframe()
        self.assertIn("client-file", [s["name"] for s in self.client.studies()])
        # Resubmitting the file continues the study with resume (its numbers go on).
        again = self.client.submit(sweep, resume=True)
        again.wait(interval=0.05, timeout=60)
        self.assertEqual([t.number for t in again.trials()], list(range(8)))

    def test_relative_params_are_the_samplers_joint_draw(self) -> None:
        d = tempfile.mkdtemp(prefix="triald-client-rel-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "bowl.py"), "w") as f:
            f.write(textwrap.dedent("""\
                def objective(trial):
                    relative = trial.relative_params  # before any suggest, as in Optuna
                    x = trial.suggest_float("x", -5, 5)
                    y = trial.suggest_float("y", -5, 5)
                    trial.set_user_attr("relative", relative)
                    return (x - 1) ** 2 + (y + 2) ** 2
                """))
        study = self.client.submit({
            "study": {"name": "relative", "n_trials": 6},
            "objective": {"kind": "python", "function": os.path.join(d, "bowl.py") + ":objective"},
            "sampler": {"kind": "tpe", "seed": 3, "n_startup_trials": 3, "multivariate": True}})
        self.assertEqual(study.wait(interval=0.05, timeout=60)["state"], "COMPLETE",
                         self.daemon.log_text())
        for t in study.trials():
            if t.number < 3:  # TPE's start-up trials: independent draws, no relative sample
                self.assertEqual(t.user_attrs["relative"], {})
            else:  # the joint draw over {x, y}, which the suggests then returned
                self.assertEqual(t.user_attrs["relative"], t.params)

    def test_finding_the_daemon(self) -> None:
        old = os.environ.get("TRIALD_SOCKET")
        self.addCleanup(lambda: os.environ.__setitem__("TRIALD_SOCKET", old) if old is not None
                        else os.environ.pop("TRIALD_SOCKET", None))
        os.environ["TRIALD_SOCKET"] = self.daemon.socket
        self.assertEqual(triald.client.connect().ping()["state_dir"],
                         os.path.realpath(self.daemon.state))
        os.environ["TRIALD_SOCKET"] = os.path.join(self.daemon.dir, "nobody.sock")
        with self.assertRaises(TrialdError) as e:
            triald.client.connect()
        self.assertEqual(e.exception.code, "unavailable")
        self.assertIn("nobody.sock", e.exception.message)
        order = [p for p, _ in triald.client.socket_search_order(
            {"XDG_RUNTIME_DIR": "/run/user/7", "HOME": "/home/u"})]
        self.assertEqual(order, ["/run/triald/triald.sock", "/run/user/7/triald/triald.sock",
                                 "/home/u/.local/state/triald/triald.sock",
                                 ".triald/triald.sock"])

    def test_a_connection_sending_after_ask_is_refused(self) -> None:
        self.client.submit(client_study("ask-pipelined", 2))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.daemon.socket)
            s.sendall(b'{"verb":"ask","study":"ask-pipelined"}\n{"type":"heartbeat"}\n')
            reply = s.makefile("rb").readline()
        self.assertIn(b"send nothing after it before its reply", reply)


class TrialStudyWithoutDaemonTest(unittest.TestCase):
    def test_trial_study_says_it_needs_the_daemon(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "TRIALD_SOCKET and TRIALD_STUDY"):
            triald.client.trial_study({"TRIALD_STUDY": "s"})
        from triald._optuna import OptunaTrial, ReplayAnswers
        from triald._wire import LineWriter
        import io
        writer = LineWriter(stream=io.StringIO())
        trial = OptunaTrial(writer, ReplayAnswers({}, writer))
        with self.assertRaisesRegex(RuntimeError, "runs without one"):
            trial.study
        view = triald.client.trial_study({"TRIALD_SOCKET": "/nonexistent/triald.sock",
                                          "TRIALD_STUDY": "s"})
        self.assertEqual(view.study_name, "s")
        with self.assertRaises(TrialdError) as e:
            view.trials
        self.assertEqual(e.exception.code, "unavailable")


class SweepTomlTest(unittest.TestCase):
    def test_dicts_become_the_sweep_file_they_describe(self) -> None:
        sweep = {"study": {"name": "a \"b\"", "n_trials": 3, "directions": ["minimize"]},
                 "objective": {"kind": "exec", "command": ["python3", "t.py"],
                               "env": {"OMP_NUM_THREADS": "1"}},
                 "space": {"lr": {"type": "float", "low": 1e-5, "high": 0.1, "log": True}}}
        text = triald.client.sweep_toml(sweep)
        import tomllib
        self.assertEqual(tomllib.loads(text), sweep)
        with self.assertRaisesRegex(ValueError, "study.n_trials"):
            triald.client.sweep_toml({"study": {"n_trials": float("nan")}})
        with self.assertRaisesRegex(ValueError, "top level holds tables"):
            triald.client.sweep_toml({"study": 3})


if __name__ == "__main__":
    unittest.main()
