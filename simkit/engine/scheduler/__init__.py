"""Batch formation for one worker: which requests each forward pass takes, and the KV blocks
they hold. One scheduler per worker, chosen by its pool's ``backend``:

* ``vllm`` (:class:`VllmScheduler`, :mod:`.vllm`): continuous batching, chunked prefill, a
  token budget, ``max_num_seqs``, prefix caching and recompute preemption (vLLM v1);
* ``trtllm`` (:class:`TrtllmScheduler`, :mod:`.trtllm`): vLLM's pass under TRT-LLM's
  GUARANTEED_NO_EVICT capacity rules and batch waiting;
* ``sglang`` (:class:`SglangScheduler`, :mod:`.sglang`): extend passes before decode passes,
  the new-token ratio, retraction and the radix cache's rules.

Where a change goes:

* a rule of one engine (what a pass takes, admission, preemption, whether a request can ever
  fit): that engine's module. vLLM's pass (``VllmScheduler.schedule``, ``_admit``) is also
  TRT-LLM's and runs SGLang's admission of transferred requests, so a change there changes
  them too; TRT-LLM differs from it only by overriding ``fits_ever`` and the hooks
  ``NO_EVICT``, ``_hold_context`` and ``_admissible``, and a new TRT-LLM rule goes into
  :mod:`.trtllm` (a new hook in :mod:`.vllm` if it must act inside the pass);
* what every engine shares (a request's state :class:`Seq`, a pass :class:`Batch`, the queues,
  prefix-cache registration, freeing and preemption of a request's blocks, pass completion,
  the fast-forward of pure-decode runs, the prefill role's handoff): :mod:`.base`
  (:class:`Scheduler`);
* a new engine: a module with a subclass of :class:`Scheduler` (or of :class:`VllmScheduler`
  to reuse its pass) defining ``schedule`` and ``fits_ever``, listed in
  :data:`~simkit.engine.scheduler.factory.SCHEDULERS` (:mod:`.factory`, :func:`make_scheduler`),
  and its name in ``PoolSpec.backend`` (:mod:`simkit.spec`);
* the KV cache itself (blocks, identity keys, eviction order): :mod:`simkit.engine.kvcache`.

Part of :mod:`simkit.engine`: pure, no SimPy; the worker process calls
:meth:`Scheduler.schedule` and :meth:`Scheduler.complete`. May import :mod:`simkit.core`,
:mod:`simkit.spec` and :mod:`simkit.engine.kvcache`; must not import simpy, the cluster
processes, output or the CLI.
"""

from simkit.engine.scheduler.base import Batch, Scheduler, Seq, private_suffixes
from simkit.engine.scheduler.factory import SCHEDULERS, make_scheduler
from simkit.engine.scheduler.sglang import SglangScheduler
from simkit.engine.scheduler.trtllm import TrtllmScheduler
from simkit.engine.scheduler.vllm import VllmScheduler

__all__ = ["Seq", "Batch", "Scheduler", "VllmScheduler", "SglangScheduler", "TrtllmScheduler",
           "SCHEDULERS", "make_scheduler", "private_suffixes"]
