# Types of flameprof._inject, attach's ptrace injector (native/inject.c).

def inject(
    pid: int,
    tid: int,
    errno_location: int,
    is_initialized: int,
    mmap: int,
    add_pending_call: int,
    run_string: int,
    payload: bytes,
    timeout: float = 2.0,
    fail_at: int = 0,
) -> dict[str, str | float | int | bool]: ...
def supported() -> bool: ...
