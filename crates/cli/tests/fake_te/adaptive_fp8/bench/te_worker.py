"""A stand-in TE worker speaking the real protocol, for `crates/cli/tests/te_backend.rs`.

It measures nothing: it answers each point with timings derived from the request, so the test
can check the plumbing (requests, reports, provenance), not TE.
"""

import json
import sys

for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "hello":
        out = {"ok": True, "device": {"name": "Fake H200", "compute_capability": "9.0", "sm_count": 132, "te_version": "9.9.9"}}
    else:
        p, opt = req["point"], req["opt"]
        point = dict(p["report_point"])
        rows = sum(p["splits"])
        scale = 2.0 if opt["recompute"] else 1.0
        def timing(ms):
            s = {"median": ms, "p10": ms * 0.95, "p90": ms * 1.05}
            return {"fwd_ms": s, "bwd_ms": s, "total_ms": s, "cast_ms": {"median": 0, "p10": 0, "p90": 0}, "launches": 0, "gpu_total_ms": {"median": ms / 2, "p10": ms / 2, "p90": ms / 2}}
        point["bf16"] = timing(scale * (0.5 + rows / 1e4))
        point["fp8"] = timing(scale * (1.0 + rows / 2e4))
        point["speedup"] = point["bf16"]["total_ms"]["median"] / point["fp8"]["total_ms"]["median"]
        point["status"] = "ok"
        out = {"ok": True, "point": point}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
