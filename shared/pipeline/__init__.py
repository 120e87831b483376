"""The tables the turn pipeline owns: inbox, routes, leases, outbox, cron."""
