"""Peers and the second look in Nebius jobs, through the stand-in `nebius` first on PATH
(tests/fake_nebius.py): real subprocesses all the way down. The stand-in really runs the injected
entry script and checker with KERNLOOP_NEBIUS_CHECK_MODE=interpret-timed: real Triton kernels in
the interpreter (fp16), the A/B, the peers and the profile timed on the host clock, so the numbers
are the interpreter's (meaningless) while every step of the path is the real one. The container
sees none of this machine's KERNLOOP_* variables (as a real one), so KERNLOOP_NCU must travel in
the job's arguments. A stand-in `ncu` (writes the sample CSV where ncu would, as in
tests/test_ncu.py) stands for a container image that has Nsight Compute.

Each job here takes 3-10 s on the CPU; the whole orchestrator run about 40 s.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from kernloop.standing import briefing  # noqa: E402
import fake_nebius  # noqa: E402
import nebius_jobs as nj  # noqa: E402
from kernloop import page  # noqa: E402
import checker  # noqa: E402
from loopback_openai import LoopbackOpenAI, reply  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from test_nebius_jobs import FAST, fake, flag_values  # noqa: E402,F401
from pagekit import Parsed  # noqa: E402
from kernloop.trajectory import read_events  # noqa: E402

REPS, WARMUP = 8, 2
NAIVE_CONFIG = "CONFIG = dict(BLOCK_SIZE=256, ROWS=1, num_warps=4)"
# 4 rows a program: a third of the programs on the first check shape (9 x 100), about 2.7x
# faster in the interpreter than the naive baseline's one row a program.
FAST_CONFIG = "CONFIG = dict(BLOCK_SIZE=256, ROWS=4, num_warps=4)"
NCU_SAMPLE = ROOT / "tests" / "fixtures" / "ncu_raw_sample.csv"
SIGHT_NAMES = {f"checker/{n}.py" for n in ("sight", "peers", "kernelprofile", "ncu")}
PACKAGE_NAMES = {f"checker/{os.path.basename(p)}" for p in checker.files()}


def small_softmax(tmp: Path, reps: int = REPS) -> Path:
    """specs/softmax.yaml with few timed reps, and its naive baseline beside it."""
    d = tmp / "spec"
    d.mkdir()
    text = (ROOT / "specs" / "softmax.yaml").read_text()
    assert "timing: {warmup: 10, reps: 50}" in text
    (d / "softmax.yaml").write_text(text.replace("timing: {warmup: 10, reps: 50}",
                                                 f"timing: {{warmup: {WARMUP}, reps: {reps}}}"))
    (d / "softmax_naive.py").write_text((ROOT / "specs" / "softmax_naive.py").read_text())
    return d / "softmax.yaml"


def kernel(tmp: Path, name: str, config: str) -> Path:
    code = (ROOT / "specs" / "softmax_naive.py").read_text()
    assert NAIVE_CONFIG in code
    p = tmp / name
    p.write_text(code.replace(NAIVE_CONFIG, config))
    return p


def path_without_ncu(extra: Path | None = None) -> str:
    """This PATH without any folder holding an `ncu` (a container image without Nsight Compute)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "ncu").exists()]
    return os.pathsep.join(([str(extra)] if extra else []) + dirs)


def stand_in_ncu(bin_dir: Path, marker: Path) -> None:
    """An executable `ncu` that records each run in `marker` and writes the sample CSV to its
    --log-file (this machine has no GPU: no counter here is measured)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "ncu"
    exe.write_text(f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\n"
                   f"open({str(marker)!r}, 'a').write('ran\\n')\n"
                   f"shutil.copy({str(NCU_SAMPLE)!r}, args[args.index('--log-file') + 1])\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def timed(fake, monkeypatch, tmp_path):
    """The stand-in, its checker timed on the host clock, a PATH without ncu, a small spec."""
    monkeypatch.setenv("KERNLOOP_NEBIUS_CHECK_MODE", "interpret-timed")
    monkeypatch.delenv("KERNLOOP_NCU", raising=False)
    monkeypatch.setenv("PATH", path_without_ncu())
    fake.spec = load_spec(small_softmax(tmp_path))
    return fake


def evaluate(fake, candidate, champion, workdir: Path, peers: bool = False) -> dict:
    backend = nj.NebiusBackend(nj.settings_from_env(), say=lambda m: None)
    return backend.evaluate(fake.spec, candidate, champion, workdir, peers=peers)


def creates(fake) -> list[list[str]]:
    return [c["argv"] for c in fake.calls() if c["argv"][:3] == ["ai", "job", "create"]]


def injected(argv: list[str]) -> set[str]:
    return {v.split(":", 1)[0] for v in flag_values(argv, "--inject-file")}


# ---------------------------------------------------------------- one job each

def test_a_baseline_job_times_the_peers_and_profiles_in_the_same_container(timed, tmp_path):
    """The baseline's job: peers asked for, the sight modules injected, the judge's second look
    in the job that timed it; no ncu in the container, so the profile says why it has none."""
    base = timed.spec.baseline
    res = evaluate(timed, base, base, tmp_path / "baseline", peers=True)
    assert res["ok"] is True, res.get("error")
    (create,) = creates(timed)                                  # one container start, no more
    assert flag_values(create, "--args") == ["/kernloop/checker/nebius_entry.py interpret-timed peers ncu=auto"]
    assert SIGHT_NAMES <= injected(create) and PACKAGE_NAMES <= injected(create)
    assert res["clock"] == "host" and "not a GPU measurement" in res["backend_meta"]["note"]
    assert "sight_error" not in res

    blk = res["peers"]
    assert {"torch.softmax", "torch.compile"} <= set(blk["peers"])
    assert all(s["n"] == REPS and s["median_ms"] > 0 for s in blk["peers"].values())
    assert blk["kernels"]["candidate"]["n"] == REPS and blk["rel_l2"]["torch.softmax"] < 1e-2
    if "liger" not in blk["peers"]:                             # an optional package: said why
        assert "liger" in blk["skipped"]

    prof = res["profile"]["candidate"]                          # a peers job always profiles
    assert prof["clock"] == "host" and prof["launch"]["n"] == 5 and prof["launch"]["host_us"] > 0
    assert prof["kernels"] == [] and "compiles no kernel" in prof["kernels_skipped"]
    assert prof["ncu"]["ok"] is False and prof["ncu"]["skipped"] is True
    assert "ncu (Nsight Compute) is not on PATH" in prof["ncu"]["error"]


def test_a_candidate_gets_the_second_look_in_its_own_job_only_when_it_may_be_promoted(timed, tmp_path,
                                                                                     monkeypatch):
    """The local backend's decision point, in the container: profiled when its mean beats the
    champion's (sight.wants_profile), never in a job of its own; with ncu in the image it runs
    there, and KERNLOOP_NCU=off on this machine keeps it from running."""
    fast, slow = kernel(tmp_path, "fast.py", FAST_CONFIG), timed.spec.baseline
    marker = tmp_path / "ncu-runs.txt"
    stand_in_ncu(tmp_path / "ncu-bin", marker)
    monkeypatch.setenv("PATH", path_without_ncu(tmp_path / "ncu-bin"))   # an image with ncu

    won = evaluate(timed, fast, slow, tmp_path / "it0001")
    assert won["ok"] and won["candidate"]["mean_ms"] < won["champion"]["mean_ms"], won.get("error")
    assert "peers" not in won
    assert "profile" in won, {k: won.get(k) for k in ("sight_error", "error", "candidate", "champion")}
    prof = won["profile"]["candidate"]
    assert prof["launch"]["host_us"] > 0 and prof["verdict"]["gpu_ms"] == won["candidate"]["median_ms"]
    assert prof["ncu"]["ok"] is True and prof["ncu"]["counters"]["main_kernel"] == "_softmax_onepass"
    assert marker.read_text() == "ran\n"

    lost = evaluate(timed, slow, fast, tmp_path / "it0002")
    assert lost["ok"] and lost["candidate"]["mean_ms"] > lost["champion"]["mean_ms"]
    assert "profile" not in lost and "peers" not in lost and marker.read_text() == "ran\n"

    monkeypatch.setenv("KERNLOOP_NCU", "off")                     # on this machine, not in the job
    off = evaluate(timed, fast, slow, tmp_path / "it0003")
    assert off["backend_meta"]["entry_args"] == "interpret-timed ncu=off"
    assert off["profile"]["candidate"]["launch"]["host_us"] > 0
    assert "ncu" not in off["profile"]["candidate"] and marker.read_text() == "ran\n"
    assert [flag_values(c, "--args")[0].split(" ", 1)[1] for c in creates(timed)] == [
        "interpret-timed ncu=auto", "interpret-timed ncu=auto", "interpret-timed ncu=off"]


def test_every_file_a_job_injects_fits_the_inject_limit():
    """Each injected file is refused over 64 KiB before any job is created (nebius_jobs.oversized);
    every file of the checker package (the second look's and both entries among them) must stay
    under it."""
    files = [Path(p) for p in checker.files()]
    sizes = {p.name: p.stat().st_size for p in files}
    assert {"nebius_entry.py", "nebius_batch_entry.py", "sight.py", "check.py"} <= set(sizes)
    assert all(0 < n <= nj.MAX_INJECT_BYTES for n in sizes.values()), sizes


@pytest.mark.parametrize("words,error", [(["gpu", "profile"], "unknown option 'profile'"),
                                         (["gpu", "ncu=always"], "unknown option 'ncu=always'"),
                                         (["cpu"], "mode must be one of gpu, interpret, interpret-timed")])
def test_the_entry_refuses_words_it_does_not_know(tmp_path, words, error):
    entry = Path(checker.ship(tmp_path)) / "nebius_entry.py"
    p = subprocess.run([sys.executable, str(entry), *words], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and error in p.stderr and "KERNLOOP_RESULT" not in p.stdout


# ---------------------------------------------------------------- a whole run

def test_a_nebius_run_shows_peers_and_profiles_in_its_log_prompt_and_page(tmp_path):
    """`orchestrator.py --backend nebius` with the LLM proposer (a loopback chat server): the
    baseline and final events carry peers and a profile, the promoted candidate a profile, the
    rejected one neither; the prompts and the page show them from those log fields; one
    container start per job."""
    spec = small_softmax(tmp_path, reps=24)   # a verdict on the host clock: 8 reps, one stall flips it
    fast = (ROOT / "specs" / "softmax_naive.py").read_text().replace(NAIVE_CONFIG, FAST_CONFIG)
    same = (ROOT / "specs" / "softmax_naive.py").read_text()
    bin_dir = tmp_path / "bin"
    fake_nebius.install(bin_dir)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERNLOOP_", "FAKE_NEBIUS_")) and k not in ("TAVILY_API_KEY", "NVIDIA_API_KEY")}
    env.update(FAST, KERNLOOP_NEBIUS_CHECK_MODE="interpret-timed", PATH=path_without_ncu(bin_dir),
               PYTHONUNBUFFERED="1", FAKE_NEBIUS_STATE=str(tmp_path / "fake-state"),
               FAKE_NEBIUS_SCENARIO="success", KERNLOOP_LLM_API_KEY="sk-loopback",
               KERNLOOP_LLM_MODEL="loopback/nemotron", KERNLOOP_LLM_MAX_RETRIES="0",
               KERNLOOP_LLM_REPAIR_RETRIES="0")
    answers = [reply(f"```python\n# NOTE: four rows a program\n{fast}```"),
               reply(f"```python\n# NOTE: back to one row a program\n{same}```")]
    with LoopbackOpenAI(script=answers) as srv:
        env["KERNLOOP_LLM_BASE_URL"] = srv.base_url
        p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "--spec", str(spec),
                            "--backend", "nebius", "--proposer", "llm", "--iterations", "2",
                            "--out", str(tmp_path / "runs")], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=400)
        prompts = [r.text for r in srv.chat_requests]
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    events = read_events(run_dir / "run.jsonl")                 # every event fits the schema
    by = {e["event"]: e for e in events}
    iters = [e for e in events if e["event"] == "iteration"]
    assert [e["decision"]["verdict"] for e in iters] == ["promoted", "rejected"], \
        [e["decision"] for e in iters]

    for e in (by["baseline"], by["final"]):                     # peers and a profile, in one job
        r = e["result"]
        assert {"torch.softmax", "torch.compile"} <= set(r["peers"]["peers"]), e["event"]
        assert r["profile"]["candidate"]["launch"]["host_us"] > 0
        assert "not on PATH" in r["profile"]["candidate"]["ncu"]["error"]
        assert "peers" in r["backend_meta"]["entry_args"].split()
    assert by["final"]["candidate_id"] == "it0001"
    assert "profile" in iters[0]["result"] and "peers" not in iters[0]["result"]
    assert "profile" not in iters[1]["result"] and "peers" not in iters[1]["result"]
    assert all("peers" not in e["result"]["backend_meta"]["entry_args"].split() for e in iters)
    jobs = [by["baseline"], *iters, by["final"]]
    assert len({e["result"]["backend_meta"]["job_id"] for e in jobs}) == 4
    assert len([c for c in fake_nebius.calls(tmp_path / "fake-state")
                if c["argv"][:3] == ["ai", "job", "create"]]) == 4   # no extra start for a profile
    # host-clock numbers are no measurement: the run is labelled synthetic on every line it
    # touches, and the final line compares with no peer (as for any modeled run)
    assert all(e["result"]["synthetic"] is True for e in jobs)
    timed = [ln for ln in p.stdout.splitlines() if re.search(r"[0-9] ms\b", ln)]   # lines with a time
    assert timed and all("SYNTHETIC" in ln for ln in timed), [ln for ln in timed if "SYNTHETIC" not in ln]
    assert "MODELED" in by["run_end"]["final_line"] and "best peer" not in by["run_end"]["final_line"]
    assert by["run_end"]["final_line"].endswith("peers are not compared on a synthetic run (their times are "
                                                "the host clock's)")

    # The prompts: a synthetic run's times are not offered to the model as measurements (the
    # same section, peers and profile lines included, is what a GPU job's result gives: the
    # briefing reads the same fields; tests/test_briefing.py).
    assert len(prompts) == 2
    for text in prompts:
        assert briefing.MODELED in text and "Time to beat:" not in text
        assert "Peers (what a user would run instead" not in text

    # The page: the peers in the header and on the chart, the profile on the baseline's and the
    # promoted card.
    html = page.render_run(run_dir).read_text()
    text = re.sub(r"\s+", " ", Parsed(html).text())
    assert "Peers (median, final champion job)" in text and "torch.softmax" in text   # the newest block
    assert html.count('class="peerl"') >= 2
    assert html.count("<h4>Profile</h4>") == 2                 # the baseline's card, it0001's
    for ev in (by["baseline"], iters[0]):
        assert all(line in text for line in briefing.profile_lines(ev["result"]["profile"]["candidate"]))
