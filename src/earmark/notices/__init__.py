"""Budget notices (issue 34): events a budget's admissions and settles write, delivered to
an operator's webhook, signed as Standard Webhooks specifies (signing.py)."""
