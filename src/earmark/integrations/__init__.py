"""Earmark where users already are: gates for the gateways and frameworks that send the
calls (earmark.integrations.litellm: LiteLLM's proxy)."""
