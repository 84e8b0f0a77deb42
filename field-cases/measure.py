#!/usr/bin/env python3
"""Measures every field-cases route with instruments outside the profiler (wrk, perf, strace).

Run as root from the workspace root after `cargo build --release -p field-cases`:

    python3 field-cases/measure.py [--out DIR] [ROUTE ...]

For each route it starts a fresh `taskset -c 0 target/release/field-cases --workers 2 >/dev/null`,
warms it up for 1 s, then, with wrk pinned to CPU 1 (`taskset -c 1 wrk -t1 -c8 ...`):

1. wrk alone, 5 s: req/s, mean latency, requests;
2. `perf record -F 999 -g -p PID -- sleep 5` under load, then
   `perf report --no-children --sort symbol` and `perf report --children --sort symbol`;
3. `strace -f -c -p PID` for 5 s under load (ended with SIGINT), divided by the requests the app
   counted on its own `/stats` over the same window;
4. where needed, `strace -f -e trace=read|write|clock_nanosleep -p PID` for 2 s (sizes, times).

Raw outputs go to DIR (default /tmp/field-cases-measure/<route>/); a summary is printed and
written to DIR/summary.json.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "target", "release", "field-cases")
PORT = 8099
STRACE_SECS = 10
# Syscalls counted with perf stat's tracepoints (the app at full speed, unlike under strace).
COUNTED = ["futex", "write", "writev", "read", "clock_nanosleep", "openat", "recvfrom", "epoll_wait", "sched_yield"]
BASE = f"http://127.0.0.1:{PORT}"

ROUTES = [
    "/case/regex-per-request", "/control/regex-static",
    "/case/blocking-sleep", "/control/async-sleep",
    "/case/global-mutex", "/control/no-lock",
    "/case/hash-on-worker", "/control/hash-blocking",
    "/case/log-stdout", "/control/log-buffered",
    "/case/brotli-11", "/control/brotli-5",
    "/case/json-from-reader", "/control/json-from-slice",
    "/case/lock-across-sleep", "/control/sleep-without-lock",
]
# strace -e traces per route (per-call sizes or times).
DETAIL = {
    "/case/blocking-sleep": "clock_nanosleep",
    "/control/async-sleep": "clock_nanosleep",
    "/case/log-stdout": "write",
    "/control/log-buffered": "write",
    "/case/json-from-reader": "read",
    "/control/json-from-slice": "read",
}


# Named shares of on-CPU samples per route: (label, "self" = sum of self % of the matching
# symbols in `perf report --no-children`, "children" = the largest children % of a matching
# symbol in `perf report --children`, "chain" = % of the samples of `perf script` with a
# matching symbol anywhere in their call chain, or "leaf" = % of them whose leaf symbol
# matches; regex on the symbol).
SHARES = {
    "regex": [("regex crates self", "self", r"^(regex_automata|regex_syntax|regex)::|^<regex_(automata|syntax)"),
              ("Regex::new children", "children", r"^regex::regex::string::Regex::new$"),
              ("regex Builder::build children", "children", r"^regex::builders::Builder::build")],
    "mutex": [("Mutex::lock_contended children", "children", r"lock_contended"),
              ("futex mutex self", "self", r"std::sys::sync::mutex::futex|futex_wait|futex_wake|^futex_|^__futex"),
              ("Tally::update children", "children", r"^field_cases::Tally::update$")],
    "hash": [("sha2/hmac/pbkdf2 self", "self", r"^(sha2|hmac|pbkdf2|digest)::|^<(sha2|hmac|pbkdf2|digest)::|^field_cases::hash_password$"),
             ("hash_password children", "children", r"^field_cases::hash_password$"),
             ("worker::run children", "children", r"^tokio::runtime::scheduler::multi_thread::worker::run$"),
             ("blocking pool Inner::run children", "children", r"^tokio::runtime::blocking::pool::Inner::run$")],
    "brotli": [("brotli self", "self", r"^(<)?brotli(_decompressor)?::"),
               ("brotli_compress children", "children", r"^field_cases::brotli_compress$"),
               ("hq (zopfli) self", "self", r"^brotli::enc::backward_references::hq::"),
               ("memset self", "self", r"memset"),
               ("hq (zopfli) on the stack", "chain", r"^brotli::enc::backward_references::hq::"),
               # The zeroing of the encoder's tables (memset, and the kernel clearing the
               # pages it faults in): its share follows the heap's state, not the encoder.
               ("page zeroing leaf", "leaf", r"^(__memset|clear_page)")],
    "json": [("from_reader children", "children", r"^serde_json::de::from_reader$"),
             ("serde_json from_trait children", "children", r"^serde_json::de::from_trait$"),
             ("libc read children", "children", r"^(read|__GI___libc_read|__libc_read)$"),
             ("kernel self", "self", r"KERNEL")],
    "log": [("StdoutLock::write_all children", "children", r"^<std::io::stdio::StdoutLock as std::io::Write>::write_all$"),
            ("libc write children", "children", r"^(write|__GI___libc_write|__libc_write)$"),
            ("BufWriter flush_buf children", "children", r"BufWriter<std::io::stdio::StdoutRaw>>::flush_buf")],
    "sleep": [("thread::sleep children", "children", r"^std::thread::(functions::)?sleep$"),
              ("nanosleep children", "children", r"nanosleep")],
}
KIND = {"regex": "regex", "mutex": "mutex", "no-lock": "mutex", "hash": "hash", "brotli": "brotli",
        "json": "json", "log": "log", "sleep": "sleep"}


def script_samples(text):
    """The call chains of `perf script -F comm,tid,ip,sym` output: one list of symbols per
    sample, leaf first."""
    samples, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            if cur is not None:
                samples.append(cur)
            cur = None
        elif cur is None:
            cur = []  # the sample's header: comm and tid
        else:
            parts = line.strip().split(None, 1)
            cur.append(parts[1] if len(parts) > 1 else "[unknown]")
    if cur is not None:
        samples.append(cur)
    return samples


def shares(route, self_rep, child_rep, script):
    kind = next((v for k, v in KIND.items() if k in route), None)
    if not kind:
        return {}
    srows = perf_shares(self_rep)
    crows = perf_shares(child_rep)
    chains = script_samples(script)
    out = {}
    for label, mode, pat in SHARES[kind]:
        if pat == "KERNEL":
            out[label] = round(sum(p for p, _, s in srows if s in KSYMS), 2)
            continue
        rx = re.compile(pat)
        if mode in ("chain", "leaf"):
            hit = [c for c in chains if (any(rx.search(f) for f in c) if mode == "chain" else (c and rx.search(c[0])))]
            out[label] = round(100.0 * len(hit) / max(len(chains), 1), 2)
        elif mode == "self":
            out[label] = round(sum(p for p, _, s in srows if rx.search(s)), 2)
        else:
            out[label] = max((c for c, _, s in crows if rx.search(s)), default=0.0)
    return out


KSYMS = set()


def wrk(route, secs, background=False):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", "-c8", f"-d{secs}s", BASE + route]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=secs + 30).stdout


def parse_wrk(out):
    r = {"cmd_output": out}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["req_per_s"] = float(m.group(1))
    m = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
    if m:
        v = float(m.group(1))
        r["mean_latency_ms"] = {"us": v / 1e3, "ms": v, "s": v * 1e3}[m.group(2)]
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: (.*)", out)
    r["socket_errors"] = m.group(1) if m else ""
    return r


def stats():
    with urllib.request.urlopen(BASE + "/stats", timeout=10) as resp:
        return json.load(resp)


def start_app():
    p = subprocess.Popen(["taskset", "-c", "0", APP, "--workers", "2", "--listen", f"127.0.0.1:{PORT}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    if not line.startswith("listening on"):
        p.kill()
        sys.exit(f"field-cases did not start: {line!r}")
    return p


def stop_app(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def perf_shares(report):
    """(percent, children-or-self percent, symbol) rows of a `perf report --stdio -g none` table."""
    rows = []
    for line in report.splitlines():
        k = re.match(r"\s+[\d.]+%\s+(?:[\d.]+%\s+)?\[k\]\s+(.*?)\s+-\s+-\s*$", line)
        if k:
            KSYMS.add(k.group(1))
        m = re.match(r"\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?\[[.k]\]\s+(.*?)\s+-\s+-\s*$", line)
        if m:
            rows.append((float(m.group(1)), float(m.group(2)) if m.group(2) else None, m.group(3).strip()))
    return rows


def parse_strace_c(text):
    calls = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and re.match(r"^[\d.]+$", parts[0]) and parts[-1] not in ("total",):
            # % time, seconds, usecs/call, calls, [errors], syscall
            try:
                calls[parts[-1]] = {"calls": int(parts[3]), "usecs_per_call": int(parts[2]),
                                    "errors": int(parts[4]) if len(parts) == 6 else 0}
            except ValueError:
                pass
    return calls


def detail(path, sys_name):
    """Per-call figures of a `strace -f -T` log; requests = responses written (writev)."""
    pending = {}  # pid -> unfinished line head
    calls = []  # (pid, name, first arg, return, seconds)
    for line in open(path):
        line = line.rstrip("\n")
        m = re.match(r"(\d+)\s+(.*)$", line)
        if not m:
            continue
        tid, rest = m.group(1), m.group(2)
        if rest.endswith("<unfinished ...>"):
            pending[tid] = rest[: -len("<unfinished ...>")]
            continue
        r = re.match(r"<\.\.\. (\w+) resumed>(.*)$", rest)
        if r:
            rest = pending.pop(tid, r.group(1) + "(") + r.group(2)
        c = re.match(r"(\w+)\(([^,)]*)(.*)=\s+(-?\d+)[^<]*<([\d.]+)>$", rest)
        if c:
            calls.append((tid, c.group(1), c.group(2), int(c.group(4)), float(c.group(5)), c.group(3)))
    responses = sum(1 for c in calls if c[1] == "writev")
    out = {"syscall": sys_name, "responses_writev": responses}
    mine = [c for c in calls if c[1] == sys_name]
    out["calls"] = len(mine)
    out["per_response"] = round(len(mine) / responses, 3) if responses else None
    out["mean_time_us_under_strace"] = round(1e6 * sum(c[4] for c in mine) / len(mine), 1) if mine else None
    by_fd = {}
    for c in mine:
        by_fd[c[2]] = by_fd.get(c[2], 0) + 1
    out["calls_by_first_arg"] = dict(sorted(by_fd.items(), key=lambda kv: -kv[1])[:6])
    if sys_name == "write":
        ones = [c for c in mine if c[2] == "1"]
        out["writes_to_stdout"] = len(ones)
        out["stdout_writes_per_response"] = round(len(ones) / responses, 4) if responses else None
        out["mean_bytes_per_stdout_write"] = round(sum(c[3] for c in ones) / len(ones), 1) if ones else None
    if sys_name == "read":
        # Complete opens of the catalog: reads on the fd openat returned, until read returns 0.
        fd_of, counting, per_open, sizes = {}, {}, [], []
        for tid, name, a0, ret, _, rest in calls:
            if name == "openat" and "field-cases-catalog" in rest and ret >= 0:
                fd_of[tid] = str(ret)
                counting[tid] = [0, 0]
            elif name == "read" and fd_of.get(tid) == a0:
                counting[tid][0] += 1
                counting[tid][1] += max(ret, 0)
                sizes.append(ret)
                if ret == 0:
                    per_open.append(tuple(counting.pop(tid)))
                    fd_of.pop(tid)
        out["complete_file_parses"] = len(per_open)
        out["reads_per_parse"] = sorted(set(p[0] for p in per_open))
        out["bytes_per_parse"] = sorted(set(p[1] for p in per_open))
        nz = [x for x in sizes if x > 0]
        out["mean_bytes_per_read"] = round(sum(nz) / len(nz), 2) if nz else None
        out["max_bytes_per_read"] = max(nz) if nz else None
    return out


def served(s0, s1):
    return sum(s1[k] - s0.get(k, 0) for k in s1)


def measure(route, outdir):
    d = os.path.join(outdir, route.strip("/").replace("/", "_"))
    os.makedirs(d, exist_ok=True)
    res = {"route": route}
    app = start_app()
    pid = app.pid
    try:
        wrk(route, 1)  # warm-up
        # 1. wrk alone
        out = wrk(route, 5)
        open(os.path.join(d, "wrk.txt"), "w").write(out)
        res["wrk"] = parse_wrk(out)
        res["wrk"]["cmd"] = f"taskset -c 1 wrk -t1 -c8 -d5s {BASE}{route}"
        # 2. perf
        load = wrk(route, 7, background=True)
        time.sleep(1)
        data = os.path.join(d, "perf.data")
        s0 = stats()
        subprocess.run(["taskset", "-c", "1", "perf", "record", "-F", "999", "-g", "-p", str(pid), "-o", data, "--", "sleep", "5"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        s1 = stats()
        load.communicate(timeout=30)
        res["perf_requests"] = served(s0, s1)
        self_rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio", "-g", "none"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        child_rep = subprocess.run(["perf", "report", "-i", data, "--children", "--sort", "symbol", "--stdio", "-g", "none"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        open(os.path.join(d, "perf-self.txt"), "w").write(self_rep)
        open(os.path.join(d, "perf-children.txt"), "w").write(child_rep)
        m = re.search(r"# Samples: (\S+)\s+of event '([^']+)'", self_rep)
        res["perf_samples"] = m.group(1) if m else None
        res["perf_event"] = m.group(2) if m else None
        script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,ip,sym"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        res["perf_shares"] = shares(route, self_rep, child_rep, script)
        res["perf_self_top"] = [(p, s) for p, _, s in perf_shares(self_rep)[:25]]
        res["perf_children_top"] = [(c, s, sf) for c, sf, s in perf_shares(child_rep)[:40]]
        # 3. strace -c
        load = wrk(route, STRACE_SECS + 4, background=True)
        time.sleep(1)
        s0 = stats()
        sc = subprocess.Popen(["taskset", "-c", "1", "strace", "-f", "-c", "-o", os.path.join(d, "strace-c.txt"), "-p", str(pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(STRACE_SECS)
        sc.send_signal(signal.SIGINT)
        sc.wait(timeout=30)
        s1 = stats()
        load_out, _ = load.communicate(timeout=30)
        n = served(s0, s1)
        calls = parse_strace_c(open(os.path.join(d, "strace-c.txt")).read())
        res["strace_requests"] = n
        res["strace_wrk"] = parse_wrk(load_out).get("req_per_s")
        res["syscalls_per_request"] = {k: round(v["calls"] / n, 3) for k, v in sorted(calls.items(), key=lambda kv: -kv[1]["calls"]) if n}
        res["strace_usecs_per_call"] = {k: v["usecs_per_call"] for k, v in calls.items()}
        # 4. perf stat on syscall tracepoints: exact counts at full speed
        load = wrk(route, 7, background=True)
        time.sleep(1)
        s0 = stats()
        ev = ",".join(f"syscalls:sys_enter_{c}" for c in COUNTED)
        ps = subprocess.run(["taskset", "-c", "1", "perf", "stat", "-x,", "-e", ev, "-p", str(pid), "--", "sleep", "5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        s1 = stats()
        load.communicate(timeout=30)
        n = served(s0, s1)
        counts = {}
        for line in ps.stderr.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[2].startswith("syscalls:sys_enter_"):
                try:
                    counts[f[2][len("syscalls:sys_enter_"):]] = int(f[0])
                except ValueError:
                    pass
        res["perf_stat_requests"] = n
        res["perf_stat_per_request"] = {k: round(v / n, 4) for k, v in counts.items()} if n else {}
        # 5. strace -e: per-call sizes and times, divided by the responses written (writev)
        if route in DETAIL:
            sys_name = DETAIL[route]
            load = wrk(route, 6, background=True)
            time.sleep(1)
            path = os.path.join(d, f"strace-{sys_name}.txt")
            trace = f"{sys_name},writev" + (",openat" if sys_name == "read" else "")
            st = subprocess.Popen(["taskset", "-c", "1", "strace", "-f", "-T", "-e", f"trace={trace}", "-o", path, "-p", str(pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(3)
            st.send_signal(signal.SIGINT)
            st.wait(timeout=30)
            load.communicate(timeout=30)
            res["detail"] = detail(path, sys_name)
            res["detail"]["cmd"] = f"strace -f -T -e trace={trace} -p PID (3 s)"
    finally:
        stop_app(app)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/field-cases-measure")
    ap.add_argument("routes", nargs="*")
    a = ap.parse_args()
    routes = a.routes or ROUTES
    os.makedirs(a.out, exist_ok=True)
    results = []
    for r in routes:
        print(f"== {r} (load average {os.getloadavg()[0]:.2f})", flush=True)
        res = measure(r, a.out)
        res["loadavg_before"] = os.getloadavg()
        w = res["wrk"]
        print(f"   wrk: {w.get('req_per_s')} req/s, mean {w.get('mean_latency_ms')} ms, {w.get('requests')} requests, non-2xx {w['non_2xx']}")
        print(f"   perf: {res['perf_samples']} samples ({res['perf_event']}); top self: {res['perf_self_top'][:6]}")
        print(f"   perf shares %: {res['perf_shares']}")
        print(f"   strace: {res['strace_requests']} requests; per request: {dict(list(res['syscalls_per_request'].items())[:8])}")
        print(f"   perf stat: {res['perf_stat_requests']} requests; per request: {res['perf_stat_per_request']}")
        if "detail" in res:
            print(f"   detail: {res['detail']}")
        results.append(res)
        json.dump(results, open(os.path.join(a.out, "summary.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
