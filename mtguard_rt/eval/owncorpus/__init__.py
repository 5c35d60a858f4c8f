"""Our own attack corpus (issue 15): unseen attack classes, written from public class
descriptions, replayed through one guard on scripted servers that really do what they say.

`cases.load_cases()` reads the case files (cases/*.toml) and the server personas
(servers.toml); `replay.run_own()` replays them in observe mode; `report` renders per class
and per source detection, false positives with a 95% upper bound, the rules behind each
catch and what was missed. Separate from the paper corpus by design: `mtguard eval --suite own`.
"""
