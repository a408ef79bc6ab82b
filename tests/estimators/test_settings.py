"""Every estimator's constructor settings refuse invalid values (inf, NaN, negative, bool,
wrong type) with a TypeError/ValueError naming the argument; one test over the registry,
so that a new estimator or setting is covered (or makes the table below grow)."""

import inspect
import math

import pytest
import torch

from hardgrad.estimators import ESTIMATORS

INF, NAN = math.inf, math.nan

#: Invalid values per setting name. A constructor argument missing here fails
#: test_every_setting_has_invalid_values_listed.
INVALID = {
    "tau": [0.0, -1.0, INF, -INF, NAN, True, "1", None, 1e-320],
    "k": [0, -1, 1.5, True, "3", None, INF, NAN],
    "gap": [0.0, -1.0, INF, NAN, True, "1", None],
    "scale": [INF, -INF, NAN, True, "1", None, 1e300],
    "decay": [0.0, 1.0, -0.5, 1.5, INF, NAN, True, "0.9", None],
    "baseline": ["nope", 1, True, "EMA"],
    "max_configurations": [0, -1, 2.0, True, INF, "10", None],
    "control_variate": [1, "net", torch.zeros(2)],
    "use_objective": [1, "yes", None, 0.0],
}


#: Invalid values for one estimator only: REBAR and RELAX keep tau and scale as float32
#: parameters (a pathwise tau of 1e300 is fine in float64).
EXTRA = {
    ("rebar", "tau"): [1e300, 1e-40],
    ("relax", "tau"): [1e300, 1e-40],
}


def _settings(cls):
    parameters = inspect.signature(cls.__init__).parameters.values()
    return [
        p.name
        for p in parameters
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


CASES = [
    (name, setting, value)
    for name, cls in ESTIMATORS.items()
    for setting in _settings(cls)
    for value in [*INVALID.get(setting, []), *EXTRA.get((name, setting), [])]
]


@pytest.mark.parametrize("name", ESTIMATORS.names())
def test_every_setting_has_invalid_values_listed(name):
    cls = ESTIMATORS.get(name, "estimator")
    missing = [s for s in _settings(cls) if s not in INVALID]
    assert not missing, f"add invalid values for {cls.__name__}'s settings {missing}"
    cls()  # the defaults are valid


@pytest.mark.parametrize(("name", "setting", "value"), CASES, ids=repr)
def test_invalid_settings_are_refused_naming_the_argument(name, setting, value):
    cls = ESTIMATORS.get(name, "estimator")
    kwargs = {setting: value}
    if name == "relax" and setting == "use_objective":
        kwargs["control_variate"] = torch.nn.Identity()
    with pytest.raises((TypeError, ValueError), match=f"`{setting}`"):
        cls(**kwargs)
