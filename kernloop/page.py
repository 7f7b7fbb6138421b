"""The trajectory page: one run folder's JSONL log rendered into one self-contained HTML file.

    python orchestrator.py page RUN_DIR                         re-render RUN_DIR/trajectory.html
    python orchestrator.py page RUNS_DIR --index                render every run under RUNS_DIR and RUNS_DIR/index.html
    python orchestrator.py page RUN_DIR --index                 re-render the run, then the index of its parent folder
    python orchestrator.py page --screenshot RUN_DIR out.png    re-render, then screenshot it with headless Chromium

The page is built from `run.jsonl` ALONE plus the files it names inside the run folder
(`baseline.py`, `candidates/<id>.py`, `candidates/<id>.prompt.txt` / `.response.txt`). Inline CSS,
inline SVG and a little inline JS: it opens from the file system and makes no network request.
While the log has no `run_end` the page carries a meta refresh, so an open tab is a live view.

Every field of every event may be missing, null or of the wrong type (failed candidates, older
logs, a torn last line): the page still renders and says what it could not show.
"""
from __future__ import annotations

import datetime as _dt
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from urllib.parse import quote

import jinja2
from markupsafe import escape

from kernloop import settings
from kernloop.errors import ArgParser, KernLoopError, report
from kernloop.view.cardview import VERDICT_HELP, VERDICTS, RunFiles
from kernloop.view.htmlfmt import as_text, fmt_bool, fmt_duration, fmt_frac_pct, fmt_ms, fmt_num, fmt_pct, fmt_speedup, fmt_ts
from kernloop.view.pageview import LEVELS, LOG_NAME, REFRESH_S, SIZE_BUDGET, build_view
from kernloop.trajectory import read_events

TEMPLATES = Path(str(resources.files("kernloop") / "templates"))   # package data (templates/ in the repo)
PAGE_NAME = "trajectory.html"
INDEX_NAME = "index.html"
STRICT = False            # tests flip this on: a template typo then fails loudly instead of rendering ""


class PageError(KernLoopError):
    """What page.py cannot do (not a run folder, no Chromium, Chromium failed): one error line."""


def read_log(path: Path):
    """(events, warnings): the log read tolerantly, as the page needs it."""
    warnings: list = []
    return read_events(path, warnings), warnings


# ----------------------------------------------------------------------------- rendering

_ENVS: dict = {}


def _env() -> jinja2.Environment:
    """One Jinja environment per strictness, so templates compile once per process (the
    orchestrator re-renders after every event)."""
    if STRICT not in _ENVS:
        _ENVS[STRICT] = _make_env(STRICT)
    return _ENVS[STRICT]


def _make_env(strict: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,                                   # every log string is hostile until escaped
        undefined=jinja2.StrictUndefined if strict else jinja2.ChainableUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters.update(ms=fmt_ms, num=fmt_num, pct=fmt_pct, fpct=fmt_frac_pct, speedup=fmt_speedup,
                       dur=fmt_duration, yesno=fmt_bool, ts=fmt_ts)
    return env


def _atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def render_run_html(run_dir: Path) -> str:
    run_dir = Path(run_dir)
    events, warnings = read_log(run_dir / LOG_NAME)
    tpl = _env().get_template("trajectory.html.j2")
    files = RunFiles(run_dir)

    def render(level):
        view = build_view(run_dir, LEVELS[level], events, warnings, files)
        view["level"] = level
        return tpl.render(v=view, verdicts=VERDICTS, verdict_help=VERDICT_HELP), view["inline_bytes"]

    html, inline0 = render(0)
    size = len(html.encode("utf-8"))
    if size <= SIZE_BUDGET:
        return html
    # Too big: estimate each level from its inline text alone (views are cheap once the files and
    # diffs are cached), render the first that should fit, and step on if the estimate was short.
    fixed = size - inline0
    level = len(LEVELS) - 1
    for k in range(1, len(LEVELS)):
        est = fixed + build_view(run_dir, LEVELS[k], events, warnings, files)["inline_bytes"]
        if est <= SIZE_BUDGET * 0.97:
            level = k
            break
    while True:
        html, _ = render(level)
        if len(html.encode("utf-8")) <= SIZE_BUDGET or level == len(LEVELS) - 1:
            return html
        level += 1


def render_run(run_dir: Path) -> Path:
    """Render run_dir/run.jsonl (+ the files it names) into run_dir/trajectory.html, atomically.

    The orchestrator calls this after every event, so a page bug must never stop a run: outside
    STRICT mode an unexpected error writes a plain fallback page (with the error) instead."""
    run_dir = Path(run_dir)
    out = run_dir / PAGE_NAME
    try:
        html = render_run_html(run_dir)
    except Exception as e:
        if STRICT:
            raise
        import traceback
        print(f"page.py: could not render {out}: {type(e).__name__}: {e}", file=sys.stderr)
        try:
            live = '"run_end"' not in (run_dir / LOG_NAME).read_text(encoding="utf-8", errors="replace")
        except OSError:
            live = True
        html = ("<!doctype html><meta charset=utf-8>"
                + (f'<meta http-equiv="refresh" content="{REFRESH_S}">' if live else "")
                + "<title>KernLoop run: page error</title>"
                "<body style='font:14px system-ui,sans-serif;margin:24px'><h1>The trajectory page failed to render</h1>"
                f"<p>The run itself is unaffected; its log is <code>{escape(LOG_NAME)}</code>. "
                "Re-render with <code>python orchestrator.py page RUN_DIR</code> once fixed.</p>"
                f"<pre>{escape(traceback.format_exc())}</pre>")
    _atomic_write(out, html)
    return out


def summarize_run(run_dir: Path) -> dict:
    """The headline numbers of one run, for the index."""
    run_dir = Path(run_dir)
    events, warnings = read_log(run_dir / LOG_NAME)
    tiny = dict(prompt=0, response=0, diff_lines=0, text=300)
    v = build_view(run_dir, tiny, events, warnings)
    start = next((e for e in events if e.get("event") == "run_start"), {})
    return {
        "dir": run_dir.name, "href": quote(run_dir.name) + "/" + PAGE_NAME, "run_id": v["run_id"],
        "spec": v["spec"]["name"], "backend": v["backend"], "synthetic": v["synthetic"],
        "proposer": v["proposer"], "model": v["model"], "device": v["device"],
        "started": v["started"], "sort_key": as_text(start.get("ts")) or (events[0].get("ts") if events else "") or "",
        "duration": v["duration"], "live": v["live"], "has_events": v["has_events"],
        "done": v["done"], "planned": v["planned"], "base_ms": v["base_ms"], "champ_ms": v["champ_ms"],
        "champ_id": v["champ_id"], "speedup": v["speedup"], "roof": v["champ_roof"],
        "stop_reason": v["stop_reason"], "stopped": v["stopped"], "counts": v["counts"],
        "has_page": (run_dir / PAGE_NAME).is_file(),
    }


def find_runs(runs_dir: Path) -> list:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / LOG_NAME).is_file())


def render_index(runs_dir: Path, render_missing: bool = True) -> Path:
    """Write runs_dir/index.html listing every run folder (one holding run.jsonl), newest first.
    A run without a trajectory.html yet gets one, so every link works."""
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    rows, warnings = [], []
    for d in find_runs(runs_dir):
        try:
            if render_missing and not (d / PAGE_NAME).is_file():
                render_run(d)
            rows.append(summarize_run(d))
        except Exception as e:  # a broken run folder must not hide the others
            warnings.append(f"{d.name}: {type(e).__name__}: {e}")
    rows.sort(key=lambda r: (r["sort_key"], r["dir"]), reverse=True)
    html = _env().get_template("index.html.j2").render(
        runs=rows, warnings=warnings, title=runs_dir.resolve().name,
        generated=fmt_ts(_dt.datetime.now(_dt.timezone.utc).isoformat()))
    out = runs_dir / INDEX_NAME
    _atomic_write(out, html)
    return out


# ----------------------------------------------------------------------------- screenshot + CLI

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1", "--mute-audio")


def find_chromium():
    env = settings.get("KERNLOOP_CHROMIUM")
    if env:
        return env if Path(env).is_file() or shutil.which(env) else None
    for name in CHROMIUM_NAMES:
        p = shutil.which(name)
        if p:
            return p
    return None


def screenshot(html_path: Path, png_path: Path, width: int = 1400, height: int = 2000, timeout: float = 90) -> Path:
    """Screenshot a page with headless Chromium (the OS package). Returns the PNG path."""
    chrome = find_chromium()
    if chrome is None:
        raise PageError("no Chromium found: install it (apt-get install chromium) or set KERNLOOP_CHROMIUM")
    png_path = Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernloop-chrome-") as profile:
        cmd = [chrome, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={png_path}", Path(html_path).resolve().as_uri()]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, text=True)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PageError(f"Chromium ({chrome}) did not run: {e}") from None
    if proc.returncode != 0 or not png_path.is_file():
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise PageError(f"Chromium failed (exit {proc.returncode}): {tail[0][:300]}")
    return png_path


def main(argv=None) -> int:
    ap = ArgParser(prog="orchestrator.py page", description="Render KernLoop trajectory pages.")
    ap.add_argument("paths", nargs="*", help="RUN_DIR (or RUNS_DIR with --index); with --screenshot: RUN_DIR OUT.png")
    ap.add_argument("--index", action="store_true", help="also (or only, for a runs folder) write the runs index")
    ap.add_argument("--screenshot", action="store_true", help="render RUN_DIR, then screenshot it to OUT.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=2000)
    a = ap.parse_args(argv)
    if a.screenshot:
        if len(a.paths) != 2:
            ap.error("--screenshot takes RUN_DIR OUT.png")
        run_dir, png = Path(a.paths[0]), Path(a.paths[1])
        if not (run_dir / LOG_NAME).is_file():
            report("error", f"{run_dir} is not a run folder (it holds no {LOG_NAME})")
            return 2
        try:
            print(screenshot(render_run(run_dir), png, a.width, a.height))
        except PageError as e:
            report("error", str(e))
            return 1
        return 0
    if not a.paths:                       # plain `python orchestrator.py page`: every run under ./runs and its index
        a.paths, a.index = ["runs"], True
    paths = [Path(p) for p in a.paths]
    for p in paths:
        if (p / LOG_NAME).is_file():
            print(render_run(p))
            if a.index:
                print(render_index(p.parent))
        elif a.index and p.is_dir():
            for d in find_runs(p):
                render_run(d)
            print(render_index(p))
        else:
            report("error", f"{p} holds no {LOG_NAME} (pass --index for a folder of runs)")
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

