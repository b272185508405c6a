import sys, time, json, traceback
from meddpm.measure.processes.ddp import run_ddp
from meddpm.parity.ddp import check_parity
from meddpm.errors import UserError
tag, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    t0 = time.time()
    try:
        if i % 2 == 0:
            check_parity("tiny", 2, device="cpu", gradient_sync="after_backward")
        run_ddp("tiny", "amp_bf16", 2, device="cpu", warmup=1, rounds=2, gradient_sync="after_backward")
        print(json.dumps({"tag": tag, "i": i, "ok": True, "s": round(time.time() - t0, 1)}), flush=True)
    except UserError as e:
        notes = "\n".join(getattr(e, "__notes__", []))
        print(json.dumps({"tag": tag, "i": i, "ok": False, "error": str(e)}), flush=True)
        open(f"/tmp/stress/fail-{tag}-{i}.txt", "w").write(str(e) + "\n" + notes)
