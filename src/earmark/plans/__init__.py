"""Plans from the billing provider: the limits an account's plan grants, read through a
cache that fails closed, and the usage reported back to the provider's meter."""
