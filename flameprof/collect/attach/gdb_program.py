"""Runs inside gdb's Python, attached to the target: queue the attach bootstrap as a pending call.

Maps one anonymous page (``mmap``, a bare system call: no malloc lock is taken while the target is
stopped at an arbitrary instruction), writes the bootstrap source into it and queues
``PyRun_SimpleString(page)`` with ``Py_AddPendingCall``. It prints ``FLAMEPROF-QUEUED`` or
``FLAMEPROF-ERROR: <key>``, which ``gdb.py`` reads. Not importable outside gdb (``import gdb``).
"""

import os

import gdb


def flameprof_inject():
    data = os.environ["FLAMEPROF_ATTACH_PAYLOAD"].encode("ascii") + b"\0"
    for lib in ("libc", "libpython"):
        gdb.execute("sharedlibrary " + lib, to_string=True)
    try:
        gdb.parse_and_eval("Py_AddPendingCall")
        gdb.parse_and_eval("PyRun_SimpleString")
    except gdb.error:
        print("FLAMEPROF-ERROR: no-python-api")
        return
    if int(gdb.parse_and_eval("((int (*)(void))Py_IsInitialized)()")) == 0:
        print("FLAMEPROF-ERROR: not-initialized")
        return
    size = (len(data) + 4095) // 4096 * 4096
    addr = int(
        gdb.parse_and_eval(
            f"(long)((void *(*)(void *, unsigned long, int, int, int, long))mmap)(0, {size}, 3, 0x22, -1, 0)"
        )
    )
    if addr == -1 or addr == 0:
        print("FLAMEPROF-ERROR: mmap")
        return
    gdb.selected_inferior().write_memory(addr, data)
    rc = int(
        gdb.parse_and_eval(
            f"((int (*)(void *, void *))Py_AddPendingCall)((void *)PyRun_SimpleString, (void *){addr})"
        )
    )
    print("FLAMEPROF-QUEUED" if rc == 0 else "FLAMEPROF-ERROR: pending-call-queue-full")


flameprof_inject()
