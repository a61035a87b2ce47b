"""Public home of :class:`Request` (documented for policies and notebooks); it lives in
:mod:`simkit.core.request`."""

from simkit.core.request import Request

__all__ = ["Request"]
