/* The clock thread: a C thread that wakes every interval and gets a sample taken (by sampler.c).
 *
 * A sample must show every thread where it was at the tick, not where it next lets the GIL go
 * (a thread that computes for 2 ms and then blocks would otherwise be seen blocked nearly always).
 * At each tick the clock looks at who holds the GIL (a lock-free read):
 * - the main thread: the clock asks it to run the sample as a pending call, which it does at its
 *   next bytecode boundary, within microseconds, without handing the GIL over. Before 3.13 a
 *   pending call added from another thread is noticed only at the main thread's next GIL switch,
 *   so the clock also raises the eval-breaker flag (interp_internals.c). If the call has not run
 *   after 0.8 of an interval (the main thread was in a long C call), the clock samples itself.
 * - nobody (every thread is blocked or in C without the GIL, so no stack can change): the clock
 *   takes the GIL and samples.
 * - another thread: the clock asks it to let the GIL go at its next bytecode boundary, as a thread
 *   that has waited a switch interval does, waits for that without queueing for the GIL
 *   (await_free_gil), then takes the GIL and samples.
 * A sample is stamped with the tick's time, whenever it is taken, and records the GIL as the tick
 * found it: its holder and how many threads waited for it (sampler.c gives each row its state).
 * Each tick falls at a random point early in its interval (next_tick): a loop whose period settles on a multiple of the interval
 * would otherwise be seen at the same few points of its period all run long (0.2 ms of work
 * between 2 ms waits in a thread: 7.0 % of the ticks instead of 8.9 % in three runs of eleven,
 * with evenly spaced ticks). The clock thread asks the scheduler to run it at its ticks
 * (raise_clock_priority). Every ``slow_interval`` it also runs a Python callback with the GIL
 * (process counters). One clock per process; fork handlers leave the child with none and sane
 * locks.
 *
 * Its own file: all of it is about threads, the GIL and the scheduler, none about what a sample
 * holds. sampler.c gives it the Sampler and its samples (sampler.h); it gives the module its
 * start, stop, counts and fork handling (clock.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "interp_internals.h"
#include "clock.h"

/* Faults of the thread's own doing: never blocked (faulthandler reports them). */
static const int SYNCHRONOUS_SIGNALS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};

#define TICK_RING 8

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    pthread_t thread;
    int alive, stop, queued;   /* stop and queued: read and written atomically (the main thread takes no lock) */
    uint64_t want, claimed;    /* atomic: the newest tick requested, the newest one a thread took */
    double tick_at[TICK_RING]; /* the time of tick ``seq`` at [seq % TICK_RING] */
    GilAtTick gil_at[TICK_RING]; /* the GIL at tick ``seq``: its holder and waiters */
    double watch;              /* seconds the clock may spin watching the GIL (0 on one CPU) */
    double interval, slow_interval;
    Sampler *sampler;          /* strong reference while alive */
    PyObject *on_slow;         /* strong reference or NULL */
    unsigned long ident;       /* the clock thread's ident, excluded from samples */
    unsigned long lowered_from; /* the program's switch interval while the clock has it lowered (0: not) */
    unsigned long lowered_to;   /* the value it is lowered to */
    uint64_t by_pending, by_clock, by_frozen;  /* samples taken in a pending call / by the clock thread / of those, frozen */
    PyThreadState *main_ts;    /* the main thread's state, compared with the GIL's holder */
} clk = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void
init_cond(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&clk.cond, &attr);
    pthread_condattr_destroy(&attr);
}

static struct timespec
timespec_at(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Wait on the clock's condition until ``deadline`` (monotonic seconds) or until ``until`` holds. */
#define WAIT_UNTIL(deadline, until)                                                   \
    do {                                                                              \
        struct timespec ts_ = timespec_at(deadline);                                  \
        while (!(until) && pthread_cond_timedwait(&clk.cond, &clk.mu, &ts_) != ETIMEDOUT) \
            ;                                                                         \
    } while (0)

#define LOAD(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)
#define STORE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELEASE)

/* Whether tick ``seq`` is this thread's to take: each tick is sampled once, by the main thread in
 * a pending call or by the clock thread. Lock-free, so the main thread never wakes the clock
 * thread: a futex handshake per tick made the scheduler switch the clock thread in on the main
 * thread's core, several context switches a tick. */
static int
claim_tick(uint64_t seq)
{
    uint64_t claimed = LOAD(clk.claimed);
    while (claimed < seq && !LOAD(clk.stop))
        if (__atomic_compare_exchange_n(&clk.claimed, &claimed, seq, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 1;
    return 0;
}

/* Runs on the main thread with the GIL, between two bytecodes: must never raise. */
static int
pending_sample(void *unused)
{
    STORE(clk.queued, 0);
    uint64_t seq = LOAD(clk.want);
    double tick = clk.tick_at[seq % TICK_RING];
    GilAtTick gil = clk.gil_at[seq % TICK_RING];
    if (!claim_tick(seq))
        return 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    Sampler *s = clk.sampler;
    Py_INCREF(s);
    if (flameprof_take_sample(s, clk.ident, tick, &gil) < 0)
        PyErr_Clear();
    __atomic_add_fetch(&clk.by_pending, 1, __ATOMIC_RELEASE);
    Py_DECREF(s);
    PyErr_Restore(et, ev, tb);
    return 0;
}

/* A thread waiting for the GIL asks the holder to let go only after the switch interval (5 ms by
 * default), longer than a tick at high rates, and with several threads computing it may lose the
 * handoff to one of them several times over (3.13, three spinning threads on a loaded machine: no
 * tick for 80 ms). The clock thread lowers it for its own wait only and gives the program's value
 * back once it has the GIL: the program's threads keep their own switching (lowering it for the
 * whole run made every thread switch every few dozen microseconds, which starved a collection that
 * ran finalizers until garbage piled up). */

static unsigned long
quick_switch_interval(void)
{
    unsigned long quick = (unsigned long)(clk.interval * 1e6 / 8);
    return quick < 20 ? 20 : quick;
}

/* The switch interval in microseconds, first set to ``set`` when that is not 0; with the GIL
 * held (3.13 keeps the setter internal: sys's functions then). 0 when it cannot be read. */
static unsigned long
gil_switch_interval(unsigned long set)
{
#if PY_VERSION_HEX < 0x030D0000
    if (set)
        _PyEval_SetSwitchInterval(set);
    return _PyEval_GetSwitchInterval();
#else
    PyObject *setter = PySys_GetObject("setswitchinterval"), *getter = PySys_GetObject("getswitchinterval");
    if (setter == NULL || getter == NULL)
        return 0;
    PyObject *r = set ? PyObject_CallFunction(setter, "d", ((double)set + 0.5) * 1e-6)  /* sys truncates */ : NULL;
    Py_XDECREF(r);
    r = PyObject_CallNoArgs(getter);
    double seconds = r != NULL ? PyFloat_AsDouble(r) : 0.0;
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return (unsigned long)(seconds * 1e6 + 0.5);
#endif
}

/* Give the program its switch interval back (with the GIL held), unless it changed it meanwhile. */
static void
give_back_switch_interval(void)
{
    if (clk.lowered_from && gil_switch_interval(0) == clk.lowered_to)
        gil_switch_interval(clk.lowered_from);
    clk.lowered_from = 0;
}

/* The interval, or set it when ``set`` is not 0, from a thread without the GIL: 3.10 and 3.11 keep
 * it process-wide; 3.12+ per interpreter, which 3.12's setter reaches through the calling thread's
 * current thread state (the clock thread has none while it waits) and 3.13 keeps internal
 * (interp_internals.c finds the field). */
static unsigned long
switch_interval(PyThreadState *ts, unsigned long set)
{
#if PY_VERSION_HEX >= 0x030C0000
    unsigned long *slot = flameprof_switch_interval_slot(PyThreadState_GetInterpreter(ts));
    if (set)
        *slot = set;
    return *slot;
#else
    if (set)
        _PyEval_SetSwitchInterval(set);
    return _PyEval_GetSwitchInterval();
#endif
}

static void
acquire_gil(PyThreadState *ts)
{
    unsigned long saved = switch_interval(ts, 0), quick = quick_switch_interval();
    if (quick < saved) {
        clk.lowered_from = saved;
        clk.lowered_to = switch_interval(ts, quick);
    }
    PyEval_RestoreThread(ts);  /* at interpreter shutdown this ends the thread */
    give_back_switch_interval();
}

/* Take tick ``seq``'s sample, stamped ``tick``, with the interpreter frozen, if it can be frozen
 * within ``budget`` seconds (interp_internals.c, flameprof_gil_freeze): 1 when taken; -1 when the
 * main thread took it meanwhile (it runs the pending call before it lets the GIL go); 0 when it
 * must be taken with the GIL: the holder did not let go in time, or something in the sample is
 * new (then the tick is already the clock's: ``*claimed``). ``*switch_due`` is set when the thread
 * that let the GIL go for it, and that the thaw could not wake, still waits for another thread to
 * take it 30 us after the thaw (a thread that was waiting for the GIL, woken at the thaw, takes it
 * first when there is one): then the clock must take it, and give it back. */
static int
sample_frozen(PyInterpreterState *interp, uint64_t seq, double tick, const GilAtTick *gil, double budget, int *claimed,
              int *switch_due)
{
    PyThreadState *asked;
    *claimed = *switch_due = 0;
    if (!flameprof_gil_freeze(interp, flameprof_monotonic() + budget, clk.watch, &asked))
        return 0;
    int taken = -1;
    if ((*claimed = claim_tick(seq)))
        taken = flameprof_take_frozen_sample(clk.sampler, interp, clk.ident, tick, gil);
    if (!flameprof_gil_thaw(interp, asked) && flameprof_switch_pending(interp, asked)) {
        struct timespec pause = {0, 30000};  /* asleep, not spinning: the woken thread may need this CPU */
        nanosleep(&pause, NULL);
        *switch_due = flameprof_switch_pending(interp, asked);
    }
    return taken;
}

/* The clock thread must run at its ticks even when every CPU is busy with the program's threads,
 * and must not be kept waiting for a CPU by a thread it has just woken (its own CPU taken, it
 * missed the ticks while that thread computed and resumed when it blocked: a thread computing
 * 2 ms and sleeping 2 ms was seen computing 38 % of the time, not 49 %). Where allowed (root,
 * CAP_SYS_NICE or an RLIMIT_RTPRIO), it runs SCHED_FIFO at the lowest real-time priority: it
 * preempts the program's threads for the microseconds of a tick, and sleeps the rest of the time
 * (it spins 50 us at most, and not on one CPU; the tick hooks, which run Python and write files,
 * run at its old policy).
 * Elsewhere, on Linux 6.12+ (EEVDF), it asks for the shortest time slice, so that its wake-up
 * preempts a thread computing on its CPU (at the default slice it waited for that thread to
 * block: a loop of 1.7 ms of Python and 2 ms of sleep was seen computing in 14-18 % of the ticks,
 * not 36 %). Either way the thread's nice value is kept; where neither works nothing changes. */
#if defined(__linux__)
#include <sys/syscall.h>
struct sched_attr_v1 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};
#endif

static int clock_realtime;  /* the clock thread runs SCHED_FIFO (policy toggled around the hooks) */

static void
raise_clock_priority(void)
{
    struct sched_param rt = {.sched_priority = sched_get_priority_min(SCHED_FIFO)};
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &rt) == 0) {
        clock_realtime = 1;
        return;
    }
#if defined(__linux__) && defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
    struct sched_attr_v1 attr;
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0 || attr.policy != SCHED_OTHER)
        return;
    attr.size = sizeof attr;
    attr.flags = 0;
    attr.runtime = 100 * 1000;  /* ns: the shortest slice the kernel grants */
    (void)syscall(SYS_sched_setattr, 0, &attr, 0);
#endif
}

/* Around the tick hooks: the program's policy (1: back to real time). */
static void
hooks_priority(int realtime)
{
    if (!clock_realtime)
        return;
    struct sched_param param = {.sched_priority = realtime ? sched_get_priority_min(SCHED_FIFO) : 0};
    pthread_setschedparam(pthread_self(), realtime ? SCHED_FIFO : SCHED_OTHER, &param);
}

/* A uniform number in [0, 1) from an xorshift generator: the ticks' jitter needs no quality beyond
 * being independent of the program. */
static double
uniform(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (double)(*state >> 11) / 9007199254740992.0;
}

/* How far into its interval a tick may fall, at random. A quarter is enough to keep a loop from
 * settling on the ticks' phase (0.2 ms of work between 2 ms waits in a thread, five runs: within
 * 0.52 points, mean -0.1), and keeps ticks at least 0.75 of an interval apart, longer than the
 * clock's own work after a tick, so that work never pushes the next tick away from where the
 * program was (with the whole interval, 1 ms of Python between torch ops in a thread read 0.7
 * points low on average, six runs down to -1.9), and a part lasting an interval or more keeps the
 * small spread of evenly spaced ticks. */
#define TICK_JITTER 0.25

/* The next tick: at a random point of the first TICK_JITTER of the interval after ``*slot`` (its
 * start, advanced here). A clock that fell behind by more than an interval (starved) starts afresh
 * from ``now`` rather than catching up. */
static double
next_tick(double *slot, double now, uint64_t *rng)
{
    *slot += clk.interval;
    if (*slot + clk.interval < now)
        *slot = now;
    return *slot + clk.interval * TICK_JITTER * uniform(rng);
}

static void *
clock_main(void *unused)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    clk.ident = PyThread_get_thread_ident();
    PyThreadState *ts = PyEval_SaveThread();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(ts);
    raise_clock_priority();
    /* With one CPU to run on, a thread the clock watches for cannot run while it spins */
    cpu_set_t cpus;
    clk.watch = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) < 2 ? 0.0 : 50e-6;
    /* the slow callback runs at the first tick (a followed fork writes its part then), then every
     * slow_interval */
    double slot = flameprof_monotonic(), last_slow = slot - clk.slow_interval;
    uint64_t rng = ((uint64_t)(slot * 1e9) ^ (uint64_t)getpid() << 32) | 1;
    double next = slot + clk.interval * TICK_JITTER * uniform(&rng);
    double freeze_budget = clk.interval / 2;
    pthread_mutex_lock(&clk.mu);
    while (!clk.stop) {
        WAIT_UNTIL(next, clk.stop);
        if (clk.stop)
            break;
        double tick = flameprof_monotonic();
        next = next_tick(&slot, tick, &rng);
        uint64_t seq = LOAD(clk.want) + 1;
        /* the GIL as the tick found it, before anything here asks its holder to let it go */
        PyThreadState *holder = flameprof_gil_holder(interp);
        GilAtTick gil = {holder, flameprof_gil_waiters(interp)};
        clk.tick_at[seq % TICK_RING] = tick;
        clk.gil_at[seq % TICK_RING] = gil;
        STORE(clk.want, seq);  /* publishes the tick's time and GIL to the pending call */
        int ask_main = holder != NULL && holder == clk.main_ts;
        pthread_mutex_unlock(&clk.mu);
        if (ask_main) {
            if (!__atomic_exchange_n(&clk.queued, 1, __ATOMIC_ACQ_REL) && Py_AddPendingCall(pending_sample, NULL) < 0)
                STORE(clk.queued, 0);
#if PY_VERSION_HEX < 0x030D0000
            flameprof_wake_main_thread(interp, clk.main_ts);
#endif
        }
        /* The main thread does not signal its answer (waking this thread from there cost the
         * program context switches every tick): the clock looks again after 0.8 of an interval,
         * on its own timer, or at the next tick if that is sooner (a later look would move the
         * next tick away from the main thread's Python work), and samples from here if the tick
         * is still unclaimed. */
        pthread_mutex_lock(&clk.mu);
        if (ask_main) {
            double look = tick + clk.interval * 0.8;
            WAIT_UNTIL(look < next ? look : next, clk.stop);
        }
        int fallback = !clk.stop && LOAD(clk.claimed) < seq, with_gil = 0, claimed = 0, switch_due = 0;
        double now = flameprof_monotonic();
        int slow = !clk.stop && clk.on_slow != NULL && now - last_slow >= clk.slow_interval;
        pthread_mutex_unlock(&clk.mu);
        if (fallback) {
            int frozen = sample_frozen(interp, seq, tick, &gil, freeze_budget, &claimed, &switch_due);
            if (frozen > 0) {
                clk.by_frozen++;
                clk.by_clock++;
            }
            with_gil = frozen == 0;
        }
        if (with_gil || slow || switch_due) {
            acquire_gil(ts);
            if (with_gil && (claimed || claim_tick(seq))) {
                if (flameprof_take_sample(clk.sampler, clk.ident, tick, &gil) < 0)
                    PyErr_Clear();
                clk.by_clock++;
            }
            if (slow && clk.on_slow != NULL) {
                last_slow = now;
                hooks_priority(0);
                /* The hooks read /proc and write parts: each system call lets the GIL go, and
                 * while the program runs Python, taking it back waited a switch interval (5 ms),
                 * so one run of the hooks kept the clock from ticking for 10-30 ms. A tick's
                 * interval (1 ms at most) instead, which holds for every thread meanwhile: an
                 * eighth of it cut the hooks' own Python into slices that each waited for the
                 * program's busy threads, and made them switch so often that they lost work: with
                 * 64 busy threads at 1 kHz, 0.48 of their plain throughput over 20 s, 0.81 at a
                 * tick. */
                unsigned long saved = gil_switch_interval(0), hooks_us = (unsigned long)(clk.interval * 1e6);
                hooks_us = hooks_us < 1000 ? hooks_us : 1000;
                if (hooks_us < saved) {
                    clk.lowered_from = saved;
                    clk.lowered_to = gil_switch_interval(hooks_us);
                }
                int gc_was_enabled = PyGC_Disable();  /* no finalizers of the program here */
                double hooks_start = flameprof_monotonic();
                PyObject *r = PyObject_CallNoArgs(clk.on_slow);
                if (r == NULL)
                    PyErr_Clear();
                Py_XDECREF(r);
                if (gc_was_enabled)
                    PyGC_Enable();
                flameprof_sampler_unwatched(clk.sampler, flameprof_monotonic() - hooks_start);
                give_back_switch_interval();
                hooks_priority(1);
            }
            ts = PyEval_SaveThread();
        }
        pthread_mutex_lock(&clk.mu);
    }
    pthread_mutex_unlock(&clk.mu);
    PyEval_RestoreThread(ts);
    PyGILState_Release(gil);
    return NULL;
}

PyObject *
flameprof_start_clock(Sampler *s, PyObject *args)
{
    double interval, slow_interval;
    PyObject *on_slow;
    if (!PyArg_ParseTuple(args, "dOd", &interval, &on_slow, &slow_interval))
        return NULL;
    if (interval <= 0) {
        PyErr_SetString(PyExc_ValueError, "interval must be positive");
        return NULL;
    }
    pthread_mutex_lock(&clk.mu);
    int busy = clk.alive;
    pthread_mutex_unlock(&clk.mu);
    if (busy) {
        PyErr_SetString(PyExc_RuntimeError, "a native sampler clock is already running in this process");
        return NULL;
    }
    Py_INCREF(s);
    clk.sampler = s;
    clk.on_slow = on_slow == Py_None ? NULL : Py_NewRef(on_slow);
    clk.interval = interval;
    clk.slow_interval = slow_interval;
    clk.stop = clk.queued = 0;
    clk.want = clk.claimed = 0;
    clk.by_pending = clk.by_frozen = clk.by_clock = 0;
    clk.ident = 0;
    clk.alive = 1;
    clk.lowered_from = 0;
    clk.main_ts = flameprof_main_thread_state(PyInterpreterState_Get());
    flameprof_sampler_mark_start(s);
    /* The clock thread starts with the program's signals blocked, so the kernel delivers them to
     * the program's threads: before 3.13 a handler tripped in another thread than the main one
     * does not wake the main thread's eval loop, and the Python handler may then never run. */
    sigset_t blocked, saved;
    sigfillset(&blocked);
    for (size_t i = 0; i < sizeof(SYNCHRONOUS_SIGNALS) / sizeof(int); i++)
        sigdelset(&blocked, SYNCHRONOUS_SIGNALS[i]);
    pthread_sigmask(SIG_BLOCK, &blocked, &saved);
    int err = pthread_create(&clk.thread, NULL, clock_main, NULL);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (err != 0) {
        clk.alive = 0;
        Py_CLEAR(clk.on_slow);
        clk.sampler = NULL;
        Py_DECREF(s);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* Stop the clock thread and wait for it (without the GIL); returns whether one was running. */
PyObject *
flameprof_stop_clock(PyObject *unused1, PyObject *unused2)
{
    pthread_mutex_lock(&clk.mu);
    int alive = clk.alive;
    int self = alive && pthread_equal(clk.thread, pthread_self());
    STORE(clk.stop, 1);
    pthread_cond_broadcast(&clk.cond);
    pthread_mutex_unlock(&clk.mu);
    if (!alive || self)  /* called from the clock thread (a slow callback): it ends after this */
        return PyBool_FromLong(alive);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(clk.thread, NULL);
    Py_END_ALLOW_THREADS
    pthread_mutex_lock(&clk.mu);
    clk.alive = 0;
    pthread_mutex_unlock(&clk.mu);
    Sampler *s = clk.sampler;
    clk.sampler = NULL;
    Py_CLEAR(clk.on_slow);
    Py_XDECREF(s);
    Py_RETURN_TRUE;
}

PyObject *
flameprof_clock_running(PyObject *unused1, PyObject *unused2)
{
    pthread_mutex_lock(&clk.mu);
    int alive = clk.alive && !clk.stop;
    pthread_mutex_unlock(&clk.mu);
    return PyBool_FromLong(alive);
}

PyObject *
flameprof_clock_stats(PyObject *unused1, PyObject *unused2)
{
    pthread_mutex_lock(&clk.mu);
    PyObject *r = Py_BuildValue("{sKsKsKsK}", "ticks_requested", (unsigned long long)LOAD(clk.want),
                                "by_pending_call", (unsigned long long)LOAD(clk.by_pending),
                                "frozen", (unsigned long long)clk.by_frozen,
                                "by_clock_thread", (unsigned long long)clk.by_clock);
    pthread_mutex_unlock(&clk.mu);
    return r;
}

static void
atfork_prepare(void)
{
    pthread_mutex_lock(&clk.mu);
}

static void
atfork_parent(void)
{
    pthread_mutex_unlock(&clk.mu);
}

/* The child has no clock thread: fresh locks, nothing running (its references stay with the parent's copy). */
static void
atfork_child(void)
{
    pthread_mutex_init(&clk.mu, NULL);
    init_cond();
    clk.alive = clk.queued = 0;
    clk.stop = 1;
    clk.sampler = NULL;
    clk.on_slow = NULL;
}

void
flameprof_clock_after_fork(void)
{
    if (!clk.alive)
        give_back_switch_interval();
    clk.lowered_from = 0;
}

void
flameprof_clock_init(void)
{
    init_cond();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}
