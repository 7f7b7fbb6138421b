"""Spec loading: the shipped spec loads; every bad spec names the file and the field."""
import textwrap

import pytest

from kernloop.spec import SpecError, load_spec

GOOD = textwrap.dedent("""
    name: t
    entry: matmul
    baseline: base.py
    inputs:
      - {name: a, shape: [M, K]}
      - {name: b, shape: [K, N]}
    output: {shape: [M, N]}
    reference: "a @ b"
    tolerance: {rel_l2: 0.01}
    shapes: [{M: 64, N: 64, K: 64}]
    cost: {flops: "2*M*N*K", bytes: "2*(M*K+K*N+M*N)"}
    search_space: {BLOCK_M: [32, 64]}
""")


def write(tmp_path, text, baseline=True):
    if baseline:
        (tmp_path / "base.py").write_text("CONFIG = dict(BLOCK_M=32)\n")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_shipped_matmul_spec_loads():
    s = load_spec("specs/matmul.yaml")
    assert s.entry == "matmul" and s.dtype == "bfloat16"
    assert s.shapes[0] == {"M": 4096, "N": 4096, "K": 4096}
    # odd shapes that are not multiples of any tile are checked too
    assert any(all(v % 16 for v in sh.values()) for sh in s.shapes[1:])
    assert s.check_dtype == "float16"   # interpreter tl.dot is wrong for bf16
    flops, nbytes = s.cost_of(s.shapes[0])
    assert flops == 2 * 4096**3 and nbytes == 2 * 3 * 4096**2


def test_good_spec_defaults(tmp_path):
    s = load_spec(write(tmp_path, GOOD))
    assert s.loop["min_gain"] == 0.02 and s.loop["research_after"] == 3
    assert s.check_shapes == s.shapes and s.tolerance == 0.01


@pytest.mark.parametrize("old,new,field", [
    ("entry: matmul", "entry: 3bad", "entry"),
    ("baseline: base.py", "baseline: missing.py", "baseline"),
    ("tolerance: {rel_l2: 0.01}", "tolerance: 2", "tolerance"),
    ("tolerance: {rel_l2: 0.01}", "", "tolerance"),
    ("shapes: [{M: 64, N: 64, K: 64}]", "shapes: [{M: 64, N: 64}]", "shapes[0]"),
    ("shapes: [{M: 64, N: 64, K: 64}]", "shapes: [{M: -1, N: 64, K: 64}]", "shapes[0].M"),
    ('reference: "a @ b"', 'reference: "a @@ b"', "reference"),
    ('flops: "2*M*N*K"', 'flops: "2*M*Q"', "cost.flops"),
    ("name: t", "name: t\ntolerence: 0.1", "tolerence"),
    ("{name: b, shape: [K, N]}", "{name: a, shape: [K, N]}", "inputs"),
    ("search_space: {BLOCK_M: [32, 64]}", "search_space: {BLOCK_M: []}", "search_space.BLOCK_M"),
    ("name: t", "name: t\ndtype: int3", "dtype"),
    ("{name: a, shape: [M, K]}", "{name: a, shape: [M, K], stress_scale: 0}", "inputs[0].stress_scale"),
    ("{name: a, shape: [M, K]}", "{name: a, shape: [M, K], stress_scale: big}", "inputs[0].stress_scale"),
    ("{name: a, shape: [M, K]}", "{name: a, shape: [M, K], dtype: int64, dist: randint, high: 9, stress_scale: 2}",
     "inputs[0].stress_scale"),
])
def test_bad_spec_names_file_and_field(tmp_path, old, new, field):
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.field == field
    assert str(p) in str(e.value) and f"'{field}'" in str(e.value)


def test_stress_scale_reaches_the_checker(tmp_path):
    s = load_spec(write(tmp_path, GOOD.replace("{name: a, shape: [M, K]}", "{name: a, shape: [M, K], stress_scale: 8}")))
    ins = s.to_checker()["inputs"]
    assert ins[0]["stress_scale"] == 8.0 and "stress_scale" not in ins[1]


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "nope.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.field == "(yaml)"


def test_duplicate_key_is_an_error(tmp_path):
    p = write(tmp_path, GOOD + "name: again\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.field == "(yaml)" and "duplicate key 'name'" in str(e.value)
