"""Egress policy of webhooks and remote audit targets: where the server may connect (SSRF protection).

A webhook URL or an audit's ``target.url`` is chosen by whoever submits the job, and the
server (or a worker) POSTs to it from inside the deployment's network. Unchecked, that lets a tenant
reach the cloud metadata service (169.254.169.254), the database, admin ports on
loopback and anything else on the private network. The policy, from the settings:

- ``http``/``https`` only; no credentials (``user:pass@``) in the URL;
- ``DPICL_EGRESS_ALLOWED_HOSTS`` (empty: any host): if set, the URL's host must be
  one of these names (``hooks.example.com``) or a subdomain of a ``*.example.com``
  entry; IP literals must be listed as they are written;
- every address the host resolves to must be public: not loopback, private,
  link-local, multicast, reserved, unspecified, shared (100.64/10) or otherwise
  not globally routable, IPv4 embedded in IPv6 (``::ffff:a.b.c.d``, 6to4, NAT64)
  judged by its IPv4 address, unless ``DPICL_EGRESS_ALLOW_PRIVATE`` is true or the
  address lies in one of ``DPICL_EGRESS_ALLOWED_NETWORKS``.

The older names ``DPICL_WEBHOOK_ALLOW_PRIVATE``, ``DPICL_WEBHOOK_ALLOWED_NETWORKS`` and
``DPICL_WEBHOOK_ALLOWED_HOSTS`` are aliases, used where the ``DPICL_EGRESS_*`` name is unset.

Two checks. At submit time (:func:`check_url`, no DNS): the scheme, credentials,
the host list, and the address if the host is an IP literal (also the legacy
numeric forms ``2130706433``/``0x7f.1`` that resolvers accept) or ``localhost``.
At delivery time the check is repeated (the settings may have changed since), and
the connection itself goes through :class:`VettingBackend`: it resolves the host
once, refuses if *any* resolved address is not allowed, and connects to a vetted
address — the one that was checked, so a DNS answer that changes between check
and connect (DNS rebinding) cannot send the POST elsewhere. TLS still verifies
the certificate against (and sends SNI for) the URL's host name. Redirects are
not followed, and the delivery client ignores ``HTTP(S)_PROXY`` (a proxy would do
its own resolution, outside this check).
"""

from __future__ import annotations

import ipaddress
import socket
import typing
from urllib.parse import urlsplit

import httpcore
import httpx

if typing.TYPE_CHECKING:
    from app.config import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")
HINT = ("the server connects to public addresses only (an operator may allow others with "
        "DPICL_EGRESS_ALLOWED_NETWORKS or DPICL_EGRESS_ALLOW_PRIVATE=true)")


class EgressRefused(Exception):
    """The egress policy refuses this URL or address: ``reason`` (short), the message adds what to do."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(f"{reason}; {hint}" if hint else reason)
        self.reason = reason


def _why_not_public(addr: IPAddress) -> str | None:
    """None for a public (globally routable unicast) address, else what it is."""
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = addr.ipv4_mapped or addr.sixtofour
        if embedded is None and addr in NAT64:
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None:
            why = _why_not_public(embedded)
            return f"{why} (IPv4 {embedded} embedded in IPv6)" if why else None
    for what, flag in (
        ("an unspecified", addr.is_unspecified),
        ("a loopback", addr.is_loopback),
        ("a link-local", addr.is_link_local),
        ("a multicast", addr.is_multicast),
        ("a private", addr.is_private),
        ("a reserved", addr.is_reserved),
    ):
        if flag:
            return f"{what} address"
    if not addr.is_global:
        return "a non-global address"
    return None


def refusal(addr: IPAddress, settings: Settings) -> str | None:
    """What ``addr`` is ("a loopback address", ...) when the policy refuses it, else None."""
    why = _why_not_public(addr)
    if why is None or settings.egress_allow_private:
        return None
    if any(addr in net for net in settings.egress_allowed_networks or ()):
        return None
    return why


def _literal(host: str) -> IPAddress | None:
    """The address of an IP-literal host, including the legacy IPv4 forms resolvers accept."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host.lower()):
        try:  # "2130706433", "0x7f.1", "127.1": what getaddrinfo would make of them
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def host_allowed(host: str, settings: Settings) -> bool:
    allowed = settings.egress_allowed_hosts
    if not allowed:
        return True
    for entry in allowed:
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif host == entry:
            return True
    return False


def check_url(url: str, settings: Settings, field: str = "webhook_url") -> str:
    """The static checks (no DNS); returns the host. Raises EgressRefused with a message for the submitter
    that starts with ``field`` (the request field that holds the URL)."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise EgressRefused(f"{field} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise EgressRefused(f"{field}: scheme {scheme or '(none)'!r} is not allowed; use http or https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise EgressRefused(
            f"{field} must not carry credentials (user:password@host); "
            + ("deliveries are authenticated by the X-DPICL-Signature header instead" if field == "webhook_url"
               else "give the key as api_key_env or api_key")
        )
    host = (hostname or "").rstrip(".").lower()
    if not host:
        raise EgressRefused(f"{field} has no host")
    if not host_allowed(host, settings):
        raise EgressRefused(f"{field}: host {host!r} is not one of DPICL_EGRESS_ALLOWED_HOSTS "
                             "(alias DPICL_WEBHOOK_ALLOWED_HOSTS)")
    addr = _literal(host)
    if addr is None and (host == "localhost" or host.endswith(".localhost")):
        addr = ipaddress.IPv4Address("127.0.0.1")  # RFC 6761: always loopback
    if addr is not None:
        why = refusal(addr, settings)
        if why:
            raise EgressRefused(f"{field}: {host} is {why}", HINT)
    return host


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address of ``host`` (module-level so that tests can stand in for DNS)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        addr = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if addr not in out:
            out.append(addr)
    return out


class VettingBackend(httpcore.NetworkBackend):
    """httpcore network backend: resolve once, refuse unless every address is allowed, connect to a vetted one."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addrs = resolve(host, port)
        except OSError as exc:  # name does not resolve: an ordinary (retryable) connect error
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        if not addrs:
            raise httpcore.ConnectError(f"{host!r} has no addresses")
        for addr in addrs:
            why = refusal(addr, self.settings)
            if why:
                where = f"{addr} is {why}" if str(addr) == host else f"{host} resolves to {addr}, {why}"
                raise EgressRefused(where, HINT)
        last: Exception | None = None
        for addr in addrs:  # the literal vetted address: no second lookup
            try:
                return self._inner.connect_tcp(str(addr), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(self, *args, **kwargs):  # pragma: no cover - never configured
        raise EgressRefused("unix sockets are not an egress destination")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class VettingTransport(httpx.HTTPTransport):
    """httpx's own transport with its connection pool on :class:`VettingBackend` (no proxy, no unix socket)."""

    def __init__(self, settings: Settings, keepalive: int = 0) -> None:
        super().__init__(trust_env=False)
        ssl_context = httpx.create_ssl_context(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=10,
            # Kept-alive connections are to a vetted address: reuse cannot bypass the check.
            max_keepalive_connections=keepalive,
            network_backend=VettingBackend(settings),
        )


def client(settings: Settings) -> httpx.Client:
    """The delivery client: the vetting transport, no redirects, no proxies from the environment."""
    return httpx.Client(
        transport=VettingTransport(settings),
        timeout=settings.webhook_timeout_seconds,
        follow_redirects=False,
        trust_env=False,
    )
