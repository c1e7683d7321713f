"""Route: everything pricing needs to know about one target (provider + model).

A route is a plain value built from config (``proxy.config``); pricing never looks anything up
behind its back. Transport facts (API base, keys) are not here: they belong to the proxy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pricing.framing import Framing, is_openai_model
from pricing.images import ImageRule, text_only

__all__ = ["ImageFetchPolicy", "ImageLimits", "Route"]


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """Per-route limits on images a request may carry (checked before any pixel is touched)."""

    max_images: int = 500
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 178_956_970  # Pillow's decompression-bomb threshold
    #: What an image of unknown size costs when the rule has no upper bound.
    max_image_tokens: int = 10_000


@dataclass(frozen=True, slots=True)
class ImageFetchPolicy:
    """Whether the proxy may fetch the first bytes of a URL image to learn its size.

    The default fetches nothing: a URL image is then priced at the rule's worst case. Fetching
    makes the gateway a client of URLs its callers chose, so it is opt-in per route, limited to
    allowlisted hosts (``images.example.com`` exactly, ``*.example.com`` for its subdomains,
    ``*`` for any public host), and never reaches loopback, private, link-local or metadata
    addresses unless ``allow_private`` is set (metadata addresses never). ``proxy.fetch`` does
    the I/O; this value only says what is allowed.
    """

    allow_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    #: Bytes read at most per image (headers are tiny; JPEG metadata may need more).
    max_bytes: int = 65_536
    #: Whole-fetch deadline per image, DNS included.
    timeout_s: float = 2.0
    #: Redirects followed, each hop re-checked against the allowlist and address rules.
    max_redirects: int = 2
    #: URL images fetched per request at most (the rest are priced at the worst case).
    max_urls: int = 16

    def __post_init__(self) -> None:
        hosts = tuple(h.strip().lower().rstrip(".") for h in self.allow_hosts)
        for host in hosts:
            bare = host.removeprefix("*.")
            if host != "*" and (not bare or "*" in bare or "/" in host or "@" in host):
                raise ValueError(
                    f"allow_hosts entry {host!r} must be a host name, '*.suffix' or '*'"
                )
        object.__setattr__(self, "allow_hosts", hosts)
        if self.max_bytes < 64 or self.timeout_s <= 0 or self.max_redirects < 0:
            raise ValueError("image fetch needs max_bytes >= 64, timeout_s > 0, max_redirects >= 0")
        if self.max_urls < 0:
            raise ValueError("image fetch max_urls must not be negative")

    @property
    def enabled(self) -> bool:
        return bool(self.allow_hosts) and self.max_urls > 0

    def allows_host(self, host: str) -> bool:
        """Whether ``host`` (a name or an IP literal, as in the URL) is on the allowlist."""
        host = host.lower().rstrip(".")
        for allowed in self.allow_hosts:
            if allowed == "*" or host == allowed:
                return True
            if allowed.startswith("*.") and host.endswith(allowed[1:]):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Route:
    alias: str
    model: str
    provider: str = "openai"
    context_window: int = 128_000
    max_output_tokens: int = 4_096
    tokenizer: str = "o200k_base"
    framing: Framing = field(default_factory=Framing)
    image_rule: ImageRule = field(default_factory=text_only)
    supports_vision: bool = False
    image_limits: ImageLimits = field(default_factory=ImageLimits)
    image_fetch: ImageFetchPolicy = field(default_factory=ImageFetchPolicy)

    @property
    def exact_text(self) -> bool:
        """Whether text on this route is counted with the provider's own published rules."""
        if not self.framing.exact:
            return False
        if self.framing.family == "deepseek":
            return self.tokenizer == "deepseek"
        return self.tokenizer in ("o200k_base", "cl100k_base") and is_openai_model(self.model)
