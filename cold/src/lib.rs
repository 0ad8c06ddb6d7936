//! The cold tier (seed 003 "Hot/Cold Storage"): the ColdDevice aggregate and device IO.
