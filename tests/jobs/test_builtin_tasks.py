"""The built-in task scripts, run for real as subprocesses with the env contract the runtime gives them."""

from __future__ import annotations

import csv
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from portal.lib.serve import free_port

REPO = Path(__file__).resolve().parents[2]
# Variables of the surrounding shell that would leak into the contract under test.
_CONTRACT_PREFIXES = ("PORTAL_", "MLFLOW_", "TF_CONFIG", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK")
_PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def task_env(out: Path, inputs: dict[str, Path] | None = None, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_CONTRACT_PREFIXES) and key not in _PROXIES and key != "PYTHONPATH"
    }
    env.update(
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        PORTAL_OUTPUT_DIR=str(out),
        PORTAL_PROJECT="project-a",
        PORTAL_PIPELINE="demo",
        PORTAL_RUN_ID="17",
        PORTAL_TASK=out.name,
        PORTAL_TASK_ATTEMPT="1",
        PORTAL_API_URL="http://127.0.0.1:9/api/v1/",
        PORTAL_API_TOKEN="not-a-real-token",
    )
    for node, path in (inputs or {}).items():
        env[f"PORTAL_INPUT_{node.upper().replace('-', '_')}"] = str(path)
    env.update(extra)
    return env


def run_task(
    module: str, out: Path, *args: str, inputs: dict[str, Path] | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", f"apps.jobs.builtin_tasks.{module}", *args],
        cwd=out,
        env=task_env(out, inputs, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_task(module: str, out: Path, *args: str) -> subprocess.Popen[str]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", f"apps.jobs.builtin_tasks.{module}", *args],
        cwd=out,
        env=task_env(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so the test can stop the whole tree, as the runtime does
    )


def first_line_while_running(proc: subprocess.Popen[str]) -> tuple[str, int | None]:
    """The first output line and the exit code at the moment it arrived (None: still running)."""
    try:
        line = proc.stdout.readline()
        return line, proc.poll()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# --- the demo chain -------------------------------------------------------------------------------


@dataclass
class Prepared:
    iris: Path
    split: Path
    split_stdout: str


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """iris-load → data-split (stratified, 30 % test), run once for the module: sklearn is slow to import."""
    root = tmp_path_factory.mktemp("prepared")
    loaded = run_task("iris_load", root / "iris")
    assert loaded.returncode == 0, loaded.stderr
    split = run_task(
        "split", root / "split", "--test_size", "0.3", "--seed", "7", "--label_column", "species",
        inputs={"iris": root / "iris"},
    )  # fmt: skip
    assert split.returncode == 0, split.stderr
    return Prepared(root / "iris", root / "split", split.stdout)


def test_iris_load_writes_150_rows_with_a_header(prepared: Prepared) -> None:
    rows = read_rows(prepared.iris / "data.csv")

    assert len(rows) == 150
    assert list(rows[0]) == ["sepal_length", "sepal_width", "petal_length", "petal_width", "species"]


def test_split_writes_stratified_train_and_test_files(prepared: Prepared) -> None:
    test_rows = read_rows(prepared.split / "test.csv")

    assert "train.csv: 105 rows, test.csv: 45 rows" in prepared.split_stdout
    assert len(read_rows(prepared.split / "train.csv")) == 105
    assert [row["species"] for row in test_rows].count("setosa") == 15


@pytest.mark.parametrize("model", ["logistic_regression", "random_forest"])
def test_iris_split_train_evaluate_chain_scores_above_0_8(tmp_path: Path, prepared: Prepared, model: str) -> None:
    train, evaluate = tmp_path / "train", tmp_path / "evaluate"

    trained = run_task("sklearn_train", train, "--model", model, inputs={"data-split": prepared.split})
    assert trained.returncode == 0, trained.stderr
    assert "tracking skipped: MLFLOW_TRACKING_URI is not set" in trained.stdout
    params = json.loads((train / "params.json").read_text())
    assert params["model"] == model
    assert params["label_column"] == "species"
    assert (train / "model.joblib").is_file()

    evaluated = run_task("evaluate", evaluate, inputs={"train": train, "data-split": prepared.split})
    assert evaluated.returncode == 0, evaluated.stderr
    metrics = json.loads((evaluate / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.8
    assert metrics["f1_macro"] > 0.8
    assert metrics["rows"] == 45
    assert {label: counts["support"] for label, counts in metrics["per_class"].items()} == {
        "setosa": 15,
        "versicolor": 15,
        "virginica": 15,
    }
    assert "accuracy:" in evaluated.stdout


def test_evaluate_takes_explicit_paths_and_enforces_min_accuracy(tmp_path: Path, prepared: Prepared) -> None:
    run_task("sklearn_train", tmp_path / "train", "--input", str(prepared.split), "--max_iter", "1")

    gate = run_task(
        "evaluate",
        tmp_path / "eval",
        "--model",
        str(tmp_path / "train" / "model.joblib"),
        "--test",
        str(prepared.split / "test.csv"),
        "--min_accuracy",
        "1",
    )

    assert (tmp_path / "eval" / "metrics.json").is_file()
    assert gate.returncode == 1
    assert "below --min_accuracy" in gate.stderr


def test_evaluate_says_which_file_is_missing_upstream(tmp_path: Path, prepared: Prepared) -> None:
    result = run_task("evaluate", tmp_path / "eval", inputs={"iris": prepared.iris})

    assert result.returncode == 2
    assert "no model.joblib in the upstream outputs (PORTAL_INPUT_IRIS)" in result.stderr


def test_iris_load_accepts_dashed_flags_and_numeric_labels(tmp_path: Path) -> None:
    result = run_task("iris_load", tmp_path, "--label-column", "target", "--numeric-labels")

    assert result.returncode == 0, result.stderr
    assert {row["target"] for row in read_rows(tmp_path / "data.csv")} == {"0", "1", "2"}


# --- split ----------------------------------------------------------------------------------------


def test_split_rejects_a_test_size_outside_0_1(tmp_path: Path, prepared: Prepared) -> None:
    result = run_task("split", tmp_path, "--test-size", "1.5", inputs={"iris": prepared.iris})

    assert result.returncode == 2
    assert "--test_size must be between 0 and 1" in result.stderr
    assert not (tmp_path / "train.csv").exists()


def test_split_without_any_input_explains_what_it_needs(tmp_path: Path) -> None:
    result = run_task("split", tmp_path)

    assert result.returncode == 2
    assert "no upstream input" in result.stderr


def test_split_rejects_an_unknown_label_column(tmp_path: Path, prepared: Prepared) -> None:
    result = run_task("split", tmp_path, "--input", str(prepared.iris), "--label_column", "nope")

    assert result.returncode == 2
    assert "label column 'nope' is not in the header" in result.stderr


def test_train_rejects_a_non_numeric_feature(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.csv").write_text("a,b,species\n1,x,s\n2,3,t\n")

    result = run_task("sklearn_train", tmp_path / "out", inputs={"prep": tmp_path / "in"})

    assert result.returncode == 2
    assert "line 2: column 'b' is not a number: 'x'" in result.stderr


def test_train_without_a_tracking_uri_trains_and_says_tracking_was_skipped(tmp_path: Path, prepared: Prepared) -> None:
    result = run_task("sklearn_train", tmp_path / "train", inputs={"split": prepared.split})
    assert result.returncode == 0, result.stderr
    assert "tracking skipped: MLFLOW_TRACKING_URI is not set" in result.stdout
    assert not (tmp_path / "train" / "tracking.json").exists()


def test_train_survives_an_unreachable_tracking_server(tmp_path: Path, prepared: Prepared) -> None:
    result = run_task(
        "sklearn_train", tmp_path / "train", inputs={"split": prepared.split},
        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{free_port()}", MLFLOW_TRACKING_TOKEN="x",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: tracking failed" in result.stdout
    assert (tmp_path / "train" / "model.joblib").is_file()


def test_register_without_an_upstream_tracking_record_explains_what_it_needs(tmp_path: Path) -> None:
    result = run_task(
        "model_register", tmp_path / "register", "--name", "iris", MLFLOW_TRACKING_URI="http://127.0.0.1:9"
    )
    assert result.returncode == 2
    assert "no upstream input" in result.stderr


@pytest.mark.parametrize("alias", ["v2", "Has Space", "dots.not.allowed"])
def test_register_rejects_an_alias_that_is_not_one(tmp_path: Path, alias: str) -> None:
    result = run_task("model_register", tmp_path / "register", "--name", "iris", "--alias", alias)
    assert result.returncode == 2
    assert "--alias" in result.stderr


# --- shell and python -----------------------------------------------------------------------------


def test_dataset_load_copies_the_only_csv_of_the_version_to_data_csv(tmp_path: Path) -> None:
    version = tmp_path / "version"
    (version / "raw").mkdir(parents=True)
    (version / "raw" / "iris.csv").write_text("a,label\n1,x\n2,y\n")
    (version / "README.md").write_text("# not data\n")
    done = run_task("dataset_load", tmp_path / "out", "--dataset", str(version))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "data.csv").read_text() == "a,label\n1,x\n2,y\n"
    assert "loaded iris.csv: 2 rows, columns a, label" in done.stdout


def test_dataset_load_asks_which_file_when_the_version_holds_several(tmp_path: Path) -> None:
    version = tmp_path / "version"
    version.mkdir()
    for name in ("train.csv", "test.csv"):
        (version / name).write_text("a\n1\n")
    done = run_task("dataset_load", tmp_path / "out", "--dataset", str(version))
    assert done.returncode != 0
    assert "2 CSV files (test.csv, train.csv); choose one with --file" in done.stderr
    picked = run_task("dataset_load", tmp_path / "out", "--dataset", str(version), "--file", "test.csv")
    assert picked.returncode == 0, picked.stderr
    (tmp_path / "outside.csv").write_text("secret\n1\n")
    escaped = run_task("dataset_load", tmp_path / "out2", "--dataset", str(version), "--file", "../outside.csv")
    assert escaped.returncode != 0
    assert "is not a file of the dataset version" in escaped.stderr


def test_shell_runs_in_the_output_dir_and_propagates_the_exit_code(tmp_path: Path) -> None:
    result = run_task("shell", tmp_path, "--script", 'echo "in $(pwd)"; echo hi > note.txt; exit 3')

    assert result.returncode == 3
    assert f"in {tmp_path}" in result.stdout
    assert (tmp_path / "note.txt").read_text() == "hi\n"


def test_shell_stops_at_the_first_failing_command(tmp_path: Path) -> None:
    result = run_task("shell", tmp_path, "--script", "echo before\nfalse\necho after")

    assert result.returncode == 1
    assert "before" in result.stdout
    assert "after" not in result.stdout


def test_shell_streams_output_while_running(tmp_path: Path) -> None:
    proc = start_task("shell", tmp_path, "--script", "echo first; sleep 30; echo never")

    line, code = first_line_while_running(proc)

    assert line == "first\n"
    assert code is None


def test_python_propagates_exit_codes_and_exceptions(tmp_path: Path) -> None:
    ok = run_task("python_script", tmp_path, "--code", "import os\nprint('task', os.environ['PORTAL_TASK'])")
    exits = run_task("python_script", tmp_path, "--code", "import sys\nsys.exit(4)")
    raises = run_task("python_script", tmp_path, "--code", "raise ValueError('boom')")

    assert ok.returncode == 0
    assert ok.stdout == f"task {tmp_path.name}\n"
    assert exits.returncode == 4
    assert raises.returncode == 1
    assert "ValueError: boom" in raises.stderr


def test_python_rejects_a_syntax_error_before_running(tmp_path: Path) -> None:
    result = run_task("python_script", tmp_path, "--code", "def (")

    assert result.returncode == 2
    assert "--code is not valid Python" in result.stderr


def test_python_streams_output_while_running(tmp_path: Path) -> None:
    proc = start_task("python_script", tmp_path, "--code", "import time\nprint('first')\ntime.sleep(30)")

    line, code = first_line_while_running(proc)

    assert line == "first\n"
    assert code is None


# --- notify ---------------------------------------------------------------------------------------


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict], dict[str, int]]]:
    """A local webhook: (url, received requests, {"status": the status it answers})."""
    received: list[dict] = []
    answer = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"path": self.path, "headers": dict(self.headers), "json": json.loads(body)})
            self.send_response(answer["status"])
            self.end_headers()
            self.wfile.write(b"nope" if answer["status"] >= 400 else b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received, answer
    finally:
        server.shutdown()
        server.server_close()


def test_notify_posts_the_message_and_run_details(tmp_path: Path, webhook) -> None:
    url, received, _answer = webhook

    result = run_task(
        "notify", tmp_path, "--url", url, "--message", "run done", "--token", "s3cret", "--extra", '{"env": "dev"}'
    )

    assert result.returncode == 0, result.stderr
    assert len(received) == 1
    body = received[0]["json"]
    assert body == {
        "text": "run done",
        "message": "run done",
        "project": "project-a",
        "pipeline": "demo",
        "run_id": "17",
        "task": tmp_path.name,
        "attempt": "1",
        "env": "dev",
    }
    assert received[0]["headers"]["Authorization"] == "Bearer s3cret"
    assert received[0]["headers"]["Content-Type"] == "application/json"
    assert "s3cret" not in result.stdout + result.stderr


def test_notify_reads_the_token_from_the_env_when_not_given(tmp_path: Path, webhook) -> None:
    url, received, _answer = webhook

    result = run_task("notify", tmp_path, "--url", url, "--message", "hi", NOTIFY_TOKEN="from-env")

    assert result.returncode == 0, result.stderr
    assert received[0]["headers"]["Authorization"] == "Bearer from-env"


def test_notify_fails_when_the_webhook_answers_500(tmp_path: Path, webhook) -> None:
    url, received, answer = webhook
    answer["status"] = 500

    result = run_task("notify", tmp_path, "--url", url, "--message", "run done")

    assert result.returncode == 1
    assert len(received) == 1
    assert "HTTP 500" in result.stderr


def test_notify_fails_when_nothing_listens(tmp_path: Path) -> None:
    result = run_task("notify", tmp_path, "--url", f"http://127.0.0.1:{free_port()}/", "--message", "x")

    assert result.returncode == 1
    assert "cannot reach" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "file:///etc/passwd", "--message", "x"], "must be an http(s) URL"),
        (["--url", "http://127.0.0.1/", "--message", "x", "--extra", "[1]"], "--extra must be a JSON object"),
    ],
)
def test_notify_rejects_bad_arguments(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_task("notify", tmp_path, *args)

    assert result.returncode == 2
    assert message in result.stderr


# --- TF multi-worker check ------------------------------------------------------------------------


def tf_config(task_type: str = "worker", index: int = 0, workers: int = 2) -> str:
    cluster = {"worker": [f"127.0.0.1:{2222 + i}" for i in range(workers)]}
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}, "environment": "cloud"})


def test_tf_env_check_passes_for_worker_0_of_2(tmp_path: Path) -> None:
    result = run_task("tf_env_check", tmp_path, "--expect_workers", "2", TF_CONFIG=tf_config())

    assert result.returncode == 0, result.stderr
    assert "this is worker 0; cluster of 2 (worker=2)" in result.stdout
    assert json.loads((tmp_path / "tf_config.json").read_text())["workers"] == 2


def test_tf_env_check_worker_1_does_not_write_the_summary(tmp_path: Path) -> None:
    result = run_task("tf_env_check", tmp_path, TF_CONFIG=tf_config(index=1))

    assert result.returncode == 0, result.stderr
    assert "this is worker 1" in result.stdout
    assert not (tmp_path / "tf_config.json").exists()


def test_tf_env_check_fails_without_tf_config(tmp_path: Path) -> None:
    result = run_task("tf_env_check", tmp_path)

    assert result.returncode == 1
    assert "TF_CONFIG is not set" in result.stderr


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "cluster must be a non-empty object"),
        (tf_config(index=2), "index 2 is out of range"),
        (tf_config(task_type="ps"), "'ps' is not a role of the cluster"),
        (json.dumps({"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}}), "is not host:port"),
    ],
)
def test_tf_env_check_explains_a_malformed_tf_config(tmp_path: Path, config: str, message: str) -> None:
    result = run_task("tf_env_check", tmp_path, TF_CONFIG=config)

    assert result.returncode == 1
    assert message in result.stderr


def test_tf_env_check_enforces_the_expected_worker_count(tmp_path: Path) -> None:
    result = run_task("tf_env_check", tmp_path, "--expect_workers", "3", TF_CONFIG=tf_config())

    assert result.returncode == 1
    assert "expected 3 workers, TF_CONFIG has 2" in result.stderr


# --- PyTorch DDP ----------------------------------------------------------------------------------


def test_ddp_train_refuses_to_run_outside_a_distributed_job(tmp_path: Path) -> None:
    result = run_task("pytorch_ddp_train", tmp_path)

    assert result.returncode == 2
    assert "WORLD_SIZE, RANK not set" in result.stderr


def test_ddp_train_without_torch_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    """A `torch` that fails to import stands in for a task environment without PyTorch."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ImportError('No module named torch')\n")

    result = run_task(
        "pytorch_ddp_train",
        tmp_path / "out",
        PYTHONPATH=f"{fake}{os.pathsep}{REPO}",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
        WORLD_SIZE="1",
        RANK="0",
    )

    assert result.returncode == 2
    assert "PyTorch is not installed in this task environment" in result.stderr
    assert "requirements-train.txt" in result.stderr


def test_ddp_train_runs_two_ranks_with_gloo(tmp_path: Path, train_python: str) -> None:
    """In the "train" task environment (torch is never in the portal's venv; skipped without `make train-env`)."""
    out = tmp_path / "out"
    out.mkdir()
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = task_env(
            out, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank)
        )
        env["OMP_NUM_THREADS"] = "1"
        procs.append(
            subprocess.Popen(
                [train_python, "-m", "apps.jobs.builtin_tasks.pytorch_ddp_train", "--epochs", "3"],
                cwd=out,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    deadline = time.monotonic() + 240
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=max(1, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise

    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert "epoch 3/3" in outputs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["rows_per_rank"] == 512
    assert metrics["final_loss"] < 1.0
    assert (out / "model.pt").is_file()


def test_ddp_train_ends_its_process_before_the_interpreter_finalizes(tmp_path: Path, train_python: str) -> None:
    """gloo's threads outlive destroy_process_group(): a rank whose interpreter finalized while one of them still
    released tensors aborted (SIGABRT, exit code 134) after training well. A run of the script ends once everything
    is written (pytorch_ddp_train.exit_now), so the interpreter never finalizes: an atexit handler, which only a
    finalizing interpreter runs, tells."""
    out = tmp_path / "out"
    out.mkdir()
    script = (
        "import atexit, runpy; atexit.register(lambda: print('interpreter finalized', flush=True)); "
        "runpy.run_module('apps.jobs.builtin_tasks.pytorch_ddp_train', run_name='__main__')"
    )
    env = task_env(
        out, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="1", RANK="0", OMP_NUM_THREADS="1"
    )

    result = subprocess.run(
        [train_python, "-c", script, "--epochs", "1", "--samples", "64"],
        cwd=out, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert "epoch 1/1: loss" in result.stdout
    assert "interpreter finalized" not in result.stdout
    assert json.loads((out / "metrics.json").read_text())["world_size"] == 1
