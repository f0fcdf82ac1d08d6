"""tilepy.validation: is another backend's output right? `validate(output, op, inputs,
**config)` checks it against a sound bound derived from the backend's numerics (zero false
alarms) and a statistical tier that tells accumulation models apart (docs/validate.md).
Front-end layer: numpy and precision/ only; matplotlib lazily for `Report.plot`.
"""

from tilepy.validation.api import load_case, validate
from tilepy.validation.models import ACCUMULATE, Numerics
from tilepy.validation.ops import OPS
from tilepy.validation.report import Report

__all__ = ["ACCUMULATE", "Numerics", "OPS", "Report", "load_case", "validate"]
