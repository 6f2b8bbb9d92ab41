"""Exceptions an engine may raise; backends map their library's errors to these once.

EngineError
├── EngineOverloaded      the replica cannot take the request now (retry elsewhere)
├── EngineUnavailable     the replica is dead or not started
├── UpstreamTimeout       a remote provider did not answer in time
├── UpstreamRejected      a remote provider refused the request (bad input)
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


class UpstreamFailed(EngineError):
    pass
