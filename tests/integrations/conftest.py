"""The gate's tests use the metered-call tests' fake OpenAI and priced sidecar."""

from tests.client.conftest import priced, provider

__all__ = ["priced", "provider"]
