"""Numerical parity: a faster combo must compute the same function as strict FP32.

Each pair runs generated cases under two sides and compares loss, prediction, one sampling
step and every gradient by relative norm against bounds measured by
``python -m meddpm.parity calibrate`` (about twice the worst error seen over many cases).
"""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from meddpm.parity.bounds import CALIBRATE, bound_key, load_bounds
from meddpm.parity.cases import (
    ATTENTION,
    BATCHES,
    FAST_BOUNDS_FROM,
    FAST_PAIR,
    LEVELS,
    PAIRS,
    SIDES,
    TIMESTEPS,
    Case,
    Pair,
)

pytestmark = pytest.mark.parity
BOUNDS = load_bounds()


@st.composite
def cases(draw: st.DrawFn) -> Case:
    levels = draw(st.sampled_from(LEVELS))
    sides = st.sampled_from([s for s in SIDES if s % 2 ** (levels - 1) == 0])
    return Case(
        volume=(draw(sides), draw(sides), draw(sides)),
        levels=levels,
        attention_ds=draw(st.sampled_from(ATTENTION)),
        batch=draw(st.sampled_from(BATCHES)),
        t=draw(st.integers(0, TIMESTEPS - 1)),
        seed=draw(st.integers(0, 2**16 - 1)),
    )


@st.composite
def fast_cases(draw: st.DrawFn) -> Case:
    # One model shape (the largest, with attention), so that Inductor compiles once and later
    # examples reuse its cache: with a new shape per example, five did not finish in 405 s on an
    # H200. The other pairs cover the shapes; here timestep, weights and data vary.
    return Case(
        volume=(max(SIDES),) * 3,
        levels=max(LEVELS),
        attention_ds=(2,),
        batch=max(BATCHES),
        t=draw(st.integers(0, TIMESTEPS - 1)),
        seed=draw(st.integers(0, 2**16 - 1)),
    )


def _pair_params():
    for device, pairs in PAIRS.items():
        for pair in pairs:
            yield pytest.param(pair, id=bound_key(pair), marks=[pytest.mark.gpu] if device == "cuda" else [])


def _violations(pair: Pair, errors: dict, key: str | None = None) -> list[str]:
    bounds = BOUNDS[key or bound_key(pair)]["bounds"]
    return [
        f"{kind} {error:.3g} > bound {bounds[kind]:.3g} (worst in {where})"
        for kind, (error, where) in errors.items()
        if not error <= bounds[kind]  # NaN and Inf fail too
    ]


@pytest.mark.parametrize("pair", list(_pair_params()))
@given(case=cases())
def test_pair_agrees_within_measured_bounds(pair: Pair, case: Case):
    assume(pair.covers(case))
    if bound_key(pair) not in BOUNDS:
        calibrate = f"{CALIBRATE} --device {pair.device}"
        pytest.skip(f"no measured bounds for {bound_key(pair)}; run {calibrate}")
    violations = _violations(pair, pair.errors(case))
    assert not violations, f"{pair.variant} vs {pair.reference} on {case}: " + "; ".join(violations)


@given(case=cases())
def test_a_layout_bug_is_caught(case: Case):
    # A wrong NCDHW -> NDHWC conversion that swaps depth and height must not pass as parity.
    pair = next(p for p in PAIRS["cpu"] if p.name == "channels_last~contiguous")
    errors = pair.errors(case, input_transform=lambda x: x.transpose(2, 3))
    assert _violations(pair, errors), f"swapped D and H went unnoticed on {case}: {errors}"


@pytest.mark.gpu
@settings(max_examples=5)  # the first example compiles; the profile sets no deadline
@given(case=fast_cases())
def test_fast_keeps_the_bf16_bounds(case: Case):
    violations = _violations(FAST_PAIR, FAST_PAIR.errors(case), key=FAST_BOUNDS_FROM)
    assert not violations, f"fast vs strict FP32 on {case}: " + "; ".join(violations)


def test_only_the_cpu_bf16_pairs_leave_out_a_depth_of_two():
    depth_two = Case(volume=(4, 8, 8), levels=2, attention_ds=(), batch=1, t=0, seed=0)
    deeper = Case(volume=(8, 4, 4), levels=2, attention_ds=(), batch=1, t=0, seed=0)
    left_out = {bound_key(p) for pairs in PAIRS.values() for p in pairs if not p.covers(depth_two)}
    assert left_out == {"cpu:bf16~fp32", "cpu:bf16~fp64"}
    assert all(p.covers(deeper) for pairs in PAIRS.values() for p in pairs)
