-- The write probe's table (store/probe.py): while the database has refused writes (a full
-- disk, say), each sidecar truncates it and fills it with fresh rows inside a transaction
-- it then rolls back, to learn whether PostgreSQL can extend a file again. It never holds
-- a committed row.
CREATE TABLE write_probe (
    n integer NOT NULL,
    pad text NOT NULL
);
