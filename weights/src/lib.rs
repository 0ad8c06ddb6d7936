//! Managed weight revisions (seed 000): pure aggregates and the MIXED planner.
