"""The built-in tuner: stays in the space, never repeats, deterministic for a seed."""
from pathlib import Path

from contract import check, read_config
from proposer import ProposalContext
from spec import load_spec
from tuner import Tuner, replace_config

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

    from tuner import latin_hypercube
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
