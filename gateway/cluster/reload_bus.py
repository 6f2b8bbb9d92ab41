"""Policy reloads published through Redis, so one call reaches every front.

``POST /admin/api/policies/reload`` (``gateway.admin.policies``) on any front reloads that
front (``gateway.cluster.reload``
does the reading, checking and swapping) and then publishes the new config version on
the ``<redis_prefix>:policies:reload`` channel. Every other front hears it on its own
subscription, reloads from its own config file the same way, and compares versions:
a front whose file is not yet the published one (a ConfigMap volume updates a little
after the API object) reads it again every ``retry_s`` until it matches or
``give_up_s`` passes. ``/readyz`` shows the running version and the last one published.
SIGHUP stays a reload of that one process.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from typing import Any

import orjson
from redis.exceptions import RedisError

from gateway.cluster.reload import PolicyRejected, reload_policies
from gateway.state import GatewayState
from policies.schema import GatewayConfig

log = logging.getLogger(__name__)


def config_version(config: GatewayConfig) -> str:
    """Names a config by its content: equal files give equal versions on every front."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]


class ReloadBus:
    def __init__(
        self,
        state: GatewayState,
        redis_url: str,
        prefix: str,
        *,
        retry_s: float = 1.0,
        give_up_s: float = 180.0,
    ) -> None:
        import redis.asyncio as aioredis

        self.state = state
        self.channel = f"{prefix}:policies:reload"
        self.retry_s = retry_s
        self.give_up_s = give_up_s
        self.origin = uuid.uuid4().hex  # this front; it ignores its own messages
        self.published: str | None = None  # the last version any front published
        self.applied = 0
        self._redis = aioredis.Redis.from_url(redis_url, socket_connect_timeout=2.0)
        self._task: asyncio.Task[None] | None = None
        self._catching_up: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._listen(), name="reload-bus")
        # Ready means subscribed: a reload published after that is not missed.
        try:
            await asyncio.wait_for(self._subscribed.wait(), 5.0)
        except TimeoutError:
            log.error("reload bus: not subscribed yet; reloads from other fronts may be missed")

    async def publish(self, version: str) -> int:
        """Tell every front; returns how many are listening (this one included)."""
        self.published = version
        message = orjson.dumps({"version": version, "origin": self.origin})
        return int(await self._redis.publish(self.channel, message))

    async def _listen(self) -> None:
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self._subscribed.set()
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._heard(message["data"])
            except (RedisError, OSError) as exc:
                log.warning("reload bus: lost Redis (%s); resubscribing", exc)
                await asyncio.sleep(1.0)
            finally:
                await pubsub.aclose()

    def _heard(self, data: Any) -> None:
        try:
            body = orjson.loads(data)
            version, origin = str(body["version"]), str(body["origin"])
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            log.warning("reload bus: unreadable message %r: %s", data, exc)
            return
        self.published = version
        if origin == self.origin:
            return
        if self._catching_up is not None:
            self._catching_up.cancel()
        self._catching_up = asyncio.get_running_loop().create_task(self._catch_up(version))

    async def _catch_up(self, version: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.give_up_s
        while True:
            if config_version(self.state.config) != version:
                try:
                    await reload_policies(self.state)
                except PolicyRejected as exc:
                    log.error("reload bus: version %s refused here: %s", version, exc)
                    return
            if config_version(self.state.config) == version:
                self.applied += 1
                log.info("reload bus: running config version %s", version)
                return
            if loop.time() >= deadline:
                log.error("reload bus: config file never reached version %s", version)
                return
            await asyncio.sleep(self.retry_s)

    async def aclose(self) -> None:
        for task in (self._task, self._catching_up):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._redis.aclose()
