/* flameprof._inject: queue a Python string in a live CPython process through ptrace, leaving every
 * thread of it as it was.
 *
 * Only the one thread named by the caller is stopped (PTRACE_SEIZE + PTRACE_INTERRUPT: no signal is
 * sent, so neither the process nor its parent sees a stop). While it is stopped its whole register
 * state is saved as the kernel reports it: the general registers and the complete XSAVE area at the
 * size the kernel gives (AMX tiles included; a debugger that writes back a buffer of its own size is
 * refused with EFAULT on such CPUs). The thread then makes a few calls in the process (errno's
 * address, Py_IsInitialized, mmap, Py_AddPendingCall), each returning to address 0, where the fault
 * hands control back here before any signal reaches the program. Last, the saved state is written
 * back and read again to check it, and the thread is let go from a signal-delivery stop, so that the
 * kernel restarts the system call it was blocked in exactly as after any signal without a handler.
 * A call that was cut short by the stop with EINTR (epoll_wait and the like, which the kernel never
 * restarts) is restarted here instead, when no signal of the program's own is pending. Signals that
 * arrive for the thread meanwhile are held back and delivered when it is let go.
 *
 * Every failure, at every step, goes through the same restore: the thread is always let go with its
 * saved state. The caller runs this in a process of its own (see ptrace_injector.py), so that no
 * signal aimed at flameprof can stop it half way.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__linux__) && defined(__x86_64__)
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PTRACE_SEIZE
#define PTRACE_SEIZE 0x4206
#endif
#ifndef PTRACE_INTERRUPT
#define PTRACE_INTERRUPT 0x4207
#endif
#ifndef PTRACE_EVENT_STOP
#define PTRACE_EVENT_STOP 128
#endif
#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif

#define XSTATE_MAX (64 * 1024) /* larger than any XSAVE area (AMX: about 11 KiB) */
#define MAX_HELD 8             /* signals held back while the thread is borrowed */
#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516

/* Steps after which a test may force a failure (fail_at): the restore must leave the thread as it
 * was from each of them. */
enum step {
    STEP_NONE = 0,
    STEP_STOPPED,
    STEP_SAVED,
    STEP_ERRNO,
    STEP_INITIALIZED,
    STEP_MAPPED,
    STEP_WRITTEN,
    STEP_QUEUED,
    STEP_LAST
};

struct borrowed {
    pid_t pid, tid;
    struct user_regs_struct regs; /* as stopped */
    unsigned char *xstate;        /* XSAVE area (or FXSAVE when the kernel has no XSTATE regset) */
    size_t xstate_len;
    int xstate_note;
    int at_signal_stop; /* the last stop was a signal-delivery stop (the return fault) */
    int held[MAX_HELD];
    int nheld;
    int restart_eintr; /* the stop cut a system call short with EINTR: run it again */
    double deadline;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pause_briefly(void) {
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

/* waitpid for the borrowed thread until the deadline: 1 when it stopped (status set), 0 on time
 * out, -1 when it is gone. */
static int wait_stop(struct borrowed *b, int *status, double deadline) {
    for (;;) {
        pid_t got = waitpid(b->tid, status, __WALL | WNOHANG);
        if (got == b->tid) {
            if (WIFSTOPPED(*status)) return 1;
            return -1; /* exited or killed */
        }
        if (got < 0 && errno != EINTR) return -1;
        if (now() >= deadline) return 0;
        pause_briefly();
    }
}

static void hold_signal(struct borrowed *b, int sig) {
    for (int i = 0; i < b->nheld; i++)
        if (b->held[i] == sig && sig < SIGRTMIN) return; /* standard signals do not queue */
    if (b->nheld < MAX_HELD) b->held[b->nheld++] = sig;
}

static int get_xstate(pid_t tid, unsigned char *buf, size_t *len, int *note) {
    struct iovec iov = {buf, XSTATE_MAX};
    if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &iov) == 0) {
        *len = iov.iov_len;
        *note = NT_X86_XSTATE;
        return 0;
    }
    iov.iov_len = XSTATE_MAX;
    if (ptrace(PTRACE_GETREGSET, tid, (void *)NT_PRFPREG, &iov) == 0) {
        *len = iov.iov_len;
        *note = NT_PRFPREG;
        return 0;
    }
    return -1;
}

/* Whether the thread or its process has a signal pending that it does not block: then a system
 * call it was in would have ended with EINTR anyway, and is not restarted here. */
static int signal_pending(pid_t pid, pid_t tid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
    FILE *fh = fopen(path, "r");
    if (!fh) return 1; /* unknown: leave the call alone */
    unsigned long long pending = 0, blocked = 0, value;
    while (fgets(line, sizeof line, fh)) {
        if (sscanf(line, "SigPnd: %llx", &value) == 1 || sscanf(line, "ShdPnd: %llx", &value) == 1)
            pending |= value;
        else if (sscanf(line, "SigBlk: %llx", &value) == 1)
            blocked = value;
    }
    fclose(fh);
    return (pending & ~blocked) != 0;
}

static int peek_bytes(pid_t tid, unsigned long addr, unsigned char *out, size_t n) {
    for (size_t done = 0; done < n; done += sizeof(long)) {
        errno = 0;
        long word = ptrace(PTRACE_PEEKDATA, tid, (void *)(addr + done), NULL);
        if (errno) return -1;
        size_t take = n - done < sizeof(long) ? n - done : sizeof(long);
        memcpy(out + done, &word, take);
    }
    return 0;
}

static int poke_bytes(pid_t tid, unsigned long addr, const unsigned char *data, size_t n) {
    for (size_t done = 0; done < n; done += sizeof(long)) {
        long word = 0;
        size_t take = n - done < sizeof(long) ? n - done : sizeof(long);
        if (take < sizeof(long)) { /* keep the bytes after the data */
            errno = 0;
            word = ptrace(PTRACE_PEEKDATA, tid, (void *)(addr + done), NULL);
            if (errno) return -1;
        }
        memcpy(&word, data + done, take);
        if (ptrace(PTRACE_POKEDATA, tid, (void *)(addr + done), (void *)word) != 0) return -1;
    }
    return 0;
}

/* Call fn(args) in the borrowed thread; 0 with *ret set, or -1 with *why set. The call runs on the
 * thread's stack below its red zone and returns to address 0: the fault stops the thread here, and
 * is never delivered. Signals of the program's own that arrive meanwhile are held back. */
static int remote_call(struct borrowed *b, unsigned long fn, const unsigned long *args, int nargs,
                       double timeout, unsigned long *ret, const char **why) {
    struct user_regs_struct regs = b->regs;
    unsigned long sp = ((b->regs.rsp - 256) & ~0xfUL) - 8; /* 16-byte aligned before the call */
    unsigned long zero = 0;
    if (poke_bytes(b->tid, sp, (unsigned char *)&zero, sizeof zero)) {
        *why = "could not write the thread's stack";
        return -1;
    }
    unsigned long long *slot[6] = {&regs.rdi, &regs.rsi, &regs.rdx, &regs.rcx, &regs.r8, &regs.r9};
    for (int i = 0; i < nargs && i < 6; i++) *slot[i] = args[i];
    regs.rsp = sp;
    regs.rip = fn;
    regs.rax = 0;
    regs.orig_rax = (unsigned long long)-1; /* not in a system call: nothing to restart */
    if (ptrace(PTRACE_SETREGS, b->tid, NULL, &regs)) {
        *why = "could not set the thread's registers";
        return -1;
    }
    int deliver = 0;
    double deadline = now() + timeout;
    for (;;) {
        if (ptrace(PTRACE_CONT, b->tid, NULL, (void *)(long)deliver)) {
            *why = "the thread could not be resumed";
            return -1;
        }
        deliver = 0;
        int status, got = wait_stop(b, &status, deadline);
        if (got < 0) {
            *why = "gone";
            return -1;
        }
        if (got == 0) { /* stop it where it is; the caller restores the saved state */
            ptrace(PTRACE_INTERRUPT, b->tid, NULL, NULL);
            int again = wait_stop(b, &status, now() + 10.0);
            b->at_signal_stop = again > 0 && (status >> 16) == 0;
            if (b->at_signal_stop && WSTOPSIG(status) != SIGSEGV) hold_signal(b, WSTOPSIG(status));
            *why = again < 0 ? "gone" : "a call in the process did not return in time";
            return -1;
        }
        int sig = WSTOPSIG(status);
        if ((status >> 16) != 0) continue; /* a stop of the process (group stop): the call goes on */
        if (sig == SIGSEGV) {
            struct user_regs_struct after;
            if (ptrace(PTRACE_GETREGS, b->tid, NULL, &after)) {
                *why = "could not read the thread's registers";
                return -1;
            }
            b->at_signal_stop = 1;
            if (after.rip == 0) {
                *ret = after.rax;
                return 0;
            }
            *why = "a call in the process faulted";
            return -1;
        }
        hold_signal(b, sig); /* the program's own signal: delivered after the restore */
    }
}

/* Put the saved state back, check it, and let the thread go with the signals held back. */
static const char *restore(struct borrowed *b, int *verified) {
    const char *problem = NULL;
    struct user_regs_struct regs = b->regs;
    if (b->restart_eintr) { /* back onto the syscall instruction, with its number */
        regs.rax = regs.orig_rax;
        regs.rip -= 2;
    }
    if (ptrace(PTRACE_SETREGS, b->tid, NULL, &regs)) problem = "could not restore the registers";
    if (b->xstate_len) {
        struct iovec iov = {b->xstate, b->xstate_len};
        if (ptrace(PTRACE_SETREGSET, b->tid, (void *)(long)b->xstate_note, &iov))
            problem = "could not restore the extended register state";
    }
    /* Read it all back: the general registers must be what was saved, and so must the x87 and SSE
     * state (the first 416 bytes of the area, which every CPU has in the same layout). */
    struct user_regs_struct check;
    *verified = 0;
    if (!problem && ptrace(PTRACE_GETREGS, b->tid, NULL, &check) == 0 &&
        memcmp(&check, &regs, sizeof regs) == 0) {
        *verified = 1;
        if (b->xstate_len) {
            unsigned char *again = malloc(XSTATE_MAX);
            size_t len = 0;
            int note = 0;
            *verified = again && get_xstate(b->tid, again, &len, &note) == 0 && len == b->xstate_len &&
                        memcmp(again, b->xstate, len < 416 ? len : 416) == 0;
            free(again);
        }
        if (!*verified) problem = "the restored registers differ from the saved ones";
    }
    int first = 0, i0 = 0;
    if (b->at_signal_stop && b->nheld) first = b->held[i0++];
    if (ptrace(PTRACE_DETACH, b->tid, NULL, (void *)(long)first) && !problem)
        problem = "could not detach";
    for (int i = b->at_signal_stop ? i0 : 0; i < b->nheld; i++) syscall(SYS_tgkill, b->pid, b->tid, b->held[i]);
    return problem;
}

/* What happened, for the Python side: a short key, a detail and the stall. */
static PyObject *result(const char *key, const char *detail, double stall, unsigned long page,
                        const char *syscall_state, int verified) {
    return Py_BuildValue("{s:s,s:s,s:d,s:k,s:s,s:O}", "status", key, "detail", detail ? detail : "",
                         "stall", stall, "page", page, "syscall", syscall_state, "verified",
                         verified ? Py_True : Py_False);
}

static const char *syscall_state_of(const struct borrowed *b) {
    long rax = (long)b->regs.rax;
    if ((long)b->regs.orig_rax < 0) return "none";
    if (rax == -ERESTARTSYS || rax == -ERESTARTNOINTR || rax == -ERESTARTNOHAND) return "restarted";
    if (rax == -ERESTART_RESTARTBLOCK) return "restarted-block";
    if (b->restart_eintr) return "restarted-eintr";
    if (rax == -EINTR) return "eintr";
    return "finished";
}

static PyObject *inject(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"pid",     "tid",     "errno_location", "is_initialized", "mmap",
                             "add_pending_call", "run_string", "payload", "timeout", "fail_at", NULL};
    int pid, tid, fail_at = 0;
    unsigned long errno_location, is_initialized, mmap_fn, add_pending, run_string;
    Py_buffer payload;
    double timeout = 2.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iikkkkky*|di", kwlist, &pid, &tid, &errno_location,
                                     &is_initialized, &mmap_fn, &add_pending, &run_string, &payload,
                                     &timeout, &fail_at))
        return NULL;
    const char *key = "queued", *detail = NULL, *state = "none";
    unsigned long page = 0, ret = 0;
    double started = now(), stall = 0;
    int verified = 0, attached = 0;
    struct borrowed b;
    memset(&b, 0, sizeof b);
    b.pid = pid;
    b.tid = tid;
    b.xstate = malloc(XSTATE_MAX);
    size_t size = ((size_t)payload.len + 1 + 4095) / 4096 * 4096;
    unsigned char *data = calloc(1, payload.len + 1);

    Py_BEGIN_ALLOW_THREADS;
    if (!b.xstate || !data) {
        key = "failed";
        detail = "out of memory";
        goto done;
    }
    memcpy(data, payload.buf, payload.len);
    if (ptrace(PTRACE_SEIZE, tid, NULL, NULL)) {
        key = errno == EPERM ? "denied" : errno == ESRCH ? "gone" : "failed";
        detail = strerror(errno);
        goto done;
    }
    attached = 1;
    started = now();
    if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL)) {
        key = "failed";
        detail = "could not interrupt the thread";
        goto detach;
    }
    /* The first stop: ours (an event stop), or a signal of the program's own on its way, which goes
     * on to the program at once (our stop is still due and follows). */
    for (;;) {
        int status, got = wait_stop(&b, &status, started + 10.0);
        if (got < 0) {
            key = "gone";
            goto done;
        }
        if (got == 0) { /* an uninterruptible sleep that outlasts us: the detach below cancels our stop */
            key = "failed";
            detail = "the thread did not stop within 10 s (in uninterruptible sleep)";
            goto detach;
        }
        if ((status >> 16) == PTRACE_EVENT_STOP) {
            int sig = WSTOPSIG(status);
            if (sig == SIGTRAP) break;
            key = "stopped"; /* a group stop (SIGSTOP, Ctrl-Z): leave it stopped */
            detail = "the process is stopped (SIGSTOP or Ctrl-Z)";
            goto detach;
        }
        if (ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(status))) {
            key = "gone";
            goto done;
        }
    }
    if (fail_at == STEP_STOPPED) { /* nothing saved yet: let it go from its stop */
        key = "forced";
        detail = "a failure forced after the step";
        goto detach;
    }
    if (ptrace(PTRACE_GETREGS, tid, NULL, &b.regs) ||
        get_xstate(tid, b.xstate, &b.xstate_len, &b.xstate_note)) {
        key = "failed";
        detail = "could not read the thread's registers";
        b.xstate_len = 0;
        goto detach;
    }
    if ((long)b.regs.orig_rax >= 0 && (long)b.regs.rax == -EINTR && !signal_pending(pid, tid)) {
        unsigned char insn[2];
        if (peek_bytes(tid, b.regs.rip - 2, insn, 2) == 0 && insn[0] == 0x0f && insn[1] == 0x05)
            b.restart_eintr = 1;
    }
    state = syscall_state_of(&b);
    if (fail_at == STEP_SAVED) goto forced;

    const char *why = NULL;
    unsigned long errno_addr = 0;
    int saved_errno = 0;
    if (remote_call(&b, errno_location, NULL, 0, timeout, &errno_addr, &why)) goto call_failed;
    if (peek_bytes(tid, errno_addr, (unsigned char *)&saved_errno, sizeof saved_errno)) {
        key = "failed";
        detail = "could not read errno";
        goto restore;
    }
    if (fail_at == STEP_ERRNO) goto forced;
    if (remote_call(&b, is_initialized, NULL, 0, timeout, &ret, &why)) goto call_failed;
    if ((int)ret == 0) {
        key = "not-initialized";
        goto restore;
    }
    if (fail_at == STEP_INITIALIZED) goto forced;
    unsigned long margs[6] = {0, size, 3 /* PROT_READ|PROT_WRITE */, 0x22 /* MAP_PRIVATE|ANON */,
                              (unsigned long)-1, 0};
    if (remote_call(&b, mmap_fn, margs, 6, timeout, &page, &why)) goto call_failed;
    if (page == (unsigned long)-1 || page == 0) {
        key = "mmap";
        page = 0;
        goto restore_errno;
    }
    if (fail_at == STEP_MAPPED) goto forced;
    if (poke_bytes(tid, page, data, payload.len + 1)) {
        key = "failed";
        detail = "could not write the bootstrap";
        goto restore_errno;
    }
    if (fail_at == STEP_WRITTEN) goto forced;
    unsigned long qargs[2] = {run_string, page};
    if (remote_call(&b, add_pending, qargs, 2, timeout, &ret, &why)) goto call_failed;
    if ((int)ret != 0) key = "queue-full";
    if (fail_at == STEP_QUEUED) {
        key = "forced"; /* queued already: the program runs the payload, the rest is restored */
        detail = "a failure forced after the step";
    }
restore_errno:
    if (poke_bytes(tid, errno_addr, (unsigned char *)&saved_errno, sizeof saved_errno) && !detail) {
        key = "failed";
        detail = "could not restore errno";
    }
    goto restore;
forced:
    key = "forced";
    detail = "a failure forced after the step";
    goto restore;
call_failed:
    key = strcmp(why, "gone") == 0 ? "gone" : "failed";
    detail = why;
    if (strcmp(key, "gone") == 0) goto done;
restore:;
    const char *problem = restore(&b, &verified);
    stall = now() - started;
    attached = 0;
    if (problem && strcmp(key, "queued") == 0) {
        key = "failed";
        detail = problem;
    }
    goto done;
detach:
    if (attached) {
        ptrace(PTRACE_DETACH, tid, NULL, NULL);
        /* Not stopped yet (detach needs a stop): leaving the tracer process cancels the pending
         * stop, which the caller does by exiting. */
        attached = 0;
    }
    stall = now() - started;
done:
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&payload);
    free(b.xstate);
    free(data);
    return result(key, detail, stall, page, state, verified);
}

static PyObject *supported(PyObject *self, PyObject *unused) { Py_RETURN_TRUE; }

#else /* not Linux on x86-64 */

static PyObject *inject(PyObject *self, PyObject *args, PyObject *kwargs) {
    PyErr_SetString(PyExc_NotImplementedError, "injection is implemented for Linux on x86-64");
    return NULL;
}

static PyObject *supported(PyObject *self, PyObject *unused) { Py_RETURN_FALSE; }

#endif

static PyMethodDef methods[] = {
    {"inject", (PyCFunction)(void (*)(void))inject, METH_VARARGS | METH_KEYWORDS,
     "Queue a string for PyRun_SimpleString in a live process through one of its threads; a dict "
     "says what happened."},
    {"supported", supported, METH_NOARGS, "Whether this build can inject (Linux on x86-64)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "flameprof._inject", NULL, -1, methods};

PyMODINIT_FUNC PyInit__inject(void) { return PyModule_Create(&module); }
