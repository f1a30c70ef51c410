"""A trajectory row is judged only where transformers' own run is nearer float64 than the cap: past
it no limit under 1 tells a kernel from the fixture's own drift (the row reports, `info`)."""

import math

from ligerbench.converge import tolerance as tol
from ligerbench.suites.converge import _unjudged, _unjudged_note


def test_a_yardstick_at_or_past_the_cap_is_reported_not_judged():
    assert _unjudged(tol.MAX_LIMIT) == "info"
    assert _unjudged(2.83) == "info"  # a bf16 GPU fixture's eval top-k log-probs (H200)
    assert _unjudged(math.nan) == "info"
    assert "not judged" in _unjudged_note(1.17)


def test_a_yardstick_under_the_cap_is_judged():
    for yardstick in (0.0, 1e-6, 0.0665, 0.99):
        assert _unjudged(yardstick) is None
        assert _unjudged_note(yardstick) == ""
