"""The HTTPS JSON API the supervisor calls: Start, Open, Hold, Release, Stop, Status, Output, Preflight."""
