"""The OS layers that leave a worker able to do nothing but compute, even if arbitrary code runs
in it: Landlock (writes only in its own scratch folder; no signal to, ptrace of or /proc read of
a process outside its domain), another user id (root judges on the CPU path), a seccomp filter
(no tracing, no other process's memory or descriptors, no namespaces, mounts, keys or modules;
kill only itself), and no bytecode read from anywhere a kernel file sits.

Each layer is named in LAYERS, switchable by the judge (`--layers`), and returns True or the
reason it did not hold; `strict` (the CPU path) turns any enabled layer that did not hold into a
refusal to run. Landlock and seccomp come through maintained bindings from PyPI (landlockpy,
pyseccomp); without them the layer reports why. Leaf module (stdlib; bindings imported lazily).
"""
from __future__ import annotations

import errno
import os
import sys

PACKAGE = os.path.dirname(os.path.abspath(__file__))   # the checker package: read, never written
LAYERS = ("landlock", "proc", "uid", "seccomp", "own_cache", "no_bytecode")
# Writable device files a computing process needs (and every /dev/nvidia*, where they exist).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/nvidiactl", "/dev/nvidia-uvm",
           "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia-caps")
# System calls a kernel never needs: tracing and other processes' memory or descriptors,
# namespaces and mounts, keys, modules, clocks, identities, io_uring (which bypasses seccomp).
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "pidfd_send_signal",
    "kcmp", "tkill", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount",
    "open_tree", "fsopen", "fsmount", "fspick", "bpf", "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "iopl", "ioperm", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_by_handle_at", "name_to_handle_at", "quotactl", "syslog", "vhangup", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid",
    "setfsgid", "capset", "fanotify_init", "lookup_dcookie", "migrate_pages", "move_pages")
# Signals: only to itself (kill and rt_sigqueueinfo by pid, tgkill by thread group).
SELF_SIGNAL_SYSCALLS = (("kill", 0), ("rt_sigqueueinfo", 0), ("tgkill", 0), ("rt_tgsigqueueinfo", 0))


def parse_layers(text: str | None) -> set[str]:
    """`--layers` text: 'all', 'none' or a comma list of LAYERS; ValueError names a bad word."""
    words = [w.strip() for w in (text or "all").split(",") if w.strip()]
    if words == ["all"]:
        return set(LAYERS)
    if words == ["none"]:
        return set()
    bad = [w for w in words if w not in LAYERS]
    if bad:
        raise ValueError(f"unknown containment layer(s) {', '.join(bad)} (known: {', '.join(LAYERS)})")
    return set(words)


def unreadable_by_others(paths) -> str | None:
    """The first of `paths` (or a folder above it) that a process of another user id could not
    read or pass through, or None. A worker under its own id imports from all of them."""
    import stat
    for path in paths:
        if not path or not os.path.exists(path):
            continue
        p = os.path.realpath(path)
        parts = p.split(os.sep)
        for i in range(2, len(parts) + 1):
            q = os.sep.join(parts[:i]) or os.sep
            try:
                mode = os.stat(q).st_mode
            except OSError:
                return q
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0) if q == p else \
                stat.S_IXOTH
            if mode & need != need:
                return q
    return None


def import_paths() -> list:
    """Where a worker imports from: the standard library, site-packages, Triton."""
    import importlib.util
    import sysconfig
    paths = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    try:
        spec = importlib.util.find_spec("triton")
        paths.append(spec and spec.origin)
    except (ImportError, ValueError):
        pass
    return paths


def plan(interpret: bool, euid: int, layers_text: str | None, mode: str | None,
         unreadable: str | None = None) -> dict:
    """Which layers a judge asks of its workers, and whether strictly (a pure decision).

    `layers_text` (KERNLOOP_CONTAIN_LAYERS or --layers; default all) and `mode` ('strict' or
    'best-effort'; default strict on the CPU path, best-effort on the GPU, where the judge
    reports what held). Another user id is left out on the GPU unless named (CUDA IPC fails
    across user ids and user namespaces: benchmarks/results/session5), for a judge that is not root (it
    cannot give one) and where Python, the checker or a kernel file sits where another user
    cannot read (`unreadable`: e.g. a Python under /root); each choice is recorded with its reason."""
    layers = parse_layers(layers_text)
    named = layers_text is not None and "uid" in parse_layers(layers_text) and layers_text.strip() != "all"
    notes = {k: "off (not asked)" for k in LAYERS if k not in layers}
    if "uid" in layers and not interpret and not named:
        layers.discard("uid")
        notes["uid"] = "off on the GPU: CUDA IPC fails across user ids (name it in --layers to try)"
    if "uid" in layers and euid != 0:
        layers.discard("uid")
        notes["uid"] = "skipped: the judge is not root (Landlock's scopes keep signals and ptrace in)"
    if "uid" in layers and unreadable:
        layers.discard("uid")
        notes["uid"] = f"skipped: {unreadable} cannot be read by another user id (Landlock's " \
                       f"scopes keep signals and ptrace in)"
    if mode not in (None, "strict", "best-effort"):
        raise ValueError(f"containment mode must be strict or best-effort, got {mode!r}")
    strict = (mode or ("strict" if interpret else "best-effort")) == "strict"
    return {"layers": sorted(layers), "strict": strict, "notes": notes}


def _ll():
    import landlockpy
    return landlockpy


def landlock(scratch: str, proc_scope: bool, extra_rw: tuple = (), jobs: str | None = None) -> object:
    """Enforce a Landlock domain on this (still single-threaded) process and everything it
    starts: every file-system right handled; read and execute everywhere but /proc and the job
    folders (`jobs`: its own; see _read_rules), the checker package (PACKAGE) always readable
    (a worker imports its own modules after the lock) and never writable (a `scratch` inside
    it is refused); in /proc only its own entry and the non-process files; writes only beneath
    `scratch` (and the device files above, `extra_rw`); no signal to and no abstract socket of a
    process outside the domain (ABI 6+). Returns True, or why not."""
    try:
        ll = _ll()
        abi = ll.abi_version()
    except Exception as e:   # noqa: BLE001 - no binding, not Linux
        return f"unavailable: {type(e).__name__}: {e}"
    if abi < 1:
        return "unavailable: the kernel has no Landlock (ABI 0)"
    if (os.path.realpath(scratch) + os.sep).startswith(os.path.realpath(PACKAGE) + os.sep):
        return f"failed: the scratch folder {scratch} is inside the checker package"
    try:
        rs = ll.Ruleset(handled_fs=ll.fs_for_abi(abi), handled_net=ll.AccessNet.NONE,
                        scoped=ll.scope_for_abi(abi))
        with rs:
            _read_rules(ll, rs, proc_scope, jobs)
            import glob
            for path in (scratch, *DEVICES, *sorted(glob.glob("/dev/nvidia*")), *extra_rw):
                if os.path.exists(path):
                    _allow(ll, rs, path, ll.fs_for_abi(abi))
            rs.restrict(ll.RestrictFlag.TSYNC)   # every thread where the ABI has it (8+)
    except Exception as e:   # noqa: BLE001 - reported; strict mode refuses to go on
        return f"failed: {type(e).__name__}: {e}"
    missing = [s for s in ("SIGNAL",) if not (rs.scoped & getattr(ll.Scope, s))]
    return True if not missing else f"partial: ABI {abi} scopes no {', '.join(missing)}"


def _allow(ll, rs, path: str, access) -> None:
    """A rule on a file takes only file rights (Landlock refuses directory rights there)."""
    if not os.path.isdir(path):
        access &= (ll.AccessFS.EXECUTE | ll.AccessFS.WRITE_FILE | ll.AccessFS.READ_FILE
                   | ll.AccessFS.TRUNCATE | ll.AccessFS.IOCTL_DEV)
    rs.allow_path(path, access)


def _read_rules(ll, rs, proc_scope: bool, jobs: str | None) -> None:
    """Read and execute everywhere except: other processes' /proc entries (`proc_scope`), and
    the jobs' scratch folders beside its own (`jobs`: its job folder; every sibling named like
    it is left out, and so every other worker's arena, cache and files)."""
    read = ll.AccessFS.READ_FILE | ll.AccessFS.READ_DIR | ll.AccessFS.EXECUTE
    hidden = {"/proc"} if proc_scope else set()
    chain = []   # the folders from / down to the jobs' parent: opened entry by entry
    if jobs:
        parts = os.path.realpath(jobs).split(os.sep)[1:]
        chain = [os.sep + os.sep.join(parts[:i]) for i in range(len(parts))]
        hidden |= {os.sep + os.sep.join(parts[:i + 1]) for i in range(len(parts) - 1)}
    prefix = os.path.basename(os.path.realpath(jobs)).rsplit("-", 1)[0] + "-" if jobs else None
    for folder in chain or ["/"]:
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if path in hidden or (folder == (chain or ["/"])[-1] and prefix and name.startswith(prefix)):
                continue
            try:
                _allow(ll, rs, path, read)
            except OSError:   # a dangling entry: nothing to read there
                pass
    _allow(ll, rs, PACKAGE, read)   # its own modules, wherever the job folder hides its parents
    if not proc_scope or not os.path.isdir("/proc"):
        return
    rs.allow_path("/proc", ll.AccessFS.READ_DIR)   # listing pids reveals nothing
    for name in os.listdir("/proc"):
        if name.isdigit() and name != str(os.getpid()):
            continue   # another process: environ, mem, cmdline, fd, maps stay closed
        try:
            _allow(ll, rs, "/proc/" + name, read)
        except OSError:
            pass


def change_uid(uid: int) -> object:
    """Become `uid` (group the same) with no supplementary groups. glibc applies it to every
    thread; a root process loses all capabilities with it. Only for a root worker given an id."""
    if uid is None or uid < 0:
        return "off"
    if os.geteuid() != 0:
        return "unavailable: the worker is not root"
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as e:
        return f"failed: {e}"
    return True if os.getuid() == uid and os.geteuid() == uid else f"failed: uid is {os.getuid()}"


def seccomp_filter() -> object:
    """Deny DENIED_SYSCALLS (EPERM), signals to any process but itself, and clone3 (ENOSYS:
    glibc falls back to clone, whose flags a filter can read), on every thread (TSYNC)."""
    try:
        import pyseccomp as sc
    except Exception as e:   # noqa: BLE001 - no binding or no libseccomp
        return f"unavailable: {type(e).__name__}: {e}"
    try:
        f = sc.SyscallFilter(sc.ALLOW)
        f.set_attr(sc.Attr.CTL_TSYNC, 1)
        skipped = []
        for name in DENIED_SYSCALLS:
            try:
                f.add_rule(sc.ERRNO(errno.EPERM), name)
            except (OSError, ValueError, RuntimeError):
                skipped.append(name)   # not a system call on this architecture
        me = os.getpid()
        for name, arg in SELF_SIGNAL_SYSCALLS:
            f.add_rule(sc.ERRNO(errno.EPERM), name, sc.Arg(arg, sc.NE, me))
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for bit in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000, 0x02000000):
            # CLONE_NEWUSER, NEWPID, NEWNET, NEWNS, NEWIPC, NEWUTS, NEWCGROUP
            f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
        f.load()
    except Exception as e:   # noqa: BLE001 - reported
        return f"failed: {type(e).__name__}: {e}"
    return True


def no_bytecode(scratch: str) -> object:
    """From here on no .pyc is read or written: a bytecode file planted beside a kernel file (or
    anywhere on sys.path) is never loaded in place of the source the judge checked."""
    sys.dont_write_bytecode = True
    sys.pycache_prefix = os.path.join(scratch, "no-bytecode")   # an empty place, never written
    return True


def check_held(rec: dict, enabled: set[str], strict: bool) -> str | None:
    """In strict mode, why the worker must refuse: an enabled layer that did not hold."""
    if not strict:
        return None
    bad = [f"{k}: {rec.get(k)}" for k in sorted(enabled) if rec.get(k) is not True]
    return "containment did not hold (" + "; ".join(bad) + ")" if bad else None
