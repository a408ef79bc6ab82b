"""Checkpoints that know what their state means.

A stateful module's state is only meaningful under the settings it was made with: a
learned step size belongs to one integer grid, a moving average to one decay, a step count
to one temperature schedule. :class:`SettingsInState` saves those settings with the
``state_dict`` and ``load_state_dict`` refuses a checkpoint made under other settings,
naming the module, the setting and both values, instead of loading numbers that mean
something else (whatever ``strict`` is, as PyTorch refuses a tensor of the wrong shape).

The settings travel in the state dict's metadata (``state_dict._metadata``, where PyTorch
keeps each module's version), not as entries: the state dict stays a mapping of names to
tensors, so code that averages, moves or compares checkpoints entry by entry keeps
working. ``torch.save``/``torch.load`` (also with ``weights_only=True``) keep the metadata;
a checkpoint without it (saved before the settings were stored, rebuilt as a plain
``dict``, or read from a tensors-only format) is not compared, and loads as before.
For a deliberate transfer across settings, load a plain ``dict(state_dict)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The key of the settings in a module's entry of ``state_dict._metadata``.
SETTINGS_KEY = "hardgrad_settings"


def setting_mismatches(
    stored: Mapping[str, Any], expected: Mapping[str, Any], prefix: str, owner: str
) -> list[str]:
    """One message per setting that ``stored`` (a checkpoint's) has with another value
    than ``expected``; settings the checkpoint lacks are not compared."""
    where = prefix[:-1] or "the checkpoint's root module"
    return [
        f"{where}: setting {key!r}: the checkpoint was saved with {key}={stored[key]!r}, "
        f"this {owner} has {key}={value!r}"
        for key, value in expected.items()
        if key in stored and stored[key] != value
    ]


class SettingsInState:
    """Mixin for ``nn.Module`` subclasses (list it before ``nn.Module``): the settings that
    give the state its meaning are saved with the ``state_dict`` and checked on load.

    Subclasses implement :meth:`_checkpoint_settings` (plain values: numbers, strings,
    booleans, None) and may extend :meth:`_checkpoint_problems` (checks of their own
    state, e.g. a tensor's layout) and :meth:`_prepare_to_load`.
    """

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The settings under which this module's state means what it means."""
        raise NotImplementedError

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)  # type: ignore[misc]
        metadata = getattr(destination, "_metadata", None)
        if metadata is not None:
            metadata.setdefault(prefix[:-1], {})[SETTINGS_KEY] = self._checkpoint_settings()

    def _checkpoint_problems(
        self, state_dict: Mapping[str, Any], prefix: str, local_metadata: Mapping[str, Any]
    ) -> list[str]:
        """Why ``state_dict`` cannot load into this module (empty if it can)."""
        stored = local_metadata.get(SETTINGS_KEY)
        if not isinstance(stored, Mapping):
            return []
        return setting_mismatches(stored, self._checkpoint_settings(), prefix, type(self).__name__)

    def _prepare_to_load(self, state_dict: dict[str, Any], prefix: str) -> None:
        """Called once the checkpoint is accepted, before its tensors are copied in; may
        replace entries of ``state_dict`` (``load_state_dict``'s own copy of the
        checkpoint, so the caller's mapping is untouched), e.g. reshape an entry saved in
        an older layout."""

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        problems = self._checkpoint_problems(state_dict, prefix, local_metadata)
        if problems:
            error_msgs.extend(problems)
            return
        self._prepare_to_load(state_dict, prefix)
        super()._load_from_state_dict(  # type: ignore[misc]
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
