# The probe's command runner on the node, when the node has a python3 (almost every training node
# does).  preflight.probe sends this file's text with the script and runs it as
#     python3 -I -S -c <this file> NONCE READ TIMEOUT PLAN DEVS BASH
# It prints exactly the records the bash runner of preflight.probe prints, but starts one process
# per command (``bash -c``, or the program itself for a simple command) instead of about ten
# (timeout, head and base64 for stdout and stderr), which is most of the probe's cost on a node:
# see benchmarks/.  If python3 is missing, too old, or
# this runner fails, the script falls back to the bash runner.
#
# Runs on the node's own interpreter: Python 3.6 syntax and standard library only, no third-party
# imports, nothing written to disk.  Each command runs in a session of its own, so a timeout (or this
# runner being stopped) kills the command and every child it started.
import base64
import json
import os
import re
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
import zlib

COMPRESS_FROM = 2048  # bytes of stdout above which it is sent as a Z record (zlib, then base64)
MAX_LANES = 8  # NPUs one tool is asked about at the same time
_live = set()  # process groups of commands running now
_live_lock = threading.RLock()  # re-entrant: _stop may run as a signal handler while its thread holds it


def _kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _children():
    # Every process this runner started, recorded or not: a signal that lands between a command's
    # start and its entry in _live would otherwise leave that command running.
    pids = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/children" % task) as fh:
                pids.update(int(p) for p in fh.read().split())
    except (OSError, ValueError):
        pass
    return pids


def _stop(signum, frame):
    # The SSH channel went away or the run was stopped: no command outlives the runner.
    with _live_lock:
        for pid in _live | _children():
            _kill_group(pid, signal.SIGKILL)
            try:
                os.kill(pid, signal.SIGKILL)  # not yet the leader of its own session
            except OSError:
                pass
    os._exit(128 + signum)


def _write(out, data):
    try:
        out.write(data)
        out.flush()
    except OSError:
        # The SSH channel is gone (the controller's deadline, a lost connection): the commands
        # still running have no one to report to and no timeout but ours, so they go now.
        _stop(signal.SIGPIPE, None)


_LITERAL = re.compile(r"^[A-Za-z0-9_./:,+@%-]+$")
_QUOTED_VAR = re.compile(r'^"\$(PF_[A-Z][A-Z0-9_]*)"$')


def simple_argv(command, env):
    """The argv bash would run for ``command`` when it is one simple command of literal words
    and quoted ``"$PF_*"`` values naming a program by absolute path (``"$PF_HCCN" -i "$PF_DEV"
    -link -g``), else None.  Such a command is started directly: the same process bash -c
    would exec, one bash start-up less (most of the probe's commands are of this form)."""
    words = command.strip().split(" ")
    argv = []
    for word in words:
        m = _QUOTED_VAR.match(word)
        if m:
            argv.append(env.get(m.group(1), ""))
        elif _LITERAL.match(word) and not (not argv and "=" in word):
            argv.append(word)
        else:
            return None
    # A name without a slash may be a builtin or an (exported) function: only bash knows.
    if not argv or not argv[0].startswith("/"):
        return None
    return argv


# How long a SIGKILLed command may take to go: one in uninterruptible sleep (a driver ioctl that
# never returns, a hung network mount) cannot go at all, and waiting for it would keep every
# record of its group, and the host's deadline, waiting too.
REAP_SECONDS = 5


# How long the pipes of a command that has exited are read for, when a child it left behind keeps
# them open: what the command wrote itself is already in them.
DRAIN_SECONDS = 0.5


def _reap(proc):
    try:
        proc.wait(REAP_SECONDS)
    except subprocess.TimeoutExpired:
        pass  # left to the kernel; reported as killed (137), its tool then skipped as hung


# sudo's own refusals (the probe runs in the C locale): no password, not allowed, no tty, the tool
# off secure_path ("sudo: hccn_tool: command not found").  Only refusals: sudo also warns on calls
# that then run ("sudo: unable to resolve host X", "sudo: setrlimit(RLIMIT_CORE): ..." in
# containers).  One pattern for Python's re here and in preflight.facts, and for `grep -E` in the
# bash runner and the NPU ping (preflight.activeprobe).
SUDO_REFUSED_ERE = (r"^(sudo: .*(command not found|not in the sudoers|is not allowed to|a password is required|"
                    r"a terminal is required)|sorry, you must have a tty to run sudo|Sorry, user .* is not allowed "
                    r"to execute)")
SUDO_REFUSED = re.compile("(?m)" + SUDO_REFUSED_ERE)


# The probe's commands start with this (preflight.probe builds them; the bash runner runs it as
# it is): parsers read the tools' English words.
C_LOCALE = "export LC_ALL=C PYTHONIOENCODING=utf-8; unset LANGUAGE; "


def run_command(bash, command, env, timeout, read):
    """(stdout, stderr, rc, ms) of ``bash -c command``: stdin closed, each stream kept up to
    ``read`` bytes (the pipe is closed then, as ``head -c`` does), killed with its whole process
    group after ``timeout`` seconds: rc 124, or 137 if it needed SIGKILL (GNU timeout's codes)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    argv = simple_argv(command, env)
    proc = None
    if argv is not None:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
        except OSError:
            proc = None  # not executable, missing, no #! line: bash says so in its own words
    try:
        if proc is None:
            proc = subprocess.Popen([bash, "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
    except OSError as exc:
        return b"", ("preflight runner: cannot start bash: %s\n" % exc).encode(), 127, 0
    with _live_lock:
        _live.add(proc.pid)
    kept = {proc.stdout: [], proc.stderr: []}
    size = {proc.stdout: 0, proc.stderr: 0}
    timed_out = killed = False
    sel = selectors.DefaultSelector()
    try:
        for f in kept:
            sel.register(f, selectors.EVENT_READ)
        # Read until both streams end, are full, or the deadline passes (a background child
        # holding a pipe open cannot keep the runner past it).
        exited = leftovers_killed = False
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                if exited and not leftovers_killed:
                    # The command is done, but something it started still holds a pipe (``daemon &``):
                    # that goes with the command's group now, as the bash runner's EXIT trap does,
                    # and what is left in the pipes is read.  One that left the group (setsid) is
                    # not waited for: one per NPU would add up past the host's deadline.
                    _kill_group(proc.pid, signal.SIGKILL)
                    leftovers_killed = True
                    deadline = time.monotonic() + 0.2
                    continue
                timed_out = proc.poll() is None
                break
            if not exited and proc.poll() is not None:
                exited = True
                # A helper finishing its output (``> >(cat)``) has a moment; a daemon not the timeout.
                deadline = min(deadline, time.monotonic() + DRAIN_SECONDS)
                left = deadline - time.monotonic()
            for key, _ in sel.select(max(min(left, 0.2), 0)):
                f = key.fileobj
                chunk = os.read(f.fileno(), 65536)
                if chunk:
                    room = read - size[f]
                    kept[f].append(chunk[:room])
                    size[f] += min(len(chunk), room)
                if not chunk or size[f] >= read:
                    sel.unregister(f)
                    f.close()
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                killed = True
                _kill_group(proc.pid, signal.SIGKILL)
                _reap(proc)
        # Children left behind by a command that finished (``cmd &``) go with its group.
        _kill_group(proc.pid, signal.SIGKILL)
    finally:
        sel.close()
        for f in kept:
            if not f.closed:
                f.close()
        if proc.returncode is None and not killed:  # a killed one was given its REAP_SECONDS already
            _kill_group(proc.pid, signal.SIGKILL)
            _reap(proc)
        with _live_lock:
            _live.discard(proc.pid)
    rc = proc.returncode
    if killed or rc is None:
        rc = 137
    elif timed_out:
        rc = 124
    elif rc < 0:
        rc = 128 - rc  # killed by a signal, as a shell reports it
    ms = int((time.monotonic() - t0) * 1000)
    return b"".join(kept[proc.stdout]), b"".join(kept[proc.stderr]), rc, ms


class Group:
    """Commands that run one after another; ``out`` (a stream, or a list that buffers) gets their records.
    Groups run side by side, all streaming: each command's records are written whole as it ends
    (an ``I`` line says it started), so records of groups never interleave within a command, and
    what a group finished survives a hang in another or the host's deadline."""

    def __init__(self, commands, out, lock=None):
        self.commands, self.out = commands, out
        self.lock = lock or threading.Lock()  # one per stream: every group writing to it shares it

    def run(self, ctx):
        try:
            self._run(ctx)
        except Exception as exc:  # noqa: BLE001 - the script then runs the bash runner instead
            ctx.failed.append("%s: %s" % (type(exc).__name__, exc))

    def _run(self, ctx):
        if len(ctx.devs) > 1 and self.commands and all(c[3] for c in self.commands):
            self._run_lanes(ctx)
            return
        for name, tool, command, per_device in self.commands:
            for dev in (ctx.devs if per_device else [None]):
                self.call(ctx, name, tool, command, dev)

    def _run_lanes(self, ctx):
        # One tool's calls for every NPU (hccn_tool's link, tls, ip, ... on each): one lane per NPU,
        # the calls about one NPU in order, NPUs side by side (as Ascend's own checkers query them:
        # one call per NPU at a time, NPUs in parallel).  Eight NPUs at ~6 calls each then take
        # the time of 6 calls, not 48.  The first call runs alone: a tool that hangs on every NPU
        # (a wedged driver) costs one timeout and leaves one stuck process, as in the bash runner;
        # once it has answered, a call that hangs stops only the lane of its own NPU.
        lanes = [Group(self.commands, []) for _ in ctx.devs]
        streaming = not isinstance(self.out, list)

        def flush(i):
            # A group that streams passes each command's records on whole as it ends (they survive
            # a later hang or the host deadline), never two commands' records interleaved.
            if streaming:
                with self.lock:
                    data, lanes[i].out[:] = b"".join(lanes[i].out), []
                    _write(self.out, data)

        def started(i, name):
            # ... and says which call is running as it starts, on a line of its own ("I": in flight,
            # it does not open a record), so that a call the host deadline cuts off reads "did not
            # finish before the host's deadline", not "was not gathered".
            if streaming:
                self.write(b"%s I %s/%s\n" % (ctx.nonce, name.encode(), str(ctx.devs[i]).encode()))

        name, tool, command, _ = self.commands[0]
        started(0, name)
        lanes[0].call(ctx, name, tool, command, ctx.devs[0])
        flush(0)
        room = threading.BoundedSemaphore(MAX_LANES)

        def lane(i):
            try:
                with room:
                    for j, (name, tool, command, _) in enumerate(self.commands):
                        if i or j:
                            started(i, name)
                            lanes[i].call(ctx, name, tool, command, ctx.devs[i], lane=True)
                            flush(i)
            except Exception as exc:  # noqa: BLE001 - reported as Group.run reports it
                ctx.failed.append("%s: %s" % (type(exc).__name__, exc))

        threads = [threading.Thread(target=lane, args=(i,), daemon=True) for i in range(len(lanes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.write(b"".join(b"".join(l.out) for l in lanes))

    def call(self, ctx, name, tool, command, dev, lane=False):
        """Run one command (with ``PF_DEV`` set when ``dev`` is given) and write its records.
        ``lane``: a hang stops the later calls about this NPU only, not the tool's on every NPU."""
        env = ctx.env if dev is None else dict(ctx.env, PF_DEV=dev)
        name_here = name if dev is None else "%s/%s" % (name, dev)
        tool = tool or name
        self.one(ctx, name_here, tool, command, env, (tool, dev) if lane else tool)

    def one(self, ctx, name, tool, command, env, breaker=None):
        nonce = ctx.nonce
        breaker = tool if breaker is None else breaker
        why = ctx.hung.get(tool) or ctx.hung.get(breaker) or ctx.hung.get(("query", name.split("/")[0]))
        if why:
            self.write(b"%s S %s %s\n" % (nonce, name.encode(), why.encode()))
            return
        if not isinstance(self.out, list):  # in flight: its records come whole when it ends
            self.write(b"%s I %s\n" % (nonce, name.encode()))
        if command.startswith(C_LOCALE):
            # The same locale through the environment: the command stays a simple one that
            # starts without a shell (simple_argv).
            command = command[len(C_LOCALE):]
            env = dict(env, LC_ALL="C", PYTHONIOENCODING="utf-8")
            env.pop("LANGUAGE", None)
        out, err, rc, ms = run_command(ctx.bash, command, env, ctx.timeout, ctx.read)
        # A long output (every inventory name resolved, a big npu-smi table) goes deflated: at 1000
        # hosts that is a fifth of the bytes to send, and of what the controller holds while reading.
        kind, body = (b"Z", zlib.compress(out, 1)) if len(out) > COMPRESS_FROM else (b"O", out)
        self.write(b"%s B %s\n%s %s %s\n%s R %d %d\n%s E %s\n" % (
            nonce, name.encode(), nonce, kind, base64.b64encode(body), nonce, rc, ms, nonce, base64.b64encode(err)))
        # One hung tool costs one timeout, not one per NPU: later calls of it are skipped.
        if rc in (124, 137) and ms >= ctx.timeout * 1000 - 500:
            ctx.hung[breaker] = "%s timed out earlier on this host (%s)" % (tool, name)
        # One sudo refusal is the answer for every call of the tool: each more is one more entry
        # (and a mail to root) in the node's auth log.
        elif rc != 0 and SUDO_REFUSED.search(err.decode("utf-8", "replace")):
            # No password or no sudoers entry refuses every call; a rule that allows some of the
            # tool's queries ("is not allowed to execute '... -tls -g'") refuses only that one.
            # A rule for some other arguments refuses that one query; two queries refused, the tool
            # has no rule at all ("is not allowed to execute" says both): its later calls are spared.
            words = err.decode("utf-8", "replace")
            query = name.split("/")[0]
            why = "sudo -n refused %s earlier on this host (%s)" % (tool, name)
            refused = ctx.refused.setdefault(tool, set())
            refused.add(query)
            ctx.hung[("query", query)] = why
            if "is not allowed to" not in words or len(refused) > 1:
                ctx.hung[tool] = why

    def write(self, data):
        if isinstance(self.out, list):
            self.out.append(data)
            return
        with self.lock:
            _write(self.out, data)


class Context:
    def __init__(self, nonce, read, timeout, devs, bash):
        self.nonce, self.read, self.timeout, self.devs, self.bash = nonce, read, timeout, devs, bash
        self.env = dict(os.environ)
        self.hung = {}
        self.refused = {}  # tool -> the queries sudo refused
        self.failed = []


def _watch_channel(fd):
    """Stop when the SSH channel is gone, not at the next write: sshd sends a session without a
    terminal no SIGHUP, and a group whose command hangs writes nothing for a long while (on a wedged
    driver, dozens more hccn_tool calls after the controller gave up).  A pipe whose reader closed
    polls as POLLERR, a socket as POLLHUP."""
    try:
        poller = select.poll()
        poller.register(fd, 0)  # errors and hang-ups are reported whatever the mask
    except (AttributeError, OSError, ValueError):
        return
    while True:
        for _, events in poller.poll(1000):
            if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                _stop(signal.SIGPIPE, None)


def main(argv):
    if sys.version_info < (3, 6):
        return 3  # the script falls back to the bash runner
    nonce, read, timeout, plan, devs, bash = argv[1:7]
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    ctx = Context(nonce.encode(), int(read), int(timeout), devs.split(), bash)
    threading.Thread(target=_watch_channel, args=(sys.stdout.fileno(),), daemon=True).start()
    groups = json.loads(plan)
    out = sys.stdout.buffer
    # Every group streams its records as its commands end, side by side (see Group): npu-smi's
    # answer is not held back behind a slow login shell in another group.
    lock = threading.Lock()
    runs = [Group(g, out, lock) for g in groups]
    threads = [threading.Thread(target=g.run, args=(ctx,), daemon=True) for g in runs[1:]]
    for t in threads:
        t.start()
    if runs:
        runs[0].run(ctx)
    for t in threads:
        t.join()
    if ctx.failed:
        sys.stderr.write("preflight runner failed (%s); running the bash runner\n" % "; ".join(ctx.failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
