"""A model entry's facts as one deployment of its alias: its id, weight and per-minute limits.

LiteLLM load-balances the entries sharing a ``model_name``; each is a deployment with its own
route facts (``proxy.config.routes``) and these routing facts. They are LiteLLM's keys where
LiteLLM puts them: ``model_info.id``; ``litellm_params.weight``, ``rpm`` and ``tpm`` (also
accepted on the entry itself, where LiteLLM's older examples put ``rpm``/``tpm``);
``litellm_params.order`` (or ``model_info.order``, where LiteLLM also reads it). They are read
here and never forwarded to a provider.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.config.reader import Reader

__all__ = ["DEPLOYMENT_PARAMS", "ENTRY_LIMITS", "DeploymentFacts", "derived_id", "read_deployment"]

#: litellm_params keys that are the router's, not the provider's.
DEPLOYMENT_PARAMS = frozenset({"weight", "rpm", "tpm", "order"})
#: Per-entry keys LiteLLM also reads as the deployment's limits.
ENTRY_LIMITS = frozenset({"rpm", "tpm"})


@dataclass(frozen=True, slots=True)
class DeploymentFacts:
    id: str
    weight: float = 1.0
    rpm: int | None = None
    tpm: int | None = None
    #: LiteLLM's priority: the lowest order's deployments take the requests, a higher order's
    #: only once those failed or cool down; None: none written (after every ordered one).
    order: int | None = None


def derived_id(alias: str, model: str, api_base: object, occurrence: int) -> str:
    """A stable id for an entry without ``model_info.id``: the alias and a digest of where it
    goes, so reordering the file or editing another entry keeps it (``occurrence`` tells apart
    entries of one alias that go to the same model and base, e.g. two keys)."""
    text = f"{alias}\0{model}\0{api_base or ''}\0{occurrence}"
    return f"{alias}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def _limit(
    item: Mapping[str, Any],
    params: Mapping[str, Any],
    info: Mapping[str, Any],
    key: str,
    where: str,
    rd: Reader,
) -> int | None:
    """A limit written in one of its three places: the entry, ``litellm_params``,
    ``model_info`` (LiteLLM's usage-based routing reads them in that order; ``model_info.rpm``
    was warned about as unused, and the deployment had no limit). Written in two, the file
    says two things: an error. A null is not written (LiteLLM's ``rpm: Optional[int] = None``:
    no limit), as an unset ``os.environ/NAME`` is: ``rpm: null`` was refused as "must be an
    integer", and counted as the second of two places."""
    # the entry's own is resolved here (litellm_params and model_info are, by the route's
    # reader): an ``rpm: os.environ/RPM`` there was read as that text and refused as no integer
    places = {
        f"{where}.{key}": rd.resolve(item.get(key), f"{where}.{key}"),
        f"{where}.litellm_params.{key}": params.get(key),
        f"{where}.model_info.{key}": info.get(key),
    }
    written = [(at, value) for at, value in places.items() if value is not None]
    if len(written) > 1:
        (first, _), (second, _) = written[:2]
        raise rd.error(first, f"also set as {second.removeprefix(where + '.')}; keep one")
    return rd.integer(written[0][1], written[0][0], minimum=1) if written else None


def _order(
    params: Mapping[str, Any], info: Mapping[str, Any], where: str, rd: Reader
) -> int | None:
    """``litellm_params.order``, else ``model_info.order`` (LiteLLM's ``get_deployment_order``:
    a string of digits counts as its integer, as every quoted number does: ``Reader.integer``).
    Not read, it was forwarded as a provider parameter and the backup deployment (``order: 2``)
    took half the traffic."""
    for block, at in ((params, "litellm_params"), (info, "model_info")):
        given = block.get("order")
        if given is not None:
            return rd.integer(given, f"{where}.{at}.order")
    return None


def read_deployment(
    item: Mapping[str, Any],
    params: Mapping[str, Any],
    info: Mapping[str, Any],
    where: str,
    rd: Reader,
) -> DeploymentFacts:
    """``id`` is ``model_info.id`` or empty: the loader derives the missing ones (it alone sees
    the other entries of the alias)."""
    written = info.get("id")
    ident = "" if written is None else rd.string(str(written), f"{where}.model_info.id")
    # rd.number: an ``.inf`` weight took every pick (and two of them none by weight at all);
    # a null weight is unwritten, as a null limit is (``_limit``)
    given = params.get("weight")
    weight = 1.0 if given is None else rd.number(given, f"{where}.litellm_params.weight")
    return DeploymentFacts(
        id=ident,
        weight=weight,
        rpm=_limit(item, params, info, "rpm", where, rd),
        tpm=_limit(item, params, info, "tpm", where, rd),
        order=_order(params, info, where, rd),
    )
