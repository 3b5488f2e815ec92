#!/usr/bin/env python3
"""Runs the single-process gpu tests under compute-sanitizer, one process per test case.

On a lent GPU machine, after scripts/device_check.sh has built build/device (same
command, or a build carried over). Each CTest entry labelled `gpu` (not `mpi`) runs as
its own `compute-sanitizer --tool TOOL <test command>`, several at once on the one GPU,
each under a time limit, all of them under an overall budget, so that a run fits one
device call and says exactly what it covered. The allocator's caching is turned off
(DTR_CUDA_NO_CACHING=1, see dtr/tensor/cuda/cuda_allocator.h) so memcheck sees every
tensor's own bounds.

Writes OUT/sanitize-TOOL.txt (one line per test: status, seconds, name) and a log per
test under OUT/sanitize-TOOL/; prints the counts and every test that was not clean.
Statuses: clean; no-cuda-call (the test passed but made no CUDA call the sanitizer could
watch, e.g. a case that does not apply with the caching turned off; the sanitizer then
exits non-zero without a summary); HAZARDS (the sanitizer reported errors); FAILED (the
test failed under the sanitizer with no sanitizer error); TIMEOUT (past --limit); NO-SUMMARY (exited 0 but
printed no sanitizer summary); not-run (the budget ran out first). Exit status 0 only
when every test ran clean or made no CUDA call.

  python3 scripts/device_sanitize.py --tool memcheck --budget 300
  python3 scripts/device_sanitize.py --tool racecheck --filter 'attention|softmax' --limit 240
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

SUMMARY = {
    "racecheck": re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)"),
    "default": re.compile(r"ERROR SUMMARY: (\d+) errors?"),
}
SANITIZER_ERROR_EXIT = 86
NO_CUDA_CALL = "Target application terminated before first instrumented API call"
CATCH_PASSED = re.compile(r"^(All tests passed|test cases: (\d+) \| \2 passed$)", re.M)


def find_sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    fallback = "/usr/local/cuda/bin/compute-sanitizer"
    return fallback if os.access(fallback, os.X_OK) else None


def gpu_tests(build_dir):
    listing = subprocess.run(
        ["ctest", "--test-dir", build_dir, "-L", "gpu", "-LE", "mpi", "-N", "--show-only=json-v1"],
        check=True, capture_output=True, text=True)
    tests = []
    for t in json.loads(listing.stdout)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(e.split("=", 1) for e in props.get("ENVIRONMENT", []))
        tests.append({"name": t["name"], "command": t["command"], "cwd": props.get("WORKING_DIRECTORY"), "env": env})
    return tests


def hazards(tool, log_text):
    """The sanitizer's error count, or None when it printed no summary."""
    m = SUMMARY.get(tool, SUMMARY["default"]).search(log_text)
    return int(m.group(1)) if m else None


def run_one(test, index, args, sanitizer, log_dir, deadline):
    if time.monotonic() >= deadline:
        return "not-run", 0.0
    cmd = [sanitizer, "--tool", args.tool, "--error-exitcode", str(SANITIZER_ERROR_EXIT),
           "--print-limit", "20"] + args.sanitizer_arg + test["command"]
    env = dict(os.environ)
    env.update(test["env"])
    if not args.keep_caching:
        env["DTR_CUDA_NO_CACHING"] = "1"
    log_path = os.path.join(log_dir, f"{index:03d}.log")
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write(f"# {test['name']}\n# {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=test["cwd"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=args.limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the sanitizer and the test it runs
            proc.wait()
            return "TIMEOUT", time.monotonic() - t0
    seconds = time.monotonic() - t0
    with open(log_path, errors="replace") as log:
        text = log.read()
    count = hazards(args.tool, text)
    if rc == SANITIZER_ERROR_EXIT or (count or 0) > 0:
        return "HAZARDS", seconds
    if rc != 0:
        if count is None and NO_CUDA_CALL in text and CATCH_PASSED.search(text):
            return "no-cuda-call", seconds
        return "FAILED", seconds
    return ("clean" if count == 0 else "NO-SUMMARY"), seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", default="memcheck", choices=["memcheck", "racecheck", "synccheck", "initcheck"])
    parser.add_argument("--build", default="build/device", help="the CMake build directory")
    parser.add_argument("--filter", default="", help="regex: only tests whose name matches")
    parser.add_argument("--jobs", type=int, default=6, help="sanitizer processes at once")
    parser.add_argument("--limit", type=float, default=150, help="seconds per test")
    parser.add_argument("--budget", type=float, default=420, help="seconds for the whole run: no test starts later")
    parser.add_argument("--keep-caching", action="store_true", help="leave the caching allocator on")
    parser.add_argument("--sanitizer-arg", action="append", default=[], help="extra compute-sanitizer argument")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/dtr-device"))
    args = parser.parse_args()

    sanitizer = find_sanitizer()
    if sanitizer is None:
        sys.exit("device_sanitize: compute-sanitizer not found on PATH or in /usr/local/cuda/bin")
    if not os.path.isdir(args.build):
        sys.exit(f"device_sanitize: {args.build} missing: build it first (scripts/device_check.sh)")
    tests = [t for t in gpu_tests(args.build) if re.search(args.filter, t["name"])]
    if not tests:
        sys.exit(f"device_sanitize: no gpu test in {args.build} matches '{args.filter}'")

    log_dir = os.path.join(args.out, f"sanitize-{args.tool}")
    os.makedirs(log_dir, exist_ok=True)
    deadline = time.monotonic() + args.budget
    print(f"== compute-sanitizer --tool {args.tool}: {len(tests)} tests, {args.jobs} at once, "
          f"{args.limit:.0f} s each, {args.budget:.0f} s budget", flush=True)
    results = [None] * len(tests)
    lock = threading.Lock()

    def work(i):
        results[i] = run_one(tests[i], i, args, sanitizer, log_dir, deadline)
        status = results[i][0]
        if status not in ("clean", "no-cuda-call", "not-run"):
            with lock:
                print(f"   {status:<10} {results[i][1]:6.1f} s  {tests[i]['name']}  ({log_dir}/{i:03d}.log)",
                      flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(work, range(len(tests))))

    summary_path = os.path.join(args.out, f"sanitize-{args.tool}.txt")
    counts = {}
    with open(summary_path, "w") as summary:
        for i, (test, (status, seconds)) in enumerate(zip(tests, results)):
            counts[status] = counts.get(status, 0) + 1
            summary.write(f"{status:<10} {seconds:7.1f}  {i:03d}  {test['name']}\n")
    print(f"-- {args.tool}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {summary_path}")
    return 0 if counts.get("clean", 0) + counts.get("no-cuda-call", 0) == len(tests) else 1


if __name__ == "__main__":
    sys.exit(main())
