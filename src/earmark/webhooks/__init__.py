"""`earmark kinde-webhooks`: Kinde's billing webhooks, verified, turned into plan marks in
PostgreSQL that every sidecar with a limits provider applies within a poll (issue 21)."""
