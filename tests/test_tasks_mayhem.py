"""Tasks under mayhem: writers in separate processes racing on one task, and kill -9.

Children are ``sys.executable`` subprocesses using the library. Nothing here
asserts timing: delays only decide where a child dies.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

from faults import child

from projections import ContextStore

RACER = """
    import json, os, sys, time
    from projections import ContextStore
    from projections.task_api import TaskError
    root, go, action, ids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    store = ContextStore.open(root)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    for tid in ids:
        try:
            if action == "complete":
                store.tasks.complete(tid)
            elif action == "fail":
                store.tasks.fail(tid, "lost the race")
            else:
                store.tasks.cancel(tid, force=True)
            print(json.dumps([tid, "won"]), flush=True)
        except TaskError as e:
            print(json.dumps([tid, type(e).__name__]), flush=True)
    store.close()
"""


def test_racing_writers_exactly_one_terminal_transition_wins(tmp_path: Path) -> None:
    with ContextStore.open(tmp_path) as store:
        ids = []
        for i in range(12):
            tid = store.tasks.create(f"race {i}").id
            store.tasks.start(tid)
            ids.append(tid)
    go = tmp_path / "go"
    actions = ["complete", "fail", "cancel", "complete"]
    procs = [child(RACER, tmp_path, go, a, ",".join(ids), stdout=subprocess.PIPE)
             for a in actions]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    go.touch()
    results: dict[str, list[tuple[str, str]]] = {tid: [] for tid in ids}
    for a, p in zip(actions, procs, strict=True):
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        for line in out.splitlines():
            tid, outcome = json.loads(line)
            results[tid].append((a, outcome))
    with ContextStore.open(tmp_path) as store:
        for tid, outs in results.items():
            winners = [a for a, o in outs if o == "won"]
            assert len(winners) == 1, (tid, outs)
            assert all(o == "TaskStateError" for _a, o in outs if o != "won")
            want = {"complete": "completed", "fail": "failed", "cancel": "cancelled"}[winners[0]]
            info = store.tasks.get(tid)
            assert info is not None and info.state == want and not info.quarantined
            kinds = [e.kind for e in store.tasks.history(tid)]
            assert kinds == ["task.created", "task.started", f"task.{want}"]
        assert store.ledger.verify().ok


KILLED_WRITER = """
    import json, sys
    from projections import ContextStore
    root, rnd = sys.argv[1], int(sys.argv[2])
    store = ContextStore.open(root)
    print("ready", flush=True)
    n = 0
    while True:
        t = store.tasks.create(f"r{rnd} t{n}", labels=[f"r{rnd}"])
        print(json.dumps([t.id, t.last_seq, "task.created"]), flush=True)
        s = store.tasks.start(t.id)
        print(json.dumps([t.id, s.last_seq, "task.started"]), flush=True)
        for j in range(n % 4):
            s = store.tasks.note(t.id, "file_edit", {"path": f"src/{j}.py"})
            print(json.dumps([t.id, s.last_seq, "task.note"]), flush=True)
        s = store.tasks.complete(t.id) if n % 2 else store.tasks.fail(t.id, "boom")
        print(json.dumps([t.id, s.last_seq, "task.completed" if n % 2 else "task.failed"]),
              flush=True)
        n += 1
"""


def test_kill_9_during_task_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20261202)
    acked: dict[int, tuple[str, str]] = {}  # seq -> (task id, kind)
    for rnd in range(8):
        p = child(KILLED_WRITER, tmp_path, rnd, stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        time.sleep(0.05 + rng.choice([0.0, 0.01, 0.05, 0.2]) * rng.random())
        p.send_signal(signal.SIGKILL)
        out = p.stdout.read()
        p.wait()
        p.stdout.close()
        assert p.returncode == -signal.SIGKILL
        for line in out.splitlines(keepends=True):
            if not line.endswith("\n"):
                break  # being printed when it died: not acknowledged
            tid, seq, kind = json.loads(line)
            acked[seq] = (tid, kind)
        with ContextStore.open(tmp_path) as store:
            by_task: dict[str, list[tuple[int, str]]] = {}
            for seq, (tid, kind) in sorted(acked.items()):
                by_task.setdefault(tid, []).append((seq, kind))
            for tid, want in by_task.items():
                hist = store.tasks.history(tid)
                got = [(e.seq, e.kind) for e in hist]
                assert got[: len(want)] == want, f"round {rnd}: acknowledged events of {tid} lost"
                assert all(e.status == "applied" for e in hist)
            # nothing the writers did not do: no quarantine, ever
            assert store.tasks.list(state="quarantined") == []
            assert store.ledger.verify().ok
    assert len({tid for tid, _k in acked.values()}) >= 8, "the writers hardly wrote: no test"
