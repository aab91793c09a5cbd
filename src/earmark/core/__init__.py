"""Pure rules: plain data in, decisions out. No I/O, no clocks: `now` is an argument."""
