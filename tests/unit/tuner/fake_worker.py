#!/usr/bin/env python3
"""A scripted measuring worker for the protocol tests (tuner/worker.h): it speaks
the worker's JSON lines without a GPU. Configs named 'crash' die by SIGSEGV while
checked, 'hang' never answer, 'noisy-hang' never answer but print a stray line
every 0.2 s (as a driver's warnings would), 'fault' report a CUDA fault and end the
process (as a real worker must after an illegal address), 'wrong' fail their check,
'typed' report a median that is a string, 'negative' a time of -1 ms; the rest
are timed at 1 ms plus 0.1 ms per character of their name (and, when the job's timer
asks for times at the peak clock, said to have run at 1700 MHz)."""
import json
import os
import signal
import sys
import time


def say(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    job = json.loads(line)
    passed = []
    for config in job["configs"]:
        say({"event": "checking", "config": config})
        if config == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if config == "hang":
            time.sleep(3600)
        if config == "noisy-hang":
            while True:
                sys.stdout.write("cuda warning: something\n")
                sys.stdout.flush()
                time.sleep(0.2)
        if config == "fault":
            say({"event": "failed", "config": config,
                 "error": "cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"})
            sys.exit(3)
        if config == "wrong":
            # As a real worker says it: the infinite check error is JSON's null.
            say({"event": "failed", "config": config, "error": "wrong result: relative L2 error inf",
                 "check_error": None,
                 "resources": {"threads": 256, "registers": 32, "shared_bytes": 0}})
            continue
        say({"event": "checked", "config": config, "check_error": 0.001,
             "resources": {"threads": 256, "registers": 32, "shared_bytes": 0}})
        passed.append(config)
    for config in passed:
        ms = 1.0 + 0.1 * len(config)
        timed = {"event": "timed", "config": config, "median_ms": ms, "low_ms": ms * 0.99,
                 "high_ms": ms * 1.01, "min_ms": ms * 0.98, "runs": 25, "stopped_early": False}
        if job.get("timer", {}).get("at_peak_clock"):
            timed["clock_mhz"] = 1700.0
        if config == "typed":
            timed["median_ms"] = "fast"
        if config == "negative":
            timed.update(median_ms=-1.0, low_ms=-1.0, high_ms=-1.0)
        say(timed)
    say({"event": "done"})
