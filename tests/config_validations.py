"""Counts how often config.json is validated: the stack and the policy pack each parse it
once (provisioner.configuration.config's parser, the one owner), however many readers they have."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.configuration.config import ProvisionerConfig


def count_validations(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A list that grows by one each time a config.json is validated into ProvisionerConfig."""
    validations: list[object] = []
    original = ProvisionerConfig.model_validate

    def counted(cls: type[ProvisionerConfig], /, data: Any, **options: Any) -> ProvisionerConfig:
        validations.append(data)
        return original(data, **options)

    monkeypatch.setattr(ProvisionerConfig, "model_validate", classmethod(counted))
    return validations
