"""The stack parses and validates config.json once on its way to the ConfigMap: the settings
hand the parsed model to ConfigMapFiles instead of letting it parse the rendering again."""

from __future__ import annotations

import pytest

from components.settings import parse_settings
from tests.components.test_settings import dev_with
from tests.config_validations import count_validations


@pytest.mark.parametrize("helper_image", [None, "busybox:1.37.0"])
def test_the_stack_validates_config_json_once(
    monkeypatch: pytest.MonkeyPatch, helper_image: str | None
) -> None:
    validations = count_validations(monkeypatch)
    settings = parse_settings(dev_with(helperImage=helper_image))
    assert len(validations) == 1
    assert settings.deployment.config_files.bundle.config.cmd_timeout_seconds == 120
