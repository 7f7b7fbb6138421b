"""checker/tree.py with real processes: at the end of a job the judge kills every descendant
but the workers it keeps; a spare's own children (Triton's tools compiling the warm-up) are kept
too, a kept champion's are not. Run in a child process: kill_all kills that process's tree."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from checker import tree
    assert tree.become_subreaper() is True   # as the judge: orphans come back here, the last sweep ends them
    # A "worker" that starts one child of its own (a compile's ptxas) and prints its pid.
    code = "import subprocess,sys,time; p=subprocess.Popen(['sleep','60']); print(p.pid, flush=True); time.sleep(60)"
    workers = [subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True) for _ in range(2)]
    spare, champion = workers
    kids = {w.pid: int(w.stdout.readline()) for w in workers}
    pids = {w.pid for w in workers}
    swept = tree.kill_all(pids, keep=pids, keep_tree={spare.pid})
    alive = lambda p: not tree.is_zombie(p)
    out = {"swept": swept, "spare_child": alive(kids[spare.pid]), "champion_child": alive(kids[champion.pid]),
           "workers": [alive(p) for p in pids]}
    for w in workers:
        w.kill(); w.wait()
    tree.kill_all(set())
    print(json.dumps(out))
""")


def test_a_spares_children_outlive_the_job_and_a_kept_champions_do_not():
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["workers"] == [True, True]          # both kept
    assert out["spare_child"] is True              # the spare's compile goes on
    assert out["champion_child"] is False          # a kept champion's child is a stray: killed
    assert len(out["swept"]["killed"]) == 1 and out["swept"]["survivors"] == []


def test_a_process_counts_as_ended_once_sigkill_is_sent_and_no_other_signal_does():
    """tree.is_dying: what lets the end-of-job sweep skip waiting for a killed worker's exit (its
    CUDA context's teardown, about 0.1 s on the H200). A stopped process with SIGTERM pending is
    not ending (it has a handler: an unhandled fatal signal becomes a group kill at once); once
    SIGKILL is sent it is (pending, exiting or a zombie), before anyone reaps it; a running
    process is not; a pid that is gone is."""
    import os
    import signal
    import time

    from checker import tree
    code = "import signal,time; signal.signal(signal.SIGTERM, lambda *a: None); print(1, flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "1"   # its handler is in place
        assert tree.is_dying(p.pid) is False
        os.kill(p.pid, signal.SIGSTOP)
        os.kill(p.pid, signal.SIGTERM)   # pending while it is stopped: not an end
        time.sleep(0.05)
        assert tree.is_dying(p.pid) is False
        os.kill(p.pid, signal.SIGKILL)
        assert tree.is_dying(p.pid) is True   # not yet reaped
        assert p.poll() is None or p.returncode == -signal.SIGKILL
    finally:
        p.kill()
        p.wait()
    assert tree.is_dying(p.pid) is True   # reaped: gone
