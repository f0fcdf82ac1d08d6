"""`tilepy.testing`: assertions for pytest on other backends' outputs.

`assert_matches(output, op, inputs, **config)` runs `tilepy.validate` and raises a
`MismatchError` (an AssertionError) carrying the report: which elements, by how much,
against which bound, and which accumulation model fits better.
"""

from __future__ import annotations

from tilepy.boundary import api_boundary
from tilepy.errors import MismatchError


@api_boundary
def assert_matches(output, op, inputs, statistical: bool = True, **config):
    """Fail unless `output` passes the sound tier (and the statistical tier, unless
    statistical=False). Returns the report when it passes."""
    from tilepy.validation import validate
    from tilepy.validation.errors import caller_loc

    report = validate(output, op, inputs, **config)
    ok = report.sound_passed and (report.stats.passed or not statistical)
    if ok:
        return report
    hint = "the output is consistent with " + report.stats.summary.split("consistent with ")[-1] \
        if report.stats.summary else "see the worst elements above"
    if report.stats.fits and report.stats.chosen:
        better = [f.name for f in report.stats.fits if f.consistent]
        if better and report.stats.chosen not in better:
            hint = (f"the output fits {', '.join(better)}, not the configured "
                    f"{report.stats.chosen}: pass accumulate=/compute= to match the backend")
    raise MismatchError(f"{report.op} output does not match\n{report}", caller_loc(), hint)
