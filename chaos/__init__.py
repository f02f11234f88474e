"""The fault-and-attack campaign: scripts/chaos (docs/reliability.md)."""
