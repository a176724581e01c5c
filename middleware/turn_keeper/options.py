"""The TurnKeeper's options: one value, checked once, handed to each of its parts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from resilient_agent import OptionChecker

__all__ = ["TurnKeeperOptions"]


@dataclass(frozen=True)
class TurnKeeperOptions:
    """How the TurnKeeper keeps the caller's words (see :class:`~.keeper.TurnKeeper`).

    Build it with :meth:`checked`, which refuses a bad value with the option and the fix.
    """

    merge: bool = True
    recover_withheld_audio: bool = True
    max_fragments: int = 8
    max_age_s: float = 60.0
    keep_audio_s: float = 20.0
    recovery_timeout_s: float = 2.0
    keep_text_input: bool = True
    merge_format: str = "{fragments} {turn}"

    @classmethod
    def checked(cls, owner: str, **given: Any) -> TurnKeeperOptions:
        """The options ``given`` (the others at their defaults), each checked.

        Raises:
            OptionError: Naming ``owner``, the option, the value and the fix.
        """
        values = {**dataclasses.asdict(cls()), **given}
        check = OptionChecker(owner)
        return cls(
            merge_format=check.format_string(
                "merge_format",
                values["merge_format"],
                {"fragments": "my account number is", "turn": "four two seven"},
                required=("fragments",),
                example="{fragments} {turn}",
            ),
            merge=check.flag("merge", values["merge"]),
            recover_withheld_audio=check.flag(
                "recover_withheld_audio", values["recover_withheld_audio"]
            ),
            max_fragments=check.count("max_fragments", values["max_fragments"], ge=1, le=100),
            max_age_s=check.number("max_age_s", values["max_age_s"], ge=1.0, le=3600.0),
            keep_audio_s=check.number("keep_audio_s", values["keep_audio_s"], ge=2.0, le=300.0),
            recovery_timeout_s=check.number(
                "recovery_timeout_s", values["recovery_timeout_s"], ge=0.1, le=30.0
            ),
            keep_text_input=check.flag("keep_text_input", values["keep_text_input"]),
        )

    def changed(self, owner: str, **changes: Any) -> TurnKeeperOptions:
        """These options with ``changes``, checked again."""
        return self.checked(owner, **{**dataclasses.asdict(self), **changes})

    def merged_text(self, fragments: str, turn: str) -> str:
        """Undelivered words and the turn they join as one user message, by ``merge_format``."""
        return self.merge_format.format(fragments=fragments, turn=turn).strip()
