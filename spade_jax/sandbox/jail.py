"""Operating-system isolation primitives, used inside worker processes.

Standard library and ctypes only: the worker ships this file's source into a fresh
`python -I -S` interpreter, where the package is not importable. Everything here acts on
the calling process: namespaces (`unshare`), a minimal root filesystem (`build_root`,
then `pivot_root`), resource limits, privilege drop, parent-death signal and a seccomp
BPF filter that denies process creation, sockets, kernel-administration calls and every
call that acts on another process (signals, ptrace, pidfds, scheduling, limits, memory).
"""

import ctypes
import os
import platform
import resource
import struct
from typing import NamedTuple

CLONE = {"mount": 0x00020000, "uts": 0x04000000, "ipc": 0x08000000, "user": 0x10000000,
         "pid": 0x20000000, "net": 0x40000000}
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22
PR_CAPBSET_DROP = 24
SA_NOCLDSTOP = 1
CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN = 5, 6, 7, 21
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin")
DEVICES = ("null", "zero", "random", "urandom")


class Arch(NamedTuple):
  """One machine's seccomp numbers: its AUDIT_ARCH, and the syscalls the filter acts on."""

  audit: int
  pivot_root: int
  denied: tuple  # process creation, sockets, signals, mounts, kernel administration
  other_process: tuple  # calls that act on another process by pid or pidfd (see below)
  fcntl: int  # denied for F_SETOWN, F_SETSIG, F_SETOWN_EX only
  prlimit64: int  # denied unless its pid is 0 (the caller itself)


# `other_process`: signals with a payload, pidfds, scheduling, I/O priority, memory
# placement and advice, comparing kernel objects. Under one uid (user-namespace mode) the
# kernel lets every episode do these to its siblings; ptrace and process_vm_* are in
# `denied`. fcntl(F_SETOWN) + F_SETSIG would let I/O on an episode's pipe signal another
# process, and prlimit64 can change another process's limits.
_ARCH = {
    "x86_64": Arch(0xC000003E, 155, (
        56, 57, 58, 435, 59, 322,  # clone fork vfork clone3 execve execveat
        41, 53, 62, 200, 234,  # socket socketpair kill tkill tgkill
        101, 310, 311,  # ptrace process_vm_readv/writev
        165, 166, 155, 272, 308, 161,  # mount umount2 pivot_root unshare setns chroot
        321, 298, 250, 248, 249, 323, 425, 426, 427,  # bpf perf keyctl keys userfaultfd io_uring
        246, 175, 313, 176, 169, 167, 168, 103, 163,  # kexec modules reboot swap syslog acct
        164, 227, 170, 171, 172, 173, 179, 303, 304, 133, 259),  # clocks names io quota mknod
        (129, 297,  # rt_sigqueueinfo rt_tgsigqueueinfo
         424, 434, 438,  # pidfd_send_signal pidfd_open pidfd_getfd
         141, 142, 144, 203, 314,  # setpriority sched_setparam/setscheduler/setaffinity/setattr
         251, 256, 279, 274,  # ioprio_set migrate_pages move_pages get_robust_list
         440, 448, 312),  # process_madvise process_mrelease kcmp
        72, 302),  # fcntl prlimit64
    "aarch64": Arch(0xC00000B7, 41, (
        220, 435, 221, 281, 198, 199, 129, 130, 131, 117, 270, 271,
        40, 39, 41, 97, 268, 51, 280, 241, 219, 217, 218, 282, 425, 426, 427,
        104, 105, 273, 106, 142, 224, 225, 116, 89, 170, 112, 161, 162, 60, 264, 265, 33),
        (138, 240, 424, 434, 438, 140, 118, 119, 122, 274, 30, 238, 239, 100, 440, 448, 272),
        25, 261),
}
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15

_libc = ctypes.CDLL(None, use_errno=True)


class JailError(OSError):
  """A layer could not be set up; the message names the call."""


def _check(result: int, what: str) -> None:
  if result != 0:
    errno = ctypes.get_errno()
    raise JailError(errno, f"{what}: {os.strerror(errno)}")


def unshare(names) -> None:
  flags = 0
  for name in names:
    flags |= CLONE[name]
  _check(_libc.unshare(flags), f"unshare({'+'.join(names)})")


def map_user(uid: int, gid: int) -> None:
  """Maps root inside a fresh user namespace onto the caller's own uid and gid."""
  with open("/proc/self/setgroups", "w") as f:
    f.write("deny")
  with open("/proc/self/uid_map", "w") as f:
    f.write(f"0 {uid} 1")
  with open("/proc/self/gid_map", "w") as f:
    f.write(f"0 {gid} 1")


def mount(source, target, fstype, flags, data=None) -> None:
  enc = lambda s: None if s is None else s.encode()
  _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
         f"mount({source} -> {target})")


def bind_readonly(source: str, target: str) -> None:
  mount(source, target, None, MS_BIND | MS_REC)
  locked = os.statvfs(source).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
  mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | locked)


def _mountpoint_for(sources) -> str:
  """An existing directory, not above any bind source, to hold the new root."""
  for candidate in ("/mnt", "/media", "/srv", "/tmp", "/run"):
    if os.path.isdir(candidate) and not any(
        (s + "/").startswith(candidate + "/") for s in sources):
      return candidate
  raise JailError(0, "no directory to mount the new root on")


def build_root(extra_dirs, tmp_mb: int) -> None:
  """pivot_root into a tmpfs holding read-only system dirs, /dev basics, /proc, /tmp.

  Must run inside fresh mount and PID namespaces. Afterwards nothing of the host's files
  is visible except read-only `SYSTEM_DIRS` and `extra_dirs` (the interpreter prefix).
  """
  binds = [d for d in SYSTEM_DIRS if os.path.lexists(d)]
  binds += [d for d in extra_dirs if not any((d + "/").startswith(b + "/") for b in binds)]
  root = _mountpoint_for([os.path.realpath(b) for b in binds])
  mount(None, "/", None, MS_REC | MS_PRIVATE)
  mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
  for path in binds:
    target = root + path
    if os.path.islink(path):
      os.symlink(os.readlink(path), target)
      continue
    os.makedirs(target, exist_ok=True)
    bind_readonly(path, target)
  os.makedirs(root + "/dev")
  for name in DEVICES:
    open(f"{root}/dev/{name}", "w").close()
    mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
  os.makedirs(root + "/proc")
  mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
  os.makedirs(root + "/tmp")
  mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
        f"size={tmp_mb}m,mode=1777")
  os.makedirs(root + "/.old")
  pivot_nr = _ARCH[platform.machine()].pivot_root if seccomp_supported() else -1
  _check(_libc.syscall(pivot_nr, root.encode(), (root + "/.old").encode()), "pivot_root")
  os.chdir("/")
  _check(_libc.umount2(b"/.old", 2), "umount(/.old)")
  os.rmdir("/.old")
  mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def private_mounts(tmp_mb: int) -> None:
  """Gives the caller its own mount and IPC namespaces, a fresh, empty tmpfs on /tmp and a
  /proc that shows only the processes it can ptrace (hidepid=4, Linux 5.8+), so not its
  sibling episodes, whose /proc files (oom_score_adj, clear_refs, fd) it would own under
  one uid, nor the zygote. (hidepid=2 would show them all to members of group 0.)"""
  unshare(["mount", "ipc"])
  mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={tmp_mb}m,mode=1777")
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=4")
  os.chdir("/tmp")


def set_limits(memory_mb: int, cpu_s: int, fsize_mb: int, nofile: int, nproc: int) -> None:
  for name, value in (("RLIMIT_AS", memory_mb << 20), ("RLIMIT_CPU", cpu_s),
                      ("RLIMIT_FSIZE", fsize_mb << 20), ("RLIMIT_NOFILE", nofile),
                      ("RLIMIT_NPROC", nproc), ("RLIMIT_CORE", 0)):
    resource.setrlimit(getattr(resource, name), (value, value))


def die_with_parent(parent_pid: int) -> None:
  """SIGKILL when the parent dies; exits at once if it already has (0: PID-namespace init)."""
  _check(_libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "prctl(PDEATHSIG)")
  if os.getppid() != parent_pid:
    os._exit(1)


def drop_privileges(uid: int, gid: int) -> None:
  """Becomes uid/gid with no supplementary groups and no capabilities; not dumpable."""
  os.setgroups([])
  os.setresgid(gid, gid, gid)
  os.setresuid(uid, uid, uid)
  undumpable()


def keep_capabilities(caps) -> None:
  """Shrinks the bounding, effective, permitted and inheritable sets to `caps`."""
  for cap in range(64):
    if cap not in caps and _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
      break  # EINVAL: past the kernel's last capability
  mask = sum(1 << c for c in caps)
  header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
  low, high = mask & 0xFFFFFFFF, mask >> 32
  data = (ctypes.c_uint32 * 6)(low, low, 0, high, high, 0)
  _check(_libc.capset(header, data), "capset")
  _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


class _Sigaction(ctypes.Structure):
  """glibc's struct sigaction on 64-bit Linux (x86_64 and aarch64 share its layout)."""

  _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
              ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


def no_stop_notices(signum: int) -> None:
  """Adds SA_NOCLDSTOP to the installed action for `signum` (SIGCHLD): children that stop
  or continue then send nothing, so the host stopping episodes between calls does not
  wake their zygote twice a call; only exits do."""
  action = _Sigaction()
  _check(_libc.sigaction(signum, None, ctypes.byref(action)), "sigaction(read)")
  action.flags |= SA_NOCLDSTOP
  _check(_libc.sigaction(signum, ctypes.byref(action), None), "sigaction(SA_NOCLDSTOP)")


def undumpable() -> None:
  """Forbids ptrace and /proc memory access by other processes of the same uid."""
  _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")


def seccomp_supported() -> bool:
  return platform.machine() in _ARCH


_LD, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JGE, BPF_RET
_ALLOW, _KILL, _EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | 1
_NR, _ARCH_FIELD, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in seccomp_data (low words of args)


def seccomp_program(arch: Arch) -> list[tuple[int, int, int, int]]:
  """The BPF program: (code, jump if true, jump if false, constant) per instruction.

  Arguments are compared by their low 32 bits: the pid of prlimit64 and the command of
  fcntl are C ints, which the kernel reads from those bits alone.
  """
  prog = [(_LD, 0, 0, _ARCH_FIELD), (_JEQ, 1, 0, arch.audit), (_RET, 0, 0, _KILL),
          (_LD, 0, 0, _NR)]
  if arch.audit == _ARCH["x86_64"].audit:
    prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _KILL)]  # the x32 ABI
  for nr in sorted(set(arch.denied + arch.other_process)):
    prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _EPERM)]
  prog += [(_JEQ, 0, 6, arch.fcntl), (_LD, 0, 0, _ARG1),
           (_JEQ, 2, 0, F_SETOWN), (_JEQ, 1, 0, F_SETSIG), (_JEQ, 0, 1, F_SETOWN_EX),
           (_RET, 0, 0, _EPERM), (_RET, 0, 0, _ALLOW)]
  prog += [(_JEQ, 0, 4, arch.prlimit64), (_LD, 0, 0, _ARG0), (_JEQ, 1, 0, 0),
           (_RET, 0, 0, _EPERM), (_RET, 0, 0, _ALLOW)]
  prog.append((_RET, 0, 0, _ALLOW))
  return prog


def install_seccomp() -> None:
  """Installs the filter of `_ARCH`: EPERM for its calls; a foreign architecture is killed."""
  raw = b"".join(struct.pack("HBBI", *ins) for ins in seccomp_program(_ARCH[platform.machine()]))
  buf = ctypes.create_string_buffer(raw)

  class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

  fprog = Fprog(len(raw) // 8, ctypes.addressof(buf))
  _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
  _check(_libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0), "prctl(SECCOMP)")
