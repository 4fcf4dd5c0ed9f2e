"""The stack parses and validates config.json once on its way to the ConfigMap: the settings
hand the parsed model to ConfigMapFiles instead of letting it parse the rendering again."""

from __future__ import annotations

import pytest

from components.args import ConfigMapFiles
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


def test_files_built_from_a_parsed_config_must_be_its_rendering() -> None:
    """The parsed model stands in for config_json only when config_json is what it renders:
    anything else would reach the ConfigMap unchecked."""
    files = parse_settings(dev_with()).deployment.config_files
    config = files.bundle.config
    with pytest.raises(ValueError, match="config_json is not the rendering of parsed_config"):
        ConfigMapFiles(
            '{"sharedFileSystemPath": "data"}',
            files.setup,
            files.teardown,
            files.helper_pod_yaml,
            parsed_config=config,
        )
    rebuilt = ConfigMapFiles(
        config.to_config_json(),
        files.setup,
        files.teardown,
        files.helper_pod_yaml,
        parsed_config=config,
    )
    assert rebuilt == files
    assert rebuilt.bundle.config is config
