"""The immutable description of one request, as every workload source produces it.

Part of :mod:`simkit.core`: plain attrs, no SimPy.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen


@frozen(slots=True)
class Request:
    """One inference request.

    Attributes:
        rid: 0-based id: the index among a trace's non-blank lines, or the generation index.
        arrived_at: arrival time in seconds after the earliest arrival (time zero).
        input_length: prompt tokens (ISL), >= 1.
        output_length: output tokens to generate (OSL), >= 0.
        hash_ids: prompt identity, one id per ``hash_block_size`` tokens; equal ids mean equal
            blocks and an id implies its whole prefix (Mooncake semantics). ``None``: a unique
            prompt that shares nothing.
        hash_block_size: tokens per entry of ``hash_ids``.
        session: the session (conversation, agent run) it belongs to, or None. In closed-loop
            replay a session holds one slot from its first dispatch to its last completion.
        deps: ids of the requests it waits for; it is released ``delay_s`` after the last of
            them ends (a turn after its predecessor, an agent step after its tools). A request
            without deps is released at ``arrived_at``.
        delay_s: think or tool time after the dependencies end (seconds).
        priority: weight of the request (> 0, higher is more important; 1 by default): the
            router queue's ``wspt`` policy serves the least expected work per unit of priority
            first.
    """

    rid: int
    arrived_at: float
    input_length: int
    output_length: int
    hash_ids: Optional[tuple[int, ...]] = None
    hash_block_size: int = 512
    session: Optional[int] = None
    deps: tuple[int, ...] = ()
    delay_s: float = 0.0
    priority: float = 1.0

    def block_keys(self, block_size: int, limit: Optional[int] = None) -> list[int]:
        """Identity keys of the prompt's *full* engine blocks of ``block_size`` tokens (the
        first ``limit`` of them, when given).

        The key of engine block i (tokens ``[i*bs, (i+1)*bs)``) names the trace block that
        holds its last token and the end offset inside it; since trace ids are chained, equal
        keys mean equal token prefixes. A prompt without ``hash_ids`` shares nothing: no keys.
        """
        ids = self.hash_ids
        if ids is None:
            return []
        tbs = self.hash_block_size
        # blocks past what the ids cover (an unhashed partial tail) have no identity
        n_full = min(self.input_length, len(ids) * tbs) // block_size
        if limit is not None and limit < n_full:
            n_full = max(limit, 0)
        stride = tbs + 1
        if tbs % block_size == 0:  # the common case: whole engine blocks per trace block
            offsets = range(block_size, tbs + 1, block_size)
            per_id = tbs // block_size
            keys = [h * stride + off for h in ids[:-(-n_full // per_id)] for off in offsets]
            del keys[n_full:]
            return keys
        keys = []
        for i in range(1, n_full + 1):
            end = i * block_size
            tb = (end - 1) // tbs
            keys.append(ids[tb] * stride + (end - tb * tbs))
        return keys
