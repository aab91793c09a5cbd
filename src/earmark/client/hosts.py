"""Which provider an OpenAI-compatible base URL prices its calls under, and what an Azure
OpenAI api-version streams.

An openai SDK client pointed at another provider's OpenAI-compatible API (DeepSeek, Groq,
Mistral, Together, OpenRouter, xAI, Azure) bills at that provider's prices, which the price
book keeps under genai-prices' provider ids (genai_prices/data.py: each provider's id and
api_pattern). metered() names the provider from the base URL's host when the caller gave
no provider=:
- a host of HOSTS (api.deepseek.com: deepseek, ...), or an Azure OpenAI host (AZURE_HOST,
  genai-prices' azure pattern): that provider;
- OpenAI's own API (api.openai.com and its regional hosts, eu.api.openai.com..., or no
  base URL), and a loopback host (localhost, 127.0.0.0/8, ::1: a local fake, proxy or
  gateway of OpenAI's API, as the tests run): openai, as before;
- any other host: none (ProviderNotNamedError), since pricing its calls as OpenAI's models
  would charge them at rates it does not bill; a local server of open models (vLLM,
  Ollama) on a loopback host passes provider= too, or its models are looked up as OpenAI's.

This module imports no provider package.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import date
from urllib.parse import urlsplit

from earmark.client.errors import EarmarkClientError

OPENAI = "openai"
AZURE = "azure"

# OpenAI-compatible APIs by their host, named as genai-prices names them (its provider id;
# each host is the one its api_pattern matches).
HOSTS: dict[str, str] = {
    "api.openai.com": OPENAI,
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral",
    "api.together.xyz": "together",
    "openrouter.ai": "openrouter",
    "api.openrouter.ai": "openrouter",
    "api.x.ai": "x-ai",
}
# OpenAI's own regional hosts (the openai package's data residency: eu.api.openai.com...).
OPENAI_REGIONAL = ".api.openai.com"
# Azure OpenAI's hosts: genai-prices' azure api_pattern, on the host alone.
AZURE_HOST = re.compile(
    r"(?:[^.]*\.)?(?:openai\.azure\.com|azure-api\.net|cognitiveservices\.azure\.com"
    r"|services\.ai\.azure\.com)"
)
# The providers whose answers report what the call cost (OpenRouter's usage.cost, in
# dollars): read, and settled at where the budget counts money (wire_openai.Reported).
REPORTS_COST = frozenset({"openrouter"})

# Azure OpenAI's api-versions that take stream_options (and so stream their usage): the GA
# 2024-10-21 and later, the previews from 2024-09-01-preview (earlier ones answer 400
# "Unrecognized request argument supplied: stream_options"; 2024-08-01-preview is
# reported both ways, and is taken as one that does not).
STREAM_USAGE_SINCE = date(2024, 10, 21)
STREAM_USAGE_PREVIEW_SINCE = date(2024, 9, 1)
_API_VERSION = re.compile(r"(\d{4})-(\d{2})-(\d{2})(-preview)?")


class ProviderNotNamedError(EarmarkClientError, ValueError):
    """metered() was given an openai SDK client whose base URL is no host Earmark knows the
    provider of: its calls would be priced as OpenAI's models. Nothing was metered; pass
    provider= (genai-prices' id: "deepseek", "groq", "openai"...)."""

    reason = "PROVIDER_NOT_NAMED"

    def __init__(self, host: str) -> None:
        super().__init__(
            f"the base URL's host {host!r} is no provider Earmark knows: pass metered(..., "
            'provider="...") naming the provider its prices are under (genai-prices\' id, '
            'such as "deepseek", "groq", "mistral", "together", "openrouter", "x-ai", or '
            '"openai" for a proxy of OpenAI\'s own API)'
        )
        self.about = {"host": host}


def host_of(base_url: str) -> str:
    """The base URL's host, lower case ("" for none)."""
    return (urlsplit(base_url).hostname or "").lower()


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def named(base_url: str) -> str:
    """The provider base_url's host names: a known host's, azure for Azure OpenAI's, openai
    for OpenAI's own, for none and for a loopback host. Raises ProviderNotNamedError for
    any other host."""
    host = host_of(base_url)
    if not host or is_loopback(host):
        return OPENAI
    if host in HOSTS:
        return HOSTS[host]
    if host.endswith(OPENAI_REGIONAL):
        return OPENAI
    if AZURE_HOST.fullmatch(host):
        return AZURE
    raise ProviderNotNamedError(host)


def streams_usage(api_version: str | None) -> bool:
    """Whether Azure OpenAI's api_version takes stream_options.include_usage, and so ends a
    chat stream with its usage. None (Azure's v1 API, /openai/v1/, which takes no
    api-version) does; so does a version not dated (the v1 API's "latest", "preview")."""
    if api_version is None:
        return True
    found = _API_VERSION.fullmatch(api_version.strip())
    if found is None:
        return True
    year, month, day, preview = found.groups()
    try:
        dated = date(int(year), int(month), int(day))
    except ValueError:
        return True
    return dated >= (STREAM_USAGE_PREVIEW_SINCE if preview else STREAM_USAGE_SINCE)


__all__ = [
    "AZURE",
    "HOSTS",
    "OPENAI",
    "REPORTS_COST",
    "ProviderNotNamedError",
    "named",
    "streams_usage",
]
