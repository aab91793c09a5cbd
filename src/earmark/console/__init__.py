"""`earmark console`: a web page where operators see budgets, holds and spend, act on holds
in doubt, and run the Concurrency Lab, through a sidecar's Admin and Budget services like
any other client (the `console` extra: Starlette, uvicorn and Jinja2)."""
