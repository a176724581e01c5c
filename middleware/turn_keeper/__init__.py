"""The TurnKeeper: what the caller said reaches the LLM, exactly once (one concept, one package).

:class:`TurnKeeper` (in :mod:`.keeper`) is the middleware; its options are one
:class:`TurnKeeperOptions` value (:mod:`.options`), checked once and handed to each part; the
parts work on the session's one model of pending words (``ctx.state.pending_words``):

* :mod:`.dropped_turns`: answering words no livekit turn will carry;
* :mod:`.turn_answer`: recovered words answered as the turn livekit ended without them;
* :mod:`.inference_merge`: words given to inferences that are not user turns;
* :mod:`.merging`: words merged in front of a turn;
* :mod:`.withheld_audio`: the caller's audio livekit withheld from the STT, re-transcribed;
* :mod:`.transcript_match`: comparing two transcripts of the same speech;
* :mod:`.handover`: what a leaving keeper hands the next agent's.

No part imports the keeper, and no part holds it.
"""

from __future__ import annotations

from resilient_agent._engine.pending_words import Fragment

from .keeper import TurnKeeper
from .options import TurnKeeperOptions

__all__ = ["Fragment", "TurnKeeper", "TurnKeeperOptions"]
