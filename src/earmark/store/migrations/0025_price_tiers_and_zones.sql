-- Issue 44. A price row's prompt-length tier (the row applies to calls whose input tokens
-- are above this many; 0: the base row), and the IANA zone its daily window is in ('':
-- UTC). Rows put before keep their meaning: base rows, windows in UTC.
ALTER TABLE prices
    ADD COLUMN input_tokens_above bigint NOT NULL DEFAULT 0 CHECK (input_tokens_above >= 0),
    ADD COLUMN window_timezone text NOT NULL DEFAULT '';
