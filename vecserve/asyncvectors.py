"""AsyncRedisKeyedVectors: the asyncio client, over ``redis.asyncio`` (the calls and
their answers: :mod:`vecserve.keyedvectors`).

Lookups drive the same steps as :class:`~vecserve.syncvectors.RedisKeyedVectors` on the
event loop (:func:`vecserve.store.asyncwire.arun`); the whole-matrix calls and the whole-model
copy run on a sync twin of the same reader in a worker thread (``_THREADED``); a pinned
view's lease is renewed by an asyncio task (``_Pinning``).
"""

from __future__ import annotations

import asyncio
import functools

import numpy as np

from .connect import connect
from .lookups import Call, Calls
from .reader import Reader
from .store import Pin, Store
from .store.asyncwire import AsyncConnections, arun
from .store.clients import async_client
from .store.pins import keep_alive_async
from .store.wire import Steps
from .syncvectors import RedisKeyedVectors, TextCalls
from .wholematrix import WholeMatrixCalls

__all__ = ["AsyncRedisKeyedVectors"]

# The calls AsyncRedisKeyedVectors answers in a worker thread, on its sync twin: those
# of the whole matrix (a local memory-mapped snapshot, or the HTTP service) and the
# whole-model copy.
_THREADED = sorted(
    {n for n in vars(WholeMatrixCalls) if not n.startswith("_")}
    - {n for n, v in vars(WholeMatrixCalls).items() if isinstance(v, (staticmethod, property))}
    | {"to_keyedvectors"}
)
_THREADED_PROPERTIES = sorted(
    n for n, v in vars(WholeMatrixCalls).items() if isinstance(v, property)
)


class AsyncRedisKeyedVectors(Calls, TextCalls):
    """:class:`RedisKeyedVectors` for asyncio: the same calls, answers, errors and cache,
    with ``await`` on every call that does I/O, over ``redis.asyncio``.

    ``await kv.get_vector("king")``, ``await kv["king"]``, ``await kv.index_to_key``,
    ``await kv.most_similar("king")``. Lookups are driven on the event loop, pipelined on
    a few connections every coroutine shares (a batch of many words is built, packed and
    decoded in chunks, the loop running between them); whole-matrix calls (``most_similar``,
    ``closer_than``, the evaluations, ...) run the sync snapshot code in a worker thread.
    ``len(kv)`` and ``kv.vector_size`` answer from the registry entry last read (after
    :meth:`connect` or any call); ``key in kv`` cannot await: use
    ``await kv.contains(key)``. A cancelled call leaves the connections usable.

    Takes the same arguments as :class:`RedisKeyedVectors`.

    >>> kv = await AsyncRedisKeyedVectors.connect("GOOGLE_W2V", cache=True)  # doctest: +SKIP
    >>> (await kv.get_vectors(["king", "queen"]))[0].shape                   # doctest: +SKIP
    (2, 300)
    """

    def _init_state(self) -> None:
        self._reader_: Reader | None = None
        self._twin_: RedisKeyedVectors | None = None
        self._embedded = None
        self._aclient = None
        self._connections: AsyncConnections | None = None
        self._connecting: asyncio.Lock | None = None
        self._vocab: tuple[int, list[str], dict[str, int]] | None = None
        self._counts: tuple[int, np.ndarray | None] | None = None
        # a pinned view's: its pin, the task renewing it, the client whose connections it uses
        self._pin: Pin | None = None
        self._pin_task: asyncio.Task | None = None
        self._parent: AsyncRedisKeyedVectors | None = None

    @classmethod
    def _wrap(cls, call: Call):
        fn = call.fn
        if call.prop:
            return property(lambda self: self._arun(fn(self)), doc=fn.__doc__)

        async def method(self, *args, **kwargs):
            return await self._arun(fn(self, *args, **kwargs))

        functools.update_wrapper(method, fn)
        return method

    @classmethod
    async def connect(cls, name: str, **kwargs) -> AsyncRedisKeyedVectors:
        """Construct and connect now: ModelNotFound/StoreUnavailable raise here."""
        kv = cls(name, **kwargs)
        await kv._arun(kv._info_steps(fresh=True))
        if kv.cache_size:
            cache = kv._reader.cache()
            await asyncio.to_thread(cache.wait_ready, 5)
        return kv

    def _view(self, reader: Reader) -> AsyncRedisKeyedVectors:
        """This client's API on another reader of its connections (a pinned one)."""
        kv = AsyncRedisKeyedVectors(reader.name, store=reader.store, **Calls._options_of(self))
        kv._reader_, kv._aclient, kv._connections = reader, self._aclient, self._connections
        kv.cache_size = reader.cache_size
        kv._parent = self
        return kv

    def pin(self, *, lease: float | None = None) -> _Pinning:
        """A view of the generation live now, as :meth:`RedisKeyedVectors.pin`: ``async
        with kv.pin() as pinned:`` (closed at the block's end) or ``pinned = await
        kv.pin()`` (then ``await pinned.aclose()``). An asyncio task renews its lease;
        it uses this client's connections.

        >>> async with kv.pin() as pinned:                # doctest: +SKIP
        ...     vectors, found = await pinned.get_vectors(["king", "queen"])
        """
        return _Pinning(self, lease)

    async def _pin_view(self, lease: float | None) -> AsyncRedisKeyedVectors:
        reader = await self._ensure()
        pin = await self._arun(
            Pin.take_steps(reader.store, self.name, lease=lease, info=reader.last_info)
        )
        view = self._view(reader.pinned(pin.info))
        view._pin = pin
        run = functools.partial(view._arun, confirm=False)
        view._pin_task = asyncio.create_task(keep_alive_async(pin, run))
        return view

    # -- connections --------------------------------------------------------------------

    def _connect_sync(self) -> None:
        """Connect the sync store (and the embedded server): run in a thread."""
        if self._given_store is not None:
            store = self._given_store
        else:
            self._embedded = connect(self._redis_url)
            store = Store.from_url(self._embedded.url)
        self._reader_ = self._new_reader(store)

    async def _ensure(self) -> Reader:
        if self._aclient is not None and self._reader_ is not None:
            return self._reader_
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._reader_ is None:
                await asyncio.to_thread(self._connect_sync)
            if self._aclient is None:
                self._aclient, self._connections = async_client(self._reader_.store)
        return self._reader_

    @property
    def _reader(self) -> Reader:
        if self._reader_ is None:
            raise RuntimeError("not connected: call through an await first")
        return self._reader_

    async def _arun(self, steps: Steps, *, confirm: bool = True):
        reader = await self._ensure()
        if self._pin is not None and confirm:  # a pinned view: its pin lived through it
            steps = self._pin.confirmed(steps)
        return await arun(steps, self._aclient, reader.store.url, self._connections)

    @property
    def _twin(self) -> RedisKeyedVectors:
        """A sync client of the same reader, for the calls run in a worker thread."""
        if self._twin_ is None:
            self._twin_ = RedisKeyedVectors._on_reader(self._reader, self)
            self._twin_._pin = self._pin  # its reads are confirmed too; closed by us
        return self._twin_

    async def _threaded(self, name: str, *args, **kwargs):
        await self._ensure()
        return await asyncio.to_thread(getattr(self._twin, name), *args, **kwargs)

    async def aclose(self) -> None:
        """Stop the cache listener and close the connections this instance opened (a
        pinned view: end its pin; its client's connections stay open)."""
        if self._pin is not None:
            if self._pin_task is not None:
                self._pin_task.cancel()
            await self._arun(self._pin.release_steps(), confirm=False)
        if self._parent is not None:
            self._reader_ = self._twin_ = self._aclient = self._connections = None
            return
        if self._connections is not None:
            await self._connections.close()
        if self._aclient is not None:
            await self._aclient.aclose()
        reader = self._reader_
        if reader is not None:
            await asyncio.to_thread(reader.close)
            if self._given_store is None:
                await asyncio.to_thread(reader.store.close)
        if self._embedded is not None:
            self._embedded.release()
        self._reader_ = self._twin_ = self._aclient = self._connections = None

    async def __aenter__(self) -> AsyncRedisKeyedVectors:
        await self._arun(self._info_steps())  # connected, the entry read: len() answers
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # -- the calls Python's syntax makes --------------------------------------------------

    def __getitem__(self, key_or_keys):
        """``await kv["word"]`` or ``await kv[["a", "b"]]``."""
        return self._getitem(key_or_keys)

    def __len__(self) -> int:
        info = self._reader_.last_info if self._reader_ is not None else None
        if info is None:
            raise TypeError(
                "len() of an AsyncRedisKeyedVectors before its first call: "
                "await kv.connect(...) or any call first"
            )
        return info.count

    def __contains__(self, key) -> bool:
        raise TypeError("`in` cannot await: use `await kv.contains(key)`")

    @property
    def vector_size(self) -> int:
        """The dimension, from the registry entry last read (no I/O)."""
        len(self)  # TypeError before the first call
        return self._reader.last_info.dim

    async def distances(self, word_or_vector, other_words=()) -> np.ndarray:
        """Cosine distances to ``other_words`` (one round trip), or to every key (snapshot,
        in a thread)."""
        if not other_words:
            return await self._threaded("distances", word_or_vector)
        return await self._arun(self._distances_to_steps(word_or_vector, other_words))

    def _distances_to_steps(self, word_or_vector, other_words):
        return Calls._distances_to(self, word_or_vector, other_words)

    cosine_similarities = staticmethod(Calls.cosine_similarities)


def _threaded_method(name: str):
    async def method(self, *args, **kwargs):
        return await self._threaded(name, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(WholeMatrixCalls, name, getattr(RedisKeyedVectors, name)).__doc__
    return method


def _threaded_property(name: str):
    async def get(self):
        await self._ensure()
        return await asyncio.to_thread(getattr, self._twin, name)

    return property(lambda self: get(self), doc=getattr(WholeMatrixCalls, name).__doc__)


for _name in _THREADED:
    setattr(AsyncRedisKeyedVectors, _name, _threaded_method(_name))
for _name in _THREADED_PROPERTIES:
    setattr(AsyncRedisKeyedVectors, _name, _threaded_property(_name))
for _name in ("log_accuracy", "log_evaluate_word_pairs"):
    setattr(AsyncRedisKeyedVectors, _name, staticmethod(getattr(WholeMatrixCalls, _name)))


class _Pinning:
    """What :meth:`AsyncRedisKeyedVectors.pin` returns: awaited, the pinned view; used
    with ``async with``, the view, closed (its pin ended) at the block's end."""

    def __init__(self, kv: AsyncRedisKeyedVectors, lease: float | None):
        self._kv, self._lease = kv, lease
        self._view: AsyncRedisKeyedVectors | None = None

    def __await__(self):
        return self._kv._pin_view(self._lease).__await__()

    async def __aenter__(self) -> AsyncRedisKeyedVectors:
        self._view = await self._kv._pin_view(self._lease)
        return self._view

    async def __aexit__(self, *exc) -> None:
        assert self._view is not None
        await self._view.aclose()
