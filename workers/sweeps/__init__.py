"""The scheduled sweeps: thin glue between the rules in shared.maintenance and the store."""
