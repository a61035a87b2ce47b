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
        arrived_at: arrival time in seconds after the earliest arrival (time zero), at most
            :data:`~simkit.core.units.MAX_SIM_TIME_S`. A request with ``deps`` is released when
            they end, whatever this says; loaders set it to the earliest that can be.
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
            # only the offsets and ids the prompt reaches: a huge trace block (block_size 10**12)
            # must not build 10**12 / block_size keys for a short prompt
            offsets = range(block_size, min(tbs, n_full * block_size) + 1, block_size)
            keys = [h * stride + off for h in ids[: -(-n_full // len(offsets))] for off in offsets] \
                if n_full else []
            del keys[n_full:]
            return keys
        keys = []
        for i in range(1, n_full + 1):
            end = i * block_size
            tb = (end - 1) // tbs
            keys.append(ids[tb] * stride + (end - tb * tbs))
        return keys


def check_requests(requests) -> None:
    """Check requests built in Python (``simkit.run(requests=...)``) as the trace loaders check
    their lines: ids 0..N-1 each once; lengths integers (``input_length`` >= 1,
    ``output_length`` >= 0, both at most 2^31); ``arrived_at``, ``delay_s`` finite, >= 0 and
    at most :data:`~simkit.core.units.MAX_SIM_TIME_S`; ``priority`` finite and > 0;
    ``hash_ids`` None or integers in [0, 2^63); ``hash_block_size`` >= 1; ``deps`` ids of
    other requests, without a cycle, whose delays along any chain keep a release within
    :data:`~simkit.core.units.MAX_SIM_TIME_S` of time zero (as trace lines).

    Raises:
        ValueError: ``requests[i] (rid R): what was found; what was expected``, the first problem.
    """
    from numbers import Integral, Real

    from simkit.core.units import MAX_SIM_TIME_S, MAX_SIM_TIME_TEXT

    requests = list(requests)
    n = len(requests)

    def bad(i, r, message):
        rid = getattr(r, "rid", None)
        return ValueError(f"requests[{i}] (rid {rid!r}): {message}")

    def integer(value, low, high):
        return isinstance(value, Integral) and not isinstance(value, bool) and low <= value <= high

    def seconds(value):
        return isinstance(value, Real) and not isinstance(value, bool) and 0 <= value <= MAX_SIM_TIME_S

    seen = bytearray(n)
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise bad(i, r, f"is a {type(r).__name__}; expected a simkit.request.Request")
        if not integer(r.rid, 0, n - 1) or seen[r.rid]:
            raise bad(i, r, f"ids must be 0..{n - 1}, each once")
        seen[r.rid] = 1
        if not integer(r.input_length, 1, 1 << 31):
            raise bad(i, r, f"input_length is {r.input_length!r}; expected an integer from 1 to {1 << 31}")
        if not integer(r.output_length, 0, 1 << 31):
            raise bad(i, r, f"output_length is {r.output_length!r}; expected an integer from 0 to {1 << 31}")
        for name in ("arrived_at", "delay_s"):
            if not seconds(getattr(r, name)):  # NaN fails every comparison
                raise bad(i, r, f"{name} is {getattr(r, name)!r}; expected seconds from 0 to {MAX_SIM_TIME_TEXT}")
        if not (isinstance(r.priority, Real) and not isinstance(r.priority, bool) and 0 < r.priority <= 1e15):
            raise bad(i, r, f"priority is {r.priority!r}; expected a number > 0")
        if not integer(r.hash_block_size, 1, 1 << 31):
            raise bad(i, r, f"hash_block_size is {r.hash_block_size!r}; expected an integer from 1 to {1 << 31}")
        if r.hash_ids is not None and not (isinstance(r.hash_ids, (tuple, list))
                                           and all(integer(h, 0, (1 << 63) - 1) for h in r.hash_ids)):
            raise bad(i, r, "hash_ids must be None or a tuple of integers in [0, 2^63)")
        if not isinstance(r.deps, (tuple, list)) or not all(integer(d, 0, n - 1) and d != r.rid for d in r.deps):
            raise bad(i, r, f"deps is {r.deps!r}; expected a tuple of the ids of other requests (0..{n - 1})")
    # no cycle: every request can be released once what it waits for has ended (Kahn's order)
    by_rid = {r.rid: r for r in requests}
    waiting = {r.rid: len(set(r.deps)) for r in requests}
    dependents: dict = {}
    for r in requests:
        for d in set(r.deps):
            dependents.setdefault(d, []).append(r.rid)
    ready = [rid for rid, k in waiting.items() if k == 0]
    earliest = {}  # rid -> the earliest it can be released: its arrival, or what it waits for plus its delay
    done = 0
    while ready:
        rid = ready.pop()
        done += 1
        r = by_rid[rid]
        at = max(earliest[d] for d in r.deps) + r.delay_s if r.deps else r.arrived_at
        if not at <= MAX_SIM_TIME_S:
            raise bad(requests.index(r), r, f"the delays along the requests it waits for put it at least {at:.4g} s "
                                            f"after time zero; expected at most {MAX_SIM_TIME_TEXT}")
        earliest[rid] = at
        for d in dependents.get(rid, ()):
            waiting[d] -= 1
            if waiting[d] == 0:
                ready.append(d)
    if done < n:
        rid = min(rid for rid, k in waiting.items() if k)
        i = requests.index(by_rid[rid])
        raise bad(i, by_rid[rid], "its deps form a cycle (it waits, through others, for itself); it could "
                                  "never be released")
