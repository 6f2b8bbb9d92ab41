"""Exceptions an engine may raise; backends map their library's errors to these once.

EngineError
├── EngineOverloaded      the replica cannot take the request now (retry elsewhere)
├── EngineUnavailable     the replica is dead or not started
├── UpstreamTimeout       a remote provider did not answer in time
├── UpstreamRejected      a remote provider refused the request (bad input)
│   └── ContextExceeded   the prompt is longer than the model's context
└── UpstreamFailed        any other failure of the engine or provider
"""

from __future__ import annotations


class EngineError(Exception):
    retryable = False


class EngineOverloaded(EngineError):
    retryable = True

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineUnavailable(EngineError):
    retryable = True


class UpstreamTimeout(EngineError):
    pass


class UpstreamRejected(EngineError):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class ContextExceeded(UpstreamRejected):
    """The prompt has ``tokens`` tokens (``at_least``: a lower bound, found without
    tokenising it) and the model's context is ``context``."""

    def __init__(self, tokens: int, context: int, *, at_least: bool, param: str) -> None:
        counted = f"at least {tokens}" if at_least else str(tokens)
        super().__init__(f"the prompt has {counted} tokens; this model's context is {context}")
        self.tokens, self.context, self.at_least, self.param = tokens, context, at_least, param


class UpstreamFailed(EngineError):
    pass
