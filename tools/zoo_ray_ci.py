"""The zoo on a real local Ray cluster, checked against the local executor (``make zoo-ray-ci``).

Steps:

1. start a Ray head (``ray start --head --block``) of ``--cpus`` CPUs, with its sockets, logs
   and spill files in a temporary folder and its usage statistics off;
2. run ``onnxmem zoo ZOO --executor ray`` against it (``RAY_ADDRESS``), into ``OUT/ray``;
3. run ``onnxmem zoo ZOO --executor local --jobs CPUS`` on the same zoo, into ``OUT/local``;
4. check: both runs complete, ``--models`` models, every one ``ok``, the Ray run's results record
   at least ``--min-workers`` distinct worker processes, and every model's figures and plan
   (offsets included, timings left out) are the same in both runs;
5. always, even on an error or a signal: stop the head (SIGTERM, which stops the processes it
   started; SIGKILL to its process group after a grace period), kill by id any process still
   naming the temporary folder (and say so: that is a failure), and remove the folder.

Exit code 0 when every check holds; 1 otherwise, with one line per difference.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ZOO = ROOT / "models" / "zoo" / "catalog-50.json"
#: the object store of the head (results and task arguments are small)
OBJECT_STORE_BYTES = 128 * 2**20
#: seconds the head may take to start, and to stop after SIGTERM
START_SECONDS = 120
STOP_SECONDS = 60
#: keys of a result or a plan that measure time or name the process or file, not the plan
TIMING_KEYS = frozenset({"seconds", "plan_seconds", "worker", "plan_file"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zoo", default=str(DEFAULT_ZOO), help="the zoo (catalogue, list or folder)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the Ray head (worker processes)")
    parser.add_argument("--models", type=int, default=50, help="models the runs must hold")
    parser.add_argument("--min-workers", type=int, default=2,
                        help="distinct Ray worker processes the Ray run must record")
    parser.add_argument("--out", default=str(ROOT / "results" / "zoo-ray-ci"),
                        help="folder for the two runs' results (OUT/ray, OUT/local)")
    parser.add_argument("zoo_args", nargs="*", help="more arguments for both 'onnxmem zoo' runs (after --)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_exit)  # a stopped job still stops its cluster
    out = Path(args.out)
    started = time.monotonic()
    with ray_head(args.cpus) as address:
        print(f"ray head at {address} ({args.cpus} CPUs) after {time.monotonic() - started:.1f} s",
              flush=True)
        ray_s = _zoo(args.zoo, out / "ray", ["--executor", "ray", *args.zoo_args], {"RAY_ADDRESS": address})
    local_s = _zoo(args.zoo, out / "local", ["--executor", "local", "--jobs", str(args.cpus), *args.zoo_args])
    ray_doc, local_doc = (_read(out / name / "results.json") for name in ("ray", "local"))
    problems = compare_runs(ray_doc, local_doc, args.models, args.min_workers, out / "ray", out / "local")
    for line in problems:
        print(f"zoo-ray-ci: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"zoo-ray-ci: {len(ray_doc['models'])} models ok on Ray over {ray_doc['workers']} worker "
          f"processes ({ray_s:.1f} s), identical to the local executor ({local_s:.1f} s); "
          f"{time.monotonic() - started:.1f} s in all")
    return 0


def _raise_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _zoo(zoo: str, out: Path, extra: list[str], env: Mapping[str, str] | None = None) -> float:
    """One ``onnxmem zoo`` run (planning), its seconds; its exit code is judged by the checks."""
    cmd = [sys.executable, "-m", "onnxmem", "zoo", zoo, "--out", str(out), *extra]
    print("$ " + " ".join(cmd), flush=True)
    began = time.monotonic()
    subprocess.run(cmd, env={**os.environ, **(env or {})}, check=False, stdout=subprocess.DEVNULL)
    return time.monotonic() - began


def _read(path: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    except (OSError, ValueError) as exc:
        return {"error": f"{path} cannot be read: {exc}", "models": []}


@contextmanager
def ray_head(cpus: int) -> Iterator[str]:
    """A Ray head on this machine for the length of the block; yields its address.

    Its files go in a temporary folder, removed at the end; it and this process's children
    (the zoo runs) share the settings of :func:`onnxmem.zoo.ray_settings` (usage statistics
    off, a random token, no file in the home folder) and token authentication. On leaving, the head is stopped and every
    process that still names the folder is killed by its id; such a process is an error.
    """
    from onnxmem.zoo import ray_settings

    ray = Path(sys.executable).with_name("ray")
    with ray_settings(), tempfile.TemporaryDirectory(prefix="onnxmem-ray-ci-") as temp, \
            open(Path(temp) / "head.log", "wb") as log:
        os.environ["RAY_AUTH_MODE"] = "token"  # the head, and the zoo run that connects to it
        cmd = [str(ray), "start", "--head", "--block", "--num-cpus", str(cpus),
               "--temp-dir", str(Path(temp) / "ray"), "--port", str(_free_port()),
               "--node-ip-address", "127.0.0.1", "--include-dashboard=false",
               "--disable-usage-stats", "--object-store-memory", str(OBJECT_STORE_BYTES)]
        head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield _address(head, Path(temp))
        finally:
            left = _stop(head, temp)
            if left:
                raise SystemExit(f"zoo-ray-ci: processes left behind by the Ray cluster, killed: {left}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _address(head: subprocess.Popen[bytes], temp: Path) -> str:
    """The head's address once it is up (``ray start`` writes it in its temporary folder)."""
    file = temp / "ray" / "ray_current_cluster"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if file.is_file() and file.read_text().strip():
            return file.read_text().strip()
        if head.poll() is not None:
            break
        time.sleep(0.5)
    tail = (temp / "head.log").read_text(errors="replace")[-2000:]
    raise SystemExit(f"zoo-ray-ci: the Ray head did not start (exit code {head.poll()}):\n{tail}")


def _stop(head: subprocess.Popen[bytes], temp: str) -> list[int]:
    """Stop the head and its processes; return the ids of those that had to be killed after."""
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)  # ray start --block stops the processes it started
        try:
            head.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
    left = []
    deadline = time.monotonic() + 10
    while True:
        left = _naming(temp)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the last workers exit on their own once the raylet is gone
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _naming(temp: str) -> list[int]:
    """Ids of the processes (other than this one) whose command line names ``temp``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if temp.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def compare_runs(ray: Mapping[str, Any], local: Mapping[str, Any], models: int, min_workers: int,
                 ray_dir: Path | None = None, local_dir: Path | None = None) -> list[str]:
    """What is wrong with a Ray run against a local run of the same zoo (nothing: ``[]``).

    Both must be complete and hold ``models`` models, all ``ok``; the Ray run must record at
    least ``min_workers`` distinct workers; each model's fields other than its timings and
    worker must be equal, and so must its plan file when the folders are given.
    """
    problems = [f"{name} run: {doc['error']}" for name, doc in (("ray", ray), ("local", local))
                if "error" in doc]
    for name, doc in (("ray", ray), ("local", local)):
        rows = doc.get("models", [])
        if "error" not in doc and (not doc.get("complete") or len(rows) != models):
            problems.append(f"{name} run: {len(rows)} models, complete={doc.get('complete')}; "
                            f"expected {models}, complete")
        bad = [f"{r['name']} ({r['status']}: {r.get('error')})" for r in rows if r["status"] != "ok"]
        if bad:
            problems.append(f"{name} run: {len(bad)} models not ok: {'; '.join(bad)}")
    if ray.get("workers", 0) < min_workers:
        problems.append(f"ray run: {ray.get('workers', 0)} distinct worker processes; expected "
                        f"at least {min_workers}")
    theirs = {r["name"]: r for r in local.get("models", [])}
    for row in ray.get("models", []):
        other = theirs.get(row["name"])
        if other is None:
            problems.append(f"{row['name']}: in the ray run only")
            continue
        diff = sorted(k for k in set(row) | set(other) if k not in TIMING_KEYS
                      and row.get(k) != other.get(k))
        if diff:
            problems.append(f"{row['name']}: differs in {', '.join(diff)} "
                            f"(ray {[row.get(k) for k in diff]}, local {[other.get(k) for k in diff]})")
        elif ray_dir is not None and local_dir is not None:
            problems += _compare_plans(row["name"], ray_dir, local_dir)
    return problems


def _compare_plans(name: str, ray_dir: Path, local_dir: Path) -> list[str]:
    plans = [_read(d / "plans" / f"{name}.json") for d in (ray_dir, local_dir)]
    if any("error" in p for p in plans):
        return [f"{name}: plan file missing ({'; '.join(p['error'] for p in plans if 'error' in p)})"]
    if _without_timing(plans[0]) != _without_timing(plans[1]):
        return [f"{name}: the plans differ (plans/{name}.json)"]
    return []


if __name__ == "__main__":
    sys.exit(main())
