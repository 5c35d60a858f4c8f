"""The benign real-server suite: widely used registry servers doing ordinary work, guarded.

`mtguard eval --suite real` runs each session in `sessions/` unguarded and through
`mtguard proxy`, and reports per server the false positives (rule and evidence), the broken
calls (a diff) and the added latency. Modules: `session` (the data and its loader), `compare`
(normalise and classify), `runner` (run both ways), `report` (tables).
"""
