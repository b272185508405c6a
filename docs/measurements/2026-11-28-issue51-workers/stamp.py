"""Run a command, each line of its output prefixed with the seconds since it started; last, when it exited and how
long after its last line (a process's exit: its atexit handlers, its children's ends)."""

import subprocess
import sys
import time

start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
last = 0.0
for line in proc.stdout:
    last = time.perf_counter() - start
    print(f"{last:7.1f} {line}", end="", flush=True)
rc = proc.wait()
end = time.perf_counter() - start
print(f"{end:7.1f} exit {rc}, {end - last:.1f} s after its last line", flush=True)
