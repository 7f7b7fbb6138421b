"""The built-in tuner: stays in the space, never repeats, deterministic for a seed."""
import itertools
from pathlib import Path

from kernloop.contract import check, read_config
from kernloop.propose.proposer import ProposalContext
from kernloop.spec import load_spec
from kernloop.propose.tuner import Tuner, replace_config

SPEC = load_spec("specs/matmul.yaml")
BASE = Path("specs/matmul_naive.py").read_text()


def drive(seed, steps, promote_every=3):
    """Run the tuner as the loop would; promote every k-th proposal."""
    t = Tuner(SPEC.search_space, seed=seed)
    champ, out, promoted = BASE, [], False
    for i in range(1, steps + 1):
        p = t.propose(ProposalContext(spec=SPEC, iteration=i, champion_code=champ, champion_id="x",
                                      champion_profile={}, last_promoted=promoted))
        if p.code is None:
            break
        out.append(p)
        promoted = i % promote_every == 0
        if promoted:
            champ = p.code
    return t, out


def test_no_repeats_and_stays_in_space():
    t, props = drive(seed=1, steps=120)
    cfgs = [read_config(p.code) for p in props]
    keys = [tuple(sorted(c.items())) for c in cfgs]
    assert len(keys) == len(set(keys)) == 120
    assert tuple(sorted(read_config(BASE).items())) not in keys   # the baseline is never re-proposed
    for c in cfgs:
        for k, v in c.items():
            assert v in SPEC.search_space[k], (k, v)


def test_candidates_pass_contract_and_explain_themselves():
    _, props = drive(seed=2, steps=10)
    for p in props:
        assert check(p.code, SPEC) == []
        assert p.note and "\n" not in p.note and "->" in p.note
        assert p.code.startswith("# NOTE: tuner: ")
        # only CONFIG changed
        strip = lambda s: [ln for ln in s.splitlines() if not ln.startswith(("CONFIG", "# NOTE"))]
        assert strip(p.code) == strip(BASE)


def test_seed_deterministic_and_seed_sensitive():
    a = [p.code for p in drive(seed=7, steps=25)[1]]
    b = [p.code for p in drive(seed=7, steps=25)[1]]
    c = [p.code for p in drive(seed=8, steps=25)[1]]
    assert a == b and a != c


def test_exhausts_a_tiny_space():
    t = Tuner({"BLOCK_M": [32, 64], "num_warps": [4]}, seed=0)
    ctx = lambda code: ProposalContext(spec=SPEC, iteration=1, champion_code=code, champion_id="x",
                                       champion_profile={})
    p1 = t.propose(ctx(BASE))
    assert read_config(p1.code)["BLOCK_M"] == 64
    p2 = t.propose(ctx(BASE))
    assert p2.code is None and t.exhausted and "exhausted" in p2.error


def test_replace_config_roundtrip():
    new = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    code = replace_config(BASE, new)
    assert read_config(code) == new and len(code.splitlines()) == len(BASE.splitlines())


def test_initial_samples_spread_over_every_parameter():
    import random

    from kernloop.propose.tuner import latin_hypercube
    for seed in range(20):
        samples = latin_hypercube(SPEC.search_space, 4, random.Random(seed))
        assert len(samples) == 4
        for p, vals in {**SPEC.search_space, "wide": list(range(10))}.items():
            if p == "wide":
                samples = latin_hypercube({"wide": vals}, 4, random.Random(seed))
            idx = sorted(vals.index(s[p]) for s in samples)
            if len(vals) <= 4:     # every value tried
                assert set(idx) == set(range(len(vals))), (p, idx)
            else:                  # one sample per quarter of the list: covered end to end
                q = -(-len(vals) // 4)
                assert len(set(idx)) == 4 and idx[0] < q and idx[-1] >= len(vals) - q, (p, idx)


def test_first_proposals_are_the_initial_samples_then_local_moves():
    t, props = drive(seed=3, steps=8, promote_every=100)
    notes = [p.note for p in props]
    assert [("initial spread sample" in n) for n in notes[:4]] == [True] * 4
    assert "1/4" in notes[0] and "4/4" in notes[3]
    assert not any("initial spread sample" in n for n in notes[4:])
    # A resumed tuner (same seed, history marked tried) does not re-propose them.
    t2 = Tuner(SPEC.search_space, seed=3)
    for p in props:
        t2.mark_tried(read_config(p.code))
    cfg, note = t2.next_config(read_config(BASE), False)
    assert "initial spread sample" not in note and tuple(sorted(cfg.items())) not in {
        tuple(sorted(read_config(p.code).items())) for p in props}


# ---------------------------------------------------------------- learning from "out of resource"

H200_SMEM = 232448   # bytes per block on an H200, as Triton reports it
OOR = "OutOfResources: out of resource: shared memory, Required: {}, Hardware limit: 232448."


def smem(c):
    """Shared memory of a pipelined matmul tile: stages copies of the A and B tiles, bf16."""
    return c["num_stages"] * (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * 2


def outcome(c, champ_ms):
    """(verdict, reason, ms) as the loop would see them: the smem oracle, then the perf model."""
    from kernloop.backends import perfmodel
    if smem(c) > H200_SMEM:
        return "failed", "candidate raised on shape 4096x4096x4096: " + OOR.format(smem(c)), None
    ms = perfmodel.matmul_time({"M": 4096, "N": 4096, "K": 4096}, c)
    return ("promoted" if ms < champ_ms * 0.98 else "rejected"), "modeled", ms


def simulate(seed, steps, learn, tuner=None, history=()):
    """Drive the tuner like the loop: evaluate each proposal, promote a 2% win, observe the
    outcome when `learn`. Returns (tuner, [(config, verdict, note)])."""
    from kernloop.backends import perfmodel
    t = tuner or Tuner(SPEC.search_space, seed=seed)
    champ = BASE
    champ_ms = perfmodel.matmul_time({"M": 4096, "N": 4096, "K": 4096}, read_config(BASE))
    promoted, out = False, []
    for i in range(1, steps + 1):
        p = t.propose(ProposalContext(spec=SPEC, iteration=i, champion_code=champ, champion_id="x",
                                      champion_profile={}, last_promoted=promoted))
        if p.code is None:
            break
        c = read_config(p.code)
        verdict, reason, ms = outcome(c, champ_ms)
        promoted = verdict == "promoted"
        if promoted:
            champ, champ_ms = p.code, ms
        if learn:
            t.observe(c, verdict, reason)
        out.append((c, verdict, p.note))
    return t, out


def test_dominance_rule():
    from kernloop.propose.tuner import needs_at_least, resource_params
    assert resource_params(SPEC.search_space) == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"]
    t = Tuner(SPEC.search_space, seed=0)
    # The H200 run: it0006 ran out; it0016 (bigger in stages only, other warps/GROUP_M) compiled
    # for 114 s before failing the same way. It is skipped now.
    it6 = dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, GROUP_M=16, num_warps=8, num_stages=4)
    it16 = dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, GROUP_M=4, num_warps=4, num_stages=5)
    assert t.dominated(it16) is None
    t.observe(it6, "rejected", "timing noise")           # not a resource failure: nothing learned
    t.observe(it6, "failed", "shape mismatch")
    assert t.dominated(it16) is None and t.infeasible == []
    t.observe(it6, "failed", OOR.format(262144).upper())  # case-insensitive
    assert t.dominated(it16) and t.dominated(it6)         # bigger-or-equal, and equal
    assert t.dominated({**it6, "num_warps": 4, "GROUP_M": 1})   # warps/GROUP_M play no part
    for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"):   # smaller in any one: kept
        assert t.dominated({**it16, p: it6[p] // 2}) is None, p
    # Parameters outside the resource set, or absent from one side, are ignored.
    assert needs_at_least({"BLOCK_M": 256, "x": 1}, {"BLOCK_M": 256, "x": 9}, ["BLOCK_M"])
    assert not needs_at_least({"num_warps": 8}, {"num_warps": 4}, ["BLOCK_M"])   # nothing shared
    # A smaller failure replaces the bigger ones it covers; a promoted config is never infeasible.
    t.observe(dict(it6, BLOCK_M=128), "failed", OOR.format(196608))
    assert t.infeasible == [dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=4)]
    t.observe(dict(it6, BLOCK_M=32, BLOCK_N=32), "promoted", "out of resource (sic)")
    assert len(t.infeasible) == 1


def test_observing_failures_wastes_fewer_compiles():
    """Matmul space, H200 shared-memory oracle: fewer proposals run out when the tuner observes,
    on every seed, and none needs at least the memory of a config that already ran out."""
    skipped_note = False
    for seed in range(6):
        _, blind = simulate(seed, 30, learn=False)
        _, learned = simulate(seed, 30, learn=True)
        fails = lambda run: sum(v == "failed" for _, v, _ in run)
        assert fails(learned) < fails(blind), (seed, fails(learned), fails(blind))
        failed = []
        for c, verdict, note in learned:
            assert not any(all(c[p] >= f[p] for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"))
                           for f in failed), (seed, c)
            assert "\n" not in note
            skipped_note |= "skipped" in note and "ran out" in note
            if verdict == "failed":
                failed.append(c)
    assert skipped_note


def test_resumed_tuner_keeps_what_it_learned():
    """--resume rebuilds the tuner from run.jsonl through State.apply (mark_tried + observe):
    the fresh tuner proposes nothing that needs the memory of a config that ran out."""
    from kernloop.loop.state import State
    _, first = simulate(4, 12, learn=True)
    failed = [c for c, v, _ in first if v == "failed"]
    assert failed
    events = [{"event": "iteration", "iteration": i, "candidate_config": c,
               "candidate_id": f"it{i:04d}", "candidate_file": f"candidates/it{i:04d}.py",
               "decision": {"verdict": v, "promoted": v == "promoted",
                            "reason": OOR.format(smem(c)) if v == "failed" else "modeled"}}
              for i, (c, v, _) in enumerate(first, 1)]
    t2 = Tuner(SPEC.search_space, seed=4 + len(events))
    State().replay(events, t2)
    assert len(t2.infeasible) >= 1
    _, rest = simulate(4, 30, learn=True, tuner=t2)
    for c, _, _ in rest:
        assert not any(all(c[p] >= f[p] for p in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"))
                       for f in failed), c
        assert c not in [fc for fc, _, _ in first]


# ---------------------------------------------------------------- shared memory, estimated up front
H200_RUNS = [Path("benchmarks/results/runs/20261129-133338-matmul/run.jsonl"),
             Path("benchmarks/results/runs/20261129-135253-matmul_bias_gelu/run.jsonl")]


def _h200_outcomes_of(path):
    """(config, verdict, reason) of every evaluated candidate of a measured H200 tuner run."""
    import json
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert events[0]["backend"] == "local" and events[0]["synthetic"] is False
    return [(e["candidate_config"], e["decision"]["verdict"], e["decision"]["reason"])
            for e in events if e["event"] == "iteration" and e.get("candidate_config")]


def _h200_outcomes():
    return [o for path in H200_RUNS for o in _h200_outcomes_of(path)]


def test_tile_estimate_matches_what_triton_reported_on_the_h200():
    import re
    from kernloop.propose.tuner import calibrate, fits, smem_limit, tile_smem
    ran = failed = 0
    for cfg, verdict, reason in _h200_outcomes():
        m = re.search(r"Required: (\d+), Hardware limit: (\d+)", reason or "")
        if m:   # Triton's own count: exactly num_stages buffers of the A and B tiles (bf16)
            failed += 1
            assert tile_smem(cfg, 2, spare_stages=0) == int(m.group(1)), cfg
            assert int(m.group(2)) == smem_limit("NVIDIA H200")
            assert calibrate(cfg, 2, reason) == (0, 232448)
            assert not fits(cfg, 2, 232448, spare_stages=0)
        elif verdict in ("promoted", "rejected"):   # it compiled and ran: never skipped
            ran += 1
            assert fits(cfg, 2, smem_limit("NVIDIA H200"), spare_stages=1), cfg
            assert fits(cfg, 2, smem_limit("NVIDIA H200"), spare_stages=0), cfg
    assert failed >= 4 and ran >= 20


def test_replayed_h200_runs_would_have_skipped_all_but_the_calibrating_failure():
    from kernloop.propose.tuner import fits
    for path in H200_RUNS:
        t = Tuner(SPEC.search_space, seed=0)
        skipped = failed = 0
        for cfg, verdict, reason in _h200_outcomes_of(path):
            fit = fits(cfg, 2, t.smem_limit, t.spare_stages)
            if verdict == "failed" and "Required" in reason:
                failed += 1
                skipped += not fit
                t.observe(cfg, verdict, reason)
            elif verdict in ("promoted", "rejected"):
                assert fit, cfg
        assert (failed, skipped) == (6, 5), path


def test_calibration_and_table_edges():
    from kernloop.propose.tuner import calibrate, fits, smem_limit, tile_smem
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4)       # 4 x 32 KB of tiles
    text = "out of resource: shared memory, Required: {}, Hardware limit: 101376"
    assert calibrate(cfg, 2, text.format(131072 + 8192)) == (0, 101376)   # all 4 buffers (+ extra)
    assert calibrate(cfg, 2, text.format(98304)) == (1, 101376)           # 3 buffers: keep the bound
    assert calibrate(cfg, 2, text.format(40000)) == (None, 101376)        # model off for this kernel
    assert calibrate(cfg, 2, "(synthetic) out of resources: shared memory 288 KB > 227 KB") is None
    assert calibrate(cfg, 2, "out of resource: registers, Required: 300, Hardware limit: 255") is None
    assert calibrate({"BLOCK_SIZE": 4096}, 2, text.format(1)) is None      # not a matmul config
    assert tile_smem({"BLOCK_SIZE": 4096, "num_warps": 8}, 2) is None and fits({"BLOCK_SIZE": 1}, 2, 1)
    assert tile_smem(cfg, 4, spare_stages=1) == 2 * tile_smem(cfg, 2, spare_stages=1) == 196608
    assert fits(cfg, 2, 1, spare_stages=None)                             # estimate off: never skips
    assert smem_limit("NVIDIA A100-SXM4-80GB") == 166912 and smem_limit(None) == smem_limit("H200")


def test_tuner_skips_configs_that_cannot_fit_and_says_so():
    """Before any failure only configs above the lower bound are skipped; after Triton's first
    "Required/Hardware limit" failure, every proposal fits the calibrated estimate."""
    from kernloop.propose.tuner import tile_smem
    t, props = drive(seed=2, steps=60)
    cfgs = [read_config(p.code) for p in props]
    assert all(tile_smem(c, 2, 1) <= 232448 for c in cfgs)
    assert any(tile_smem(c, 2, 0) > 232448 for c in cfgs)   # the prior is a bound, not the truth
    assert any("tiles need more than the 227 KB" in p.note for p in props)
    t = Tuner(SPEC.search_space, seed=2)
    t.observe(dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4), "failed",
              OOR.format(262144))
    assert t.spare_stages == 0 and t.smem_limit == H200_SMEM
    for i in range(60):
        cfg, _ = t.next_config(read_config(BASE), False)
        t.mark_tried(cfg)
        assert tile_smem(cfg, 2, 0) <= H200_SMEM, cfg


def test_estimate_saves_compiles_against_the_h200_oracle():
    """On the smem oracle measured above (30 proposals, 10 seeds): the estimate alone never wastes
    more compiles than no estimate, and fewer in all; observing too, only the first failure (the
    one that calibrates) is wasted, where the dominance rule alone wastes several."""
    fails = lambda run: sum(v == "failed" for _, v, _ in run)   # noqa: E731
    blind = [(fails(simulate(s, 30, False, Tuner(SPEC.search_space, seed=s, estimate=False))[1]),
              fails(simulate(s, 30, False)[1])) for s in range(10)]
    assert all(est <= none for none, est in blind) and sum(e for _, e in blind) < sum(n for n, _ in blind)
    for seed in range(10):
        _, dominance = simulate(seed, 30, True, Tuner(SPEC.search_space, seed=seed, estimate=False))
        _, both = simulate(seed, 30, True)
        assert fails(both) == 1 < fails(dominance), (seed, fails(both), fails(dominance))


def test_the_model_fails_a_config_out_of_its_range_and_never_raises_anything_else():
    """GROUP_M=0 divided by zero in the model and stopped the loop; now every value it reads is
    held to its range first, and whatever remains is a ModelError (a failed iteration)."""
    import pytest

    from kernloop.backends import perfmodel
    shape, ok = {"M": 4096, "N": 4096, "K": 4096}, dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    assert perfmodel.predict_ms("matmul", shape, ok, 1e8) > 0
    for bad, why in ((dict(ok, GROUP_M=0), "GROUP_M'] = 0 is outside"), (dict(ok, BLOCK_M=-32), "is outside"),
                     (dict(ok, num_warps=3), "not a power of two"), (dict(ok, num_stages="2"), "not an integer"),
                     (dict(ok, BLOCK_K=True), "not an integer"), (dict(ok, BLOCK_N=1 << 40), "is outside"),
                     ({"BLOCK_M": 64}, "needs CONFIG keys"), (["BLOCK_M"], "not a dict")):
        for model in ("matmul", "rowwise", "gemv", "elementwise"):
            if model != "matmul" and why == "needs CONFIG keys":
                continue
            with pytest.raises(perfmodel.ModelError, match=why.replace("[", r"\[").replace("]", r"\]")):
                perfmodel.predict_ms(model, shape, bad, 1e8)


def test_a_triton_baseline_in_a_family_gets_the_template_as_a_second_lineage():
    from kernloop.loop.factories import make_proposer
    spec = load_spec(Path(__file__).resolve().parent.parent / "specs" / "softmax.yaml")
    tuner, note = make_proposer("tuner", spec, 0)
    assert "second lineage, the softmax template" in note
    base = (spec.path.parent / spec.baseline).read_text()
    ctx = lambda code, cfg=None: ProposalContext(spec=spec, iteration=1, champion_code=code,   # noqa: E731
                                                 champion_id="x", champion_profile={}, parent_code=code,
                                                 parent_config=cfg)
    first = tuner.propose(ctx(base))   # from the baseline: the template itself, once
    assert first.note.startswith("template softmax") and first.code == tuner.also.start.code
    assert check(first.code, spec) == [] and set(first.meta["config"]) == set(tuner.also.start.config)
    again = tuner.propose(ctx(base))   # the baseline's own lineage: its search space
    assert set(again.meta["config"]) == set(spec.search_space) and "template" not in again.note
    child = tuner.propose(ctx(first.code, first.meta["config"]))   # the template's lineage: its space
    assert set(child.meta["config"]) == set(tuner.also.start.config)
    assert child.meta["config"] != first.meta["config"] and read_config(child.code) == child.meta["config"]
    # --resume replays the configs: the template is not proposed twice
    replayed, _ = make_proposer("tuner", spec, 0)
    for p in (first, again, child):
        replayed.mark_tried(p.meta["config"])
    assert replayed.also_begun and not replayed.propose(ctx(base)).note.startswith("template")
    # a spec whose reference no template takes keeps one lineage
    gemv = load_spec(Path(__file__).resolve().parent.parent / "specs" / "gemv.yaml")
    assert make_proposer("tuner", gemv, 0)[0].also is None


def test_a_spent_template_lineage_goes_on_in_the_baselines_space_and_the_run_stops_when_both_are_spent():
    from kernloop.loop.factories import make_proposer
    spec = load_spec(Path(__file__).resolve().parent.parent / "specs" / "softmax.yaml")
    tuner, _ = make_proposer("tuner", spec, 0)
    base = (spec.path.parent / spec.baseline).read_text()
    ctx = lambda code, cfg=None: ProposalContext(spec=spec, iteration=1, champion_code=code,   # noqa: E731
                                                 champion_id="x", champion_profile={}, parent_code=code,
                                                 parent_config=cfg)
    first = tuner.propose(ctx(base))   # the template, then only ever its lineage as the parent
    assert first.note.startswith("template softmax")
    theirs, ours = [], []
    for _ in range(500):
        p = tuner.propose(ctx(first.code, first.meta["config"]))
        if p.code is None:
            break
        (theirs if set(p.meta["config"]) == set(first.meta["config"]) else ours).append(p)
    inside = [c for c in (dict(zip(tuner.also.space, v)) for v in itertools.product(*tuner.also.space.values()))
              if tuner.also.allowed(c)]
    assert len(theirs) == len(inside) - 1   # every config of the template's space once, the start aside
    assert ours and all(p.note.startswith("the template's space is spent; from the baseline: ") for p in ours)
    assert all(set(p.meta["config"]) == set(spec.search_space) and "def softmax" in p.code for p in ours)
    assert tuner.exhausted_all and "search space exhausted" in p.error   # then the run's stop rule ends it


def test_a_near_miss_is_judged_once_more_when_the_neighbours_are_spent_and_never_a_third_time():
    """Session 28's rmsnorm run rejected configs measured 5-15% faster than their champion (on the
    medians or on significance: one job's noise) and then sat on "search space exhausted". A
    config whose means cleared the bar is judged again once the neighbours are spent; a plain
    loss never is, and a near miss twice is not tried a third time."""
    from kernloop.propose.tuner import near_miss
    assert near_miss("rejected", {"gain": 0.07, "min_gain": 0.02}) == 0.07
    assert near_miss("rejected", {"gain": 0.01, "min_gain": 0.02}) is None   # did not clear the bar
    assert near_miss("promoted", {"gain": 0.07, "min_gain": 0.02}) is None
    assert near_miss("failed", None) is None

    def run(second_time_promotes: bool):
        t = Tuner({"X": [1, 2, 3, 4]}, seed=0, initial=0)
        champ, promoted, seen = "CONFIG = dict(X=1)\n", False, []
        for i in range(1, 12):
            p = t.propose(ProposalContext(spec=None, iteration=i, champion_code=champ, champion_id="c",
                                          champion_profile={}, last_promoted=promoted))
            if p.code is None:
                seen.append(("stop", p.error))
                break
            x = read_config(p.code)["X"]
            again = seen.count(x) == 1
            gain = {2: 0.06, 3: 0.01, 4: -0.2}[x]   # 2: a near miss; 3: under the bar; 4: slower
            promoted = x == 2 and again and second_time_promotes
            verdict = "promoted" if promoted else "rejected"
            t.mark_tried({"X": x})
            t.observe({"X": x}, verdict, "scripted", {"gain": gain, "min_gain": 0.02})
            seen.append(x)
            if promoted:
                champ = p.code
            if x == 2 and again:
                assert "judged again: 6.0% faster" in p.note
        return seen

    for promotes in (False, True):
        got = run(second_time_promotes=promotes)
        assert got[0] == 2 and got.count(2) == 2 and got.count(3) == 1 and got.count(4) == 1, got
        assert got[-1] == ("stop", "search space exhausted") and len(got) == 5, got
