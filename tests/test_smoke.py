from __future__ import annotations

import closedloop
from closedloop import ClosedLoopError, ConfigurationError


def test_configuration_error_is_value_error_and_names_argument() -> None:
    err = ConfigurationError("dt", -1.0, "must be > 0")
    assert isinstance(err, ValueError)
    assert isinstance(err, ClosedLoopError)
    assert "dt=-1.0" in str(err)
    assert closedloop.__version__
