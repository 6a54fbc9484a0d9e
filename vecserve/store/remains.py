"""What remains of models their registry entry no longer names (evicted, lost in a
failover, deleted by hand): damage, told from an unknown model."""

from __future__ import annotations

import json
from collections.abc import Iterator

from .keys import (
    HISTORY_KEEP,
    LOADS,
    METADATA_PATTERN,
    MODELS,
    TRASH,
    history_key,
    is_generation_of,
    metadata_of_key,
    model_of_prefix,
    prefix_of_row_key,
    row_key_patterns,
    validate_model_name,
)
from .records import LoadState, ModelInfo

__all__ = ["Remains"]


class Remains:
    """The :class:`~.registry.Store`'s search for unaccounted generations."""

    def remains(self, name: str) -> dict[str, list[str]]:
        """``{prefix: [what]}``: keys of generations of ``name`` that nothing accounts
        for -- neither its registry entry, nor its history (retired generations), the
        trash, or an unfinished load. Keys left when a registry entry is gone (evicted,
        lost in a failover, deleted by hand) are damage, not an unknown model.

        One ``SCAN`` of the metadata keys, then (when none is found) one of the row keys
        that stops at the first: O(keys in the database) on the server, for
        ``vecserve models check`` of a model with no registry entry only."""
        validate_model_name(name)
        with self.errors(f"looking for what remains of {name!r}"):
            accounted = self._accounted(name)
            out: dict[str, list[str]] = {}
            for prefix, what in self._metadata_traces():
                if is_generation_of(prefix, name) and prefix not in accounted:
                    out.setdefault(prefix, []).append(what)
            if not out:
                for pattern in row_key_patterns(name):  # rows: the first found will do
                    for key in self.client.scan_iter(match=pattern, count=10_000):
                        prefix = prefix_of_row_key(key)
                        if prefix not in accounted:
                            out.setdefault(prefix, []).append("rows")
                            break
        return {p: sorted(set(w)) for p, w in sorted(out.items())}

    def orphans(self) -> dict[str, dict[str, list[str]]]:
        """``{model: {prefix: [what]}}`` for every model with generation metadata that
        nothing accounts for (see :meth:`remains`): models whose registry entry is gone,
        which a listing of the registry alone would not show. One ``SCAN`` of the
        metadata keys; rows are not scanned."""
        with self.errors("looking for models without a registry entry"):
            found: dict[str, dict[str, list[str]]] = {}
            for prefix, what in self._metadata_traces():
                found.setdefault(model_of_prefix(prefix), {}).setdefault(prefix, []).append(what)
            out = {}
            for name, prefixes in sorted(found.items()):
                accounted = self._accounted(name)
                left = {p: sorted(w) for p, w in sorted(prefixes.items()) if p not in accounted}
                if left:
                    out[name] = left
        return out

    def _accounted(self, name: str) -> set[str]:
        """The generation prefixes of ``name`` something accounts for: its registry
        entry, its unfinished load, its history, the trash."""
        accounted = {p.decode() for p in self.client.smembers(TRASH)}
        raw = self.client.hget(MODELS, name)
        if raw is not None:
            accounted.add(ModelInfo.from_json(raw).prefix)
        load = self.client.hget(LOADS, name)
        if load is not None:
            accounted.add(LoadState.from_json(load).prefix)
        retired, _ = self.retired(name)
        return accounted | {info.prefix for _, info in retired.values()}

    def retired(self, name: str) -> tuple[dict[int, tuple[float, ModelInfo]], int]:
        """The retired generations of ``name`` (``{generation: (retired at, info)}``)
        and the number of them its last load asked to keep."""
        with self.errors(f"reading the history of {name!r}"):
            raw = self.client.hgetall(history_key(name))
        keep = int(raw.pop(HISTORY_KEEP, b"0") or 0)
        out = {}
        for field, value in raw.items():
            if field.isdigit():
                data = json.loads(value)
                info = ModelInfo.from_json(json.dumps(data["info"]))
                out[int(field)] = (float(data["retired"]), info)
        return out, keep

    def _metadata_traces(self) -> Iterator[tuple[str, str]]:
        """``(prefix, what)`` for every generation metadata key in the database."""
        for key in self.client.scan_iter(match=METADATA_PATTERN, count=10_000):
            found = metadata_of_key(key)
            if found is not None:
                yield found
