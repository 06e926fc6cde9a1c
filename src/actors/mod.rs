//! The operator: supervision tree and per-object actors.
